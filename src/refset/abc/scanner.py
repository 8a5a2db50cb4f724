"""What a scanner is: one kind of data file read into reference sets.

A scanner class says whether a file is its kind (:meth:`Scanner.probe`, from the file's first bytes);
an instance holds its options (given to the constructor) and scans files (:meth:`Scanner.__call__`).
One instance may scan many files and keep what files of one product share (parsed HDF5 object headers)
for the next ones: a run over many files uses one instance per kind, and such memos live as long as
the run, never in the process. Instances are not thread-safe (one per thread) unless their class says
:attr:`Scanner.shared`.

Every scan goes through one frame, :meth:`Scanner.__call__` (final, as zarr's ``abc/store.py`` builds
its defaults on a few primitives): it makes the names to drop (:class:`DropList`) and the writer
(:class:`~refset.model.setwriter.SetWriter`), runs the class's walk (:meth:`Scanner.walk`, the one
primitive a scanner implements), refuses data that overlaps the metadata the walk read, turns the one
:class:`~refset.io.scanfile.Broken` (a structure no valid file has, or a library's refusal of the file)
into :class:`~refset.errors.InvalidFile` naming the file, warns of names to drop the file lacks, and
builds the set with the small chunks read in one batch.

The registry (:mod:`refset.scan.registry`) lists the built-in scanners and those installed under the
``refset.scanners`` entry-point group.
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar, final

from refset.errors import InvalidFile
from refset.io.scanfile import Broken, ScanFile
from refset.model.setwriter import SetWriter

if TYPE_CHECKING:
    from refset.abc.bytestore import ByteStore
    from refset.model.refset import ReferenceSet

__all__ = ["Scanner", "Broken", "HEAD", "INLINE_THRESHOLD", "SidecarWarning", "UnusedDropWarning", "DropList", "common_options"]

#: Bytes of a file's beginning given to :meth:`Scanner.sniff` (all of it when the file is shorter).
HEAD = 1 << 10

#: Chunks smaller than this many bytes are stored in the set (see docs/scan.md for the measurement).
INLINE_THRESHOLD = 500


class SidecarWarning(UserWarning):
    """A sidecar (a GRIB file's ``.idx`` inventory) that does not describe its data file: it was not
    used, the file was read itself (its values are right). ``url``: the data file; ``sidecar``: the
    sidecar; ``why``: what disagrees."""

    def __init__(self, url: str, sidecar: str, why: str) -> None:
        super().__init__(f"{sidecar} does not describe {url} ({why}): not used, the file was read whole")
        self.url, self.sidecar, self.why = url, sidecar, why

    def __reduce__(self) -> tuple[Any, ...]:
        return (SidecarWarning, (self.url, self.sidecar, self.why))


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
    title
        How messages name the format (``"NetCDF3"``, ``"TIFF"``); the name by default.
    options
        Keyword options its constructor takes besides the ones every scanner takes
        (``inline_threshold``, ``drop_variables``, ``subchunk``).

    Note to implementers: implement :meth:`sniff` (and :meth:`probe` where the head does not tell)
    and :meth:`walk`; take the common options through ``Scanner.__init__``. :meth:`__call__` is the
    frame every scan goes through and is not overridden (a class written before the frame, which
    overrides it, still scans with its own, with a ``DeprecationWarning``).
    """

    name: ClassVar[str]
    title: ClassVar[str] = ""
    options: ClassVar[frozenset[str]] = frozenset()
    #: Whether one instance may scan files on several threads at once (it keeps nothing of a file on
    #: itself, only memos each read or written whole): the threads of ``Scan.many`` then share one, so
    #: that what one file teaches (a GRIB grid's coordinates, an inventory's template) serves them all.
    shared: ClassVar[bool] = False
    #: Whether its kind is a directory (a zarr store), told by :meth:`probe_directory`, not a file.
    directory: ClassVar[bool] = False

    #: The options this instance was made with (it pickles as them: a run's memos stay behind).
    config: dict[str, Any]
    #: The common options, checked (:func:`common_options`).
    inline_threshold: int
    drop: tuple[str, ...]
    subchunk: int | None

    def __init__(self, *, inline_threshold: int = INLINE_THRESHOLD, drop_variables: Iterable[str] | str = (),
                 subchunk: int | None = None, **options: Any) -> None:
        """Keyword options only: ``inline_threshold``, ``drop_variables`` and ``subchunk`` (every
        scanner takes them, :func:`common_options` checks them) and the class's :attr:`options`, all
        kept in :attr:`config`. Note to implementers: a subclass taking options of its own checks them
        and passes them on here, so that the instance pickles as them."""
        self.inline_threshold, self.drop, self.subchunk = common_options(inline_threshold, drop_variables,
                                                                         subchunk)
        self.config = {"inline_threshold": inline_threshold, "drop_variables": self.drop, "subchunk": subchunk,
                       **options}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__call__" in cls.__dict__:  # the interface before the frame: the class scans files itself
            warnings.warn(f"{cls.__module__}.{cls.__qualname__} overrides Scanner.__call__, which is the frame "
                          "of every scan since refset's scanners share it: implement walk(file, out, drop) "
                          "instead (the frame then makes the writer, checks the data against the metadata "
                          "and names the file in errors); an overriding __call__ will stop being called",
                          DeprecationWarning, stacklevel=3)  # the class statement
            if getattr(cls.walk, "__isabstractmethod__", False):
                cls.walk = _scans_itself  # type: ignore[method-assign]

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

    @classmethod
    def probe_directory(cls, store: ByteStore) -> bool:
        """Whether the directory ``store`` is at is this kind (a scanner whose :attr:`directory` says
        so; ``store.exists(name)`` tells what it holds). Note to implementers: the default is no."""
        return False

    @abstractmethod
    def walk(self, file: ScanFile, out: SetWriter, drop: DropList) -> ScanFile | None:
        """Read ``file``'s structure into ``out`` (groups and arrays, chunks as byte ranges into the
        data file), leaving out the names in ``drop`` (ask ``name in drop`` for each, so that the
        frame knows which were found). Return the file the references point into when it is not
        ``file`` (a sidecar's data file, opened with ``file.sibling``), else None.

        Read metadata with ``file.read_exact`` (bounds-checked, and recorded, so that the frame
        refuses data overlapping it); raise :class:`Broken` for a structure no valid file has and
        wrap a library's refusal of the file in one where the library is called; raise
        :class:`~refset.errors.Unsupported` (``refset.scan.writer.cannot``) for a variable that cannot
        be referenced exactly. Anything else is a bug, and propagates."""

    @final
    def __call__(self, file: ScanFile) -> ReferenceSet:
        """The reference set of ``file`` (a directory's, for a :attr:`directory` scanner; its references
        name ``file.url``, or the data file the walk returns). A name to drop that the file lacks warns with :class:`UnusedDropWarning`; a variable
        that cannot be referenced exactly raises :class:`~refset.errors.Unsupported` naming it; a
        malformed file raises :class:`~refset.errors.InvalidFile` naming it."""
        drop = DropList(self.drop)
        out = SetWriter(file.url, self.inline_threshold)
        try:
            data = self.walk(file, out, drop) or file
            if data is not file:
                out.url = data.url
            offsets, lengths = out.ranges()
            if data.overlaps_metadata(offsets, lengths):  # a corrupt address pointing chunks into a structure
                raise Broken("data overlaps the file's metadata")
            if offsets.size and not self.directory and out.url == data.url:
                _within(data, offsets, lengths, data is not file)
            drop.warn_unused(file.url)
            return out.build(data.read_ranges)  # the small chunks, in one batch
        except Broken as e:
            what = f"not a valid {self.title or self.name} {'store' if self.directory else 'file'}: " if e.titled \
                else ""
            # a library's error that the walk wrapped stays the cause (the Broken its context)
            raise InvalidFile(f"{file.url}: {what}{e}") from (e.__cause__ or e)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} scanner ({self.name})>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_remake, (type(self), dict(self.config)))


def _within(data: ScanFile, offsets: Any, lengths: Any, sidecar: bool) -> None:
    """:class:`Broken` when a referenced range ends past the end of ``data`` (``sidecar``: the file
    described is another than the file scanned, which then does not describe it)."""
    ends = offsets + lengths
    k = int(ends.argmax())
    if int(ends[k]) <= data.size:
        return
    what = f"a chunk at byte {int(offsets[k]):,} of {int(lengths[k]):,} bytes ends past the end of"
    if sidecar:
        raise Broken(f"{what} {data.url} ({data.size:,} bytes): it does not describe that file", titled=False)
    raise Broken(f"{what} the file ({data.size:,} bytes)")


def _scans_itself(self: Scanner, file: ScanFile, out: SetWriter, drop: DropList) -> ScanFile | None:
    raise TypeError(f"{type(self).__name__} scans files through its own __call__ (it has no walk)")


def _remake(cls: type[Scanner], config: dict[str, Any]) -> Scanner:
    return cls(**config)
