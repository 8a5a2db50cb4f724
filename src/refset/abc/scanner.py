"""What a scanner is: one kind of data file read into reference sets.

A scanner class says whether a file is its kind (:meth:`Scanner.probe`, from the file's first bytes);
an instance holds its options (given to the constructor) and scans files (:meth:`Scanner.__call__`).
One instance may scan many files and keep what files of one product share (parsed HDF5 object headers)
for the next ones: a run over many files uses one instance per kind, and such memos live as long as
the run, never in the process. Instances are not thread-safe (one per thread) unless their class says
:attr:`Scanner.shared`.

The registry (:mod:`refset.scan.registry`) lists the built-in scanners and those installed under the
``refset.scanners`` entry-point group.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from refset.io.scanfile import ScanFile
    from refset.model.refset import ReferenceSet

__all__ = ["Scanner", "HEAD", "INLINE_THRESHOLD", "UnusedDropWarning", "DropList", "common_options"]

#: Bytes of a file's beginning given to :meth:`Scanner.sniff` (all of it when the file is shorter).
HEAD = 1 << 10

#: Chunks smaller than this many bytes are stored in the set (see docs/scan.md for the measurement).
INLINE_THRESHOLD = 500


class UnusedDropWarning(UserWarning):
    """A name in ``drop_variables`` that is no variable of the scanned file (a typo, or a list meant
    for other files). ``names``: those names; ``url``: the file."""

    def __init__(self, names: list[str], url: str) -> None:
        self.names, self.url = names, url
        super().__init__(f"drop_variables: no variable {', '.join(map(repr, names))} in {url}")


class DropList(set[str]):
    """The names to drop in one file, remembering which of them the scanner asked about and found."""

    def __init__(self, names: Iterable[str]) -> None:
        super().__init__(names)
        self.found: set[str] = set()

    def __contains__(self, name: object) -> bool:
        hit = super().__contains__(name)
        if hit:
            self.found.add(str(name))
        return hit

    def warn_unused(self, url: str) -> None:
        """One :class:`UnusedDropWarning` for the names the file lacked."""
        import warnings

        if self - self.found:
            warnings.warn(UnusedDropWarning(sorted(self - self.found), url), stacklevel=4)


def common_options(inline_threshold: int, drop_variables: Iterable[str] | str,
                   subchunk: int | None) -> tuple[int, tuple[str, ...], int | None]:
    """The options every scanner takes, checked: ``(inline_threshold, drop_variables, subchunk)``."""
    if isinstance(inline_threshold, bool) or not isinstance(inline_threshold, int) or inline_threshold < 0:
        raise ValueError(f"inline_threshold: must be >= 0, got {inline_threshold}")
    if subchunk is not None and (isinstance(subchunk, bool) or not isinstance(subchunk, int) or subchunk <= 0):
        raise ValueError(f"subchunk: must be a positive number of bytes, got {subchunk}")
    names = (drop_variables,) if isinstance(drop_variables, str) else tuple(drop_variables)
    return inline_threshold, names, subchunk


class Scanner(ABC):
    """A kind of data file and how to reference it.

    Class attributes
    ----------------
    name
        The kind's name (``"hdf5"``, ``"netcdf3"``), as ``refset scan`` reports it.
    options
        Keyword options its constructor takes besides the ones every scanner takes
        (``inline_threshold``, ``drop_variables``, ``subchunk``).
    """

    name: ClassVar[str]
    options: ClassVar[frozenset[str]] = frozenset()
    #: Whether one instance may scan files on several threads at once (it keeps nothing of a file on
    #: itself, only memos each read or written whole): the threads of ``Scan.many`` then share one, so
    #: that what one file teaches (a GRIB grid's coordinates, an inventory's template) serves them all.
    shared: ClassVar[bool] = False

    #: The options this instance was made with (it pickles as them: a run's memos stay behind).
    config: dict[str, Any]

    def __init__(self, **options: Any) -> None:
        """Keyword options only: ``inline_threshold``, ``drop_variables`` and ``subchunk`` (every
        scanner takes them, :func:`common_options` checks them) and the class's
        :attr:`options`. Note to implementers: keep what you were given in :attr:`config`."""
        self.config = dict(options)

    @classmethod
    @abstractmethod
    def sniff(cls, head: bytes) -> bool:
        """Whether a file starting with ``head`` (its first :data:`HEAD` bytes) is this kind."""

    @classmethod
    def probe(cls, read_at: Callable[[int, int], bytes], size: int) -> bool:
        """Whether the file is this kind, reading more than its head where the format needs to
        (an HDF5 superblock after a large user block). ``read_at(offset, n)``: ``n`` bytes at
        ``offset`` (fewer at the end). Note to implementers: the default asks :meth:`sniff`."""
        return cls.sniff(read_at(0, HEAD))

    @abstractmethod
    def __call__(self, file: ScanFile) -> ReferenceSet:
        """The reference set of ``file`` (its references name ``file.url``). A name to drop that the
        file lacks warns with :class:`refset.scan.UnusedDropWarning`; a variable that cannot be
        referenced exactly raises :class:`~refset.errors.Unsupported` naming it; a malformed file
        raises :class:`~refset.errors.InvalidFile`."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} scanner ({self.name})>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_remake, (type(self), dict(self.config)))


def _remake(cls: type[Scanner], config: dict[str, Any]) -> Scanner:
    return cls(**config)
