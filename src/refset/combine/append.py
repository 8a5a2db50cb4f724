"""Appending inputs to a stored set or an Icechunk repository along one dimension."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from refset.errors import Unsupported
from refset.model.refset import ReferenceSet

__all__ = ["append"]


def append(inputs: Iterable[Any], dest: str | os.PathLike[str], *, concat_dim: str, format: str | None = None,
           storage_options: Mapping[str, Any] | None = None, remote_options: Mapping[str, Any] | None = None,
           message: str | None = None, branch: str = "main", **combine_options: Any) -> ReferenceSet:
    """Add ``inputs`` (anything :func:`refset.combine` takes) after the set stored at ``dest`` along
    ``concat_dim``, and store the result there; ``dest`` is made from the inputs alone when it does
    not exist. Returns the combined set.

    A JSON, parquet or packed set is combined with the inputs and written again (atomically). An
    Icechunk repository (``icechunk://PATH`` or ``format="icechunk"``) gains the new rows in a new
    commit on ``branch`` (``message``): combine sees the repository's metadata and coordinate values
    (:func:`~refset.formats.icechunk.archive_view`), so the inputs are checked, placed and their
    times re-encoded exactly as in a combine; the repository's chunks are not written again. A layout
    the repository cannot take (other chunks or codecs, a partial last chunk) is refused before
    anything is written. ``combine_options`` go to :func:`refset.combine`.
    """
    from refset.combine import combine
    from refset.formats import save
    from refset.formats.registry import by_name, for_dest

    dest = os.fspath(dest)
    spec = by_name(format) if format is not None else for_dest(dest)
    inputs = list(inputs)
    if not inputs:
        raise Unsupported(f"append to {dest}: no inputs given")
    if spec.name == "icechunk":  # checked before any work, as save checks them
        spec.check_options({"message": message, "branch": branch}
                           | ({"remote_options": remote_options} if remote_options is not None else {}))
    kw = dict(combine_options, concat_dims=[concat_dim], storage_options=storage_options,
              remote_options=remote_options)
    if spec.name == "icechunk":
        from refset.formats.icechunk import archive_view
        from refset.formats.icechunk.repo import exists
        from refset.formats.icechunk.writer import append as append_icechunk
        from refset.formats.icechunk.writer import write

        if not exists(dest, storage_options):
            rs = combine(inputs, **kw)
            write(rs, dest, storage_options=storage_options, remote_options=remote_options, message=message,
                  branch=branch)
            return rs
        view = archive_view(dest, concat_dim, branch=branch, storage_options=storage_options,
                            remote_options=remote_options)  # names itself by dest in combine's messages
        rs = combine([view, *inputs], **kw)
        append_icechunk(rs, dest, concat_dim, storage_options=storage_options, remote_options=remote_options,
                        message=message, branch=branch)
        return rs
    if message is not None or branch != "main":
        raise Unsupported(f"append to {dest}: message= and branch= are for Icechunk repositories")
    import fsspec

    fs, path = fsspec.core.url_to_fs(dest, **dict(storage_options or {}))
    rs = combine([dest, *inputs] if fs.exists(path) else inputs, **kw)
    save(rs, dest, format=spec.name, storage_options=storage_options)
    return rs
