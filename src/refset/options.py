"""Bounds on what reading a reference set may spend: one frozen :class:`Limits`, passed where it is needed
(``refset.load(..., limits=)``, ``refset.ReferenceFileSystem(..., limits=)``,
``refset.open_dataset(..., limits=)``) and kept by a set opened with it (see docs/reliability.md)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Limits", "DEFAULT_LIMITS"]


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on reading one reference set.

    ``decompressed``: bytes a gzip/zstd document or a packed block may expand to.
    ``gen_memory``: bytes a document's Version 1 ``gen`` blocks may be estimated to need once expanded.
    ``template_seconds``: seconds of jinja2 rendering a document's templates may take in all (a
    watchdog stops a template that runs on).
    ``template_memory``: bytes any one value a template builds, and its output, may take.
    ``block_cache``: bytes of decoded blocks (parquet record files, packed segments) a lazily read set
    keeps for key lookups, least recently used dropped first: a pattern of lookups that touches every
    block decodes each once while they fit.
    """

    decompressed: int = 4 << 30
    gen_memory: int = 4 << 30
    template_seconds: float = 1.0
    template_memory: int = 64 << 20
    block_cache: int = 512 << 20

    def __post_init__(self) -> None:
        for name in ("decompressed", "gen_memory", "template_memory", "block_cache"):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
                raise ValueError(f"Limits.{name}: expected a positive integer, got {value!r}")
        t = self.template_seconds
        if isinstance(t, bool) or not isinstance(t, int | float) or not t > 0:
            raise ValueError(f"Limits.template_seconds: expected a positive number, got {t!r}")


#: The limits used where none are given.
DEFAULT_LIMITS = Limits()
