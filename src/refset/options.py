"""Process-wide bounds on what reading a reference set may allocate (see docs/reliability.md)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Limits", "LIMITS", "set_limits"]


@dataclass
class Limits:
    """``decompressed``: bytes a gzip/zstd document or packed index may expand to.
    ``gen_memory``: bytes a document's ``gen`` blocks may be estimated to need once expanded."""

    decompressed: int = 4 << 30
    gen_memory: int = 4 << 30


LIMITS = Limits()


def set_limits(decompressed: int | None = None, gen_memory: int | None = None) -> Limits:
    """Change the process-wide limits (see :class:`Limits`); returns the old ones."""
    old = Limits(LIMITS.decompressed, LIMITS.gen_memory)
    for name, value in (("decompressed", decompressed), ("gen_memory", gen_memory)):
        if value is None:
            continue
        if not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
            raise ValueError(f"{name}: expected a positive integer, got {value!r}")
        setattr(LIMITS, name, value)
    return old
