"""Icechunk repositories as a stored form (written, not read): see docs/icechunk.md.

``refset.save(rs, "icechunk://PATH")`` (or ``format="icechunk"``) makes a repository holding the set
in one commit; :func:`refset.append` adds inputs along a dimension in a new commit; :func:`open_store`
gives the read-only zarr store xarray opens. The ``icechunk`` package is imported on first use only
(``pip install 'refset[icechunk]'``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from refset.abc.format import Option, StoredForm
from refset.errors import Unsupported

if TYPE_CHECKING:
    from refset.abc.source import Source
    from refset.model.refset import ReferenceSet
    from refset.options import Limits

__all__ = ["IcechunkForm", "open_store", "archive_view"]


class IcechunkForm(StoredForm):
    """A versioned Icechunk repository: zarr v3 metadata, virtual chunks, native inline chunks."""

    name: ClassVar[str] = "icechunk"
    description: ClassVar[str] = "an Icechunk repository (virtual chunks; written, read with xarray/zarr)"
    suffixes: ClassVar[tuple[str, ...]] = ()
    prefixes: ClassVar[tuple[str, ...]] = ("icechunk://",)
    directory: ClassVar[bool] = True
    other_keys: ClassVar[bool] = False
    verbatim_metadata: ClassVar[bool] = False
    readable: ClassVar[bool] = False
    options: ClassVar[tuple[Option, ...]] = (
        Option("message", str, "the commit's message", none_ok=True),
        Option("branch", str, "the branch committed to (a new repository makes it from main; an append "
               "writes to a branch there)"),
        Option("remote_options", dict, "fsspec-style options of the data files (S3 endpoint, keys, anon): "
               "the virtual chunk containers' configuration and credentials"),
    )

    def read(self, source: str, *, storage_options: Mapping[str, Any] | None = None,
             head: bytes | None = None, limits: Limits | None = None, **options: Any) -> Source:
        # docstring inherited
        raise Unsupported(f"{source}: an Icechunk repository is not read back into a reference set (Icechunk "
                          "1.x does not list where its virtual chunks point); open it with xarray: "
                          "xarray.open_zarr(refset.formats.icechunk.open_store(PATH), consolidated=False)")

    def write(self, rs: ReferenceSet, dest: Any, *, storage_options: Mapping[str, Any] | None = None,
              **options: Any) -> None:
        # docstring inherited
        from refset.formats.icechunk.writer import write

        write(rs, dest, storage_options=storage_options, **options)


def open_store(dest: str, *, branch: str = "main", storage_options: Mapping[str, Any] | None = None,
               remote_options: Mapping[str, Any] | None = None) -> Any:
    """A read-only zarr store of ``branch``'s tip, its virtual chunks readable (see :mod:`.repo`)."""
    from refset.formats.icechunk.repo import open_store as _open

    return _open(dest, branch=branch, storage_options=storage_options, remote_options=remote_options)


def archive_view(dest: str, dim: str, **kwargs: Any) -> ReferenceSet:
    """The repository as the first input of an append along ``dim`` (see :mod:`.view`)."""
    from refset.formats.icechunk.view import archive_view as _view

    return _view(dest, dim, **kwargs)
