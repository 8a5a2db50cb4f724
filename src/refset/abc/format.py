"""What a stored form of a reference set is: a reader and a writer, with what they hold.

A form (JSON Version 0 or 1, fsspec's parquet layout, refset's packed file) is a :class:`StoredForm`;
the registry (:mod:`refset.formats.registry`) lists the built-in forms and those installed under the
``refset.formats`` entry-point group, and tells a stored set's form by its content. Capability flags say
what a form holds; a form never advertises what its writer refuses.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from refset.errors import InvalidOption

if TYPE_CHECKING:
    from refset.abc.source import Source
    from refset.model.refset import ReferenceSet
    from refset.options import Limits

__all__ = ["StoredForm", "Option"]


@dataclass(frozen=True, slots=True)
class Option:
    """One writer option: its name, type and allowed values, checked by ``save`` and the CLI alike."""

    name: str
    kind: type  # int, float, bool, str (one of ``choices``; any text when there are none) or dict
    help: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    none_ok: bool = False  # None (``none`` on the command line) means the writer's default

    def allowed(self) -> str:
        """What the option takes, in words."""
        if self.kind is bool:
            text = "true or false"
        elif self.kind is dict:
            text = "a mapping (JSON on the command line)"
        elif self.kind is str and not self.choices:
            text = "text"
        elif self.choices:
            text = "one of " + ", ".join(self.choices)
        else:
            what = "an integer" if self.kind is int else "a number"
            if self.minimum is not None and self.maximum is not None:
                text = f"{what} from {self.minimum:g} to {self.maximum:g}"
            elif self.minimum is not None:
                text = f"{what} >= {self.minimum:g}"
            else:
                text = what
        return text + (" (or none)" if self.none_ok else "")

    def check(self, value: Any, fmt: str) -> Any:
        """``value`` when allowed, else :class:`~refset.errors.InvalidOption` naming option, value and
        what is allowed."""
        if value is None and self.none_ok:
            return None
        ok = False
        if self.kind is bool:
            ok = isinstance(value, bool)
        elif self.kind is str:
            ok = isinstance(value, str) and (not self.choices or value in self.choices)
        elif self.kind is dict:
            ok = isinstance(value, Mapping) and all(isinstance(k, str) for k in value)
        elif self.kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif self.kind is float:
            ok = isinstance(value, int | float) and not isinstance(value, bool) and value == value
        if ok and self.kind in (int, float):
            ok = ((self.minimum is None or value >= self.minimum)
                  and (self.maximum is None or value <= self.maximum))
        if not ok:
            raise InvalidOption(f"{fmt} option {self.name}={value!r}: expected {self.allowed()}")
        return value

    def parse(self, text: str, fmt: str) -> Any:
        """The value of command-line text ``text`` (``true``/``false``, numbers, ``none``), checked."""
        t = text.strip().lower()
        value: Any = text
        if self.none_ok and t in ("none", "null"):
            return None
        if self.kind is bool:
            value = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}.get(t, text)
        elif self.kind is str:
            value = t if self.choices else text
        elif self.kind is dict:
            import json

            try:
                value = json.loads(text)
            except ValueError:
                pass
        else:
            try:
                value = self.kind(t)
            except ValueError:
                pass
        return self.check(value, fmt)


class StoredForm(ABC):
    """One stored form of reference sets.

    Class attributes
    ----------------
    name, description
        How ``save(format=)`` and the command line name it, and what it is in words.
    suffixes
        Destination names that ask for it (the longest match wins: ``.v1.json`` before ``.json``).
    prefixes
        Destination URLs that ask for it by their scheme (``icechunk://PATH``), whatever their suffix.
    magic
        What its files start with (documentation; detection reads the content).
    directory
        A set of this form is a directory of files, not one file.
    zarr_v3
        It holds arrays with zarr v3 metadata (``zarr.json``).
    other_keys
        It holds keys outside any array (plain key/value sets, non-canonical chunk keys, references
        of metadata stored in files), not only zarr metadata and chunks.
    verbatim_metadata
        It keeps metadata documents byte for byte (else as parsed JSON, written again compactly).
    readable
        Its sets are read back by refset (a written-only form, such as an Icechunk repository, is read by
        its own library; the conformance suite :class:`refset.testing.FormTests` is for readable forms).
    parts
        It holds variables made of parts (see docs/formats.md); no form does yet.
    options
        The options its writer takes (checked by ``save`` and the command line alike).
    """

    name: ClassVar[str]
    description: ClassVar[str]
    suffixes: ClassVar[tuple[str, ...]]
    prefixes: ClassVar[tuple[str, ...]] = ()
    magic: ClassVar[tuple[bytes, ...]] = ()
    directory: ClassVar[bool] = False
    zarr_v3: ClassVar[bool] = True
    other_keys: ClassVar[bool] = True
    verbatim_metadata: ClassVar[bool] = True
    parts: ClassVar[bool] = False
    readable: ClassVar[bool] = True
    options: ClassVar[tuple[Option, ...]] = ()

    @abstractmethod
    def read(self, source: str, *, storage_options: Mapping[str, Any] | None = None,
             head: bytes | None = None, limits: Limits | None = None, **options: Any) -> Source:
        """The :class:`~refset.abc.source.Source` of the set at ``source``; ``head``: its first bytes
        when detection read them already (the reader starts from them); ``options``: the reader's."""

    @abstractmethod
    def write(self, rs: ReferenceSet, dest: str, *, storage_options: Mapping[str, Any] | None = None,
              **options: Any) -> None:
        """Write ``rs`` (every table read) to ``dest`` atomically; ``options`` checked already."""

    def check_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """``options`` for this format's writer, each checked; :class:`~refset.errors.InvalidOption`
        names an unknown option or a value outside what the option allows."""
        known = {o.name: o for o in self.options}
        out = {}
        for name, value in options.items():
            if name not in known:
                raise InvalidOption(f"format {self.name!r} has no option {name!r}; {self.takes()}")
            out[name] = known[name].check(value, self.name)
        return out

    def parse_options(self, items: Iterable[str]) -> dict[str, Any]:
        """Command-line ``NAME=VALUE`` items, parsed and checked (see :meth:`check_options`)."""
        known = {o.name: o for o in self.options}
        out = {}
        for item in items:
            name, sep, text = item.partition("=")
            name = name.strip()
            if name not in known:
                raise InvalidOption(f"format {self.name!r} has no option {name!r}; {self.takes()}")
            if not sep:
                raise InvalidOption(f"{self.name} option {item!r}: expected {name}=VALUE, VALUE "
                                    f"{known[name].allowed()}")
            out[name] = known[name].parse(text, self.name)
        return out

    def takes(self) -> str:
        """The options this format's writer takes, in words."""
        if not self.options:
            return "it takes no options"
        return "it takes: " + "; ".join(f"{o.name} ({o.allowed()})" for o in self.options)

    def __repr__(self) -> str:
        return f"<stored form {self.name!r}>"
