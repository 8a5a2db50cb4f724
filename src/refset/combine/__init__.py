"""Combine many reference sets (or data files, scanned) into one along concat dims.

Each input's chunk table of a variable is placed into the combined grid by array arithmetic on its
columns (no per-chunk Python): its position along each concat dim comes from its coordinate values
(see :mod:`refset.combine.coords`), all URL tables become one, the coordinates of the concat dims are written inline.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from refset.combine.coords import coordinates
from refset.combine.inputs import (
    Skipped,
    absolute,
    all_failed,
    expand_lists,
    open_input,
    open_inputs,
    warn_unused,
)
from refset.combine.placement import Combiner
from refset.errors import InvalidReferences, OptionRef, Problem, RefsetError
from refset.formats.json.batch import NotBatch, read_documents
from refset.model.refset import ReferenceSet
from refset.model.stack import SetStack
from refset.model.transforms import with_root_attrs
from refset.scan import Scan

__all__ = ["combine", "expand_lists", "open_input", "SKIPPED_ATTR", "SkippedInputsWarning"]


class SkippedInputsWarning(UserWarning):
    """Inputs left out by ``combine(..., on_error="skip")``; the message lists them with their errors."""

Selector = Any  # list of values | re.Pattern | "INDEX" | "attr:N" | "vattr:V:N" | "data:V" | "cf:V" | callable


def combine(
    inputs: Iterable[Any],
    *,
    concat_dims: str | Sequence[str],
    identical_dims: Sequence[str] = (),
    coo_map: Mapping[str, Selector] | None = None,
    coo_dtypes: Mapping[str, Any] | None = None,
    preprocess: Callable[[ReferenceSet], ReferenceSet] | None = None,
    postprocess: Callable[[ReferenceSet], ReferenceSet] | None = None,
    check: bool = True,
    storage_options: Mapping[str, Any] | None = None,
    remote_options: Mapping[str, Any] | None = None,
    scan_options: Mapping[str, Any] | None = None,
    client: Any = None,
    batch_size: int = 64,
    progress: Callable[[int], Any] | None = None,
    concurrency: int | None = None,
    scan: Scan | None = None,
    on_error: str = "raise",
    verify_sources: bool = True,
) -> ReferenceSet:
    """One set from ``inputs`` (sets, dicts, reference files in any format, or NetCDF/HDF5 files,
    which are scanned) concatenated along ``concat_dims``, in the order of their coordinates.

    ``coo_map[dim]`` says where an input's coordinate comes from (kerchunk's vocabulary): a list
    (one value per input), a compiled regex on the input's name (its path or single URL; group 1 if
    any), ``"attr:NAME"``, ``"vattr:VAR:NAME"``, ``"data:VAR"``, ``"cf:VAR"``, ``"INDEX"`` or
    ``fn(index, set, name)``. Default: the values of the variable named like the dim, CF-aware (times
    in other units are re-encoded in the first input's). A dim no input has is new: data variables
    gain it as their first dim. ``identical_dims``: variables taken from the first input, checked
    equal in every input unless ``check=False``. ``client``: a ``distributed.Client`` on whose
    workers the inputs are opened (scanned) and combined as a tree of ``batch_size`` sets per task
    (see ``_dask``). ``storage_options``: fsspec options for opening (scanning) the inputs;
    ``remote_options``: for the data files their references point into, read for coordinate values
    (default: ``storage_options``). ``scan_options``: keywords of :func:`refset.scan` for the inputs
    that are data files (``inline_threshold``, ``group``, ``drop_variables``, ``subchunk``). ``progress(n)`` is called as each input has been opened (scanned), with 1.
    ``concurrency``: remote inputs opened at once, in this process and in each cluster task (default
    :data:`refset.scan.CONCURRENCY`; local files are scanned one after another). ``scan``: the run
    (:class:`refset.scan.Scan`) that scans the data files here, instead of one made from
    ``scan_options`` (it counts the files, requests and bytes of the scans; each cluster task
    makes a run of its own with the same options, whose counts are added to it).
    ``on_error``: ``"raise"`` (an input that cannot be opened or scanned raises its error, naming
    it) or ``"skip"`` (it is left out, with a warning; the combined set lists each one, index, name
    and error, in the root attribute ``refset_skipped_inputs``), also on a cluster.
    ``verify_sources``: the inputs' files read for coordinate values are checked against what the
    inputs recorded of them (a changed one is :class:`~refset.errors.SourceChanged`); False: not checked.
    """
    dims = [concat_dims] if isinstance(concat_dims, str) else list(concat_dims)
    if not dims:
        raise InvalidReferences("combine: concat_dims is empty")
    if on_error not in ("raise", "skip"):
        raise InvalidReferences(Problem("combine: ", OptionRef("on_error", "on_error"),
                                        f" must be 'raise' or 'skip', got {on_error!r}"))
    skipped: list[Skipped] | None = [] if on_error == "skip" else None
    given = list(inputs)
    so = dict(storage_options or {})
    ro = so if remote_options is None else dict(remote_options)
    if scan is not None and scan_options:
        raise ValueError("combine: give scan_options or scan (a run made with its options), not both")
    sc = dict(scan_options or {}) if scan is None else {"head_bytes": scan.head_bytes, **scan.options}
    if given and preprocess is None and client is None:
        try:  # local JSON reference files, read together (lists of sets are not taken)
            batch = read_documents(given, so)
        except (NotBatch, RefsetError):  # a bad input: opened one by one below, which names it
            pass
        else:
            if progress is not None:
                for _ in given:
                    progress(1)
            batch.verify = verify_sources
            return _combine(batch, dims, identical_dims, coo_map, coo_dtypes, postprocess, check, ro)
    items = expand_lists(given)
    if not items:
        raise InvalidReferences("combine: no inputs")
    if client is not None:
        from refset.combine.cluster import combine_on_cluster

        items = [absolute(x) for x in items]  # the workers' working directory is not ours
        out = combine_on_cluster(client, items, dims=dims, identical=list(identical_dims),
                                 coo_map=dict(coo_map or {}), coo_dtypes=dict(coo_dtypes or {}),
                                 preprocess=preprocess, check=check, so=so, ro=ro, batch=batch_size,
                                 progress=progress, scan_options=sc, concurrency=concurrency, scan=scan,
                                 skipped=skipped, verify=verify_sources)
        _check_identical(identical_dims, list(out.grids))
        return _finished(out, skipped, len(items), postprocess)
    run = scan or Scan(**sc)  # one run for the data files: files of one product share parsed headers
    opened, unused = open_inputs(items, storage_options=so, scan=run, concurrency=concurrency, progress=progress,
                                 skipped=skipped)
    warn_unused(unused)
    if skipped:
        if not opened:
            raise all_failed(skipped)
        coo_map = _without(coo_map, {s.index for s in skipped}, len(items))
    sets = [rs for rs, _ in opened]
    names = [n for _, n in opened]
    if preprocess is not None:
        sets = [preprocess(rs) for rs in sets]
    stack = SetStack.from_sets(sets, names)
    stack.verify = verify_sources
    out = _combine(stack, dims, identical_dims, coo_map, coo_dtypes, None, check, ro)
    return _finished(out, skipped, len(items), postprocess)


#: The root attribute listing the inputs ``on_error="skip"`` left out (index, name, error).
SKIPPED_ATTR = "refset_skipped_inputs"


def _finished(out: ReferenceSet, skipped: Sequence[Skipped] | None, n: int,
              postprocess: Callable[[ReferenceSet], ReferenceSet] | None) -> ReferenceSet:
    """The combined set, the inputs ``on_error="skip"`` left out warned of and listed in its root
    attributes, then ``postprocess``."""
    if skipped:
        import warnings

        lines = "".join(f"\n  {s.error}" for s in skipped[:20]) + (
            f"\n  ... and {len(skipped) - 20} more" if len(skipped) > 20 else "")
        warnings.warn(f"combine: {len(skipped)} of {n} inputs skipped (on_error='skip'):{lines}",
                      SkippedInputsWarning, stacklevel=3)
        out = with_root_attrs(out, {SKIPPED_ATTR: [dataclasses.asdict(s) for s in skipped]})
    return postprocess(out) if postprocess is not None else out


def _without(coo_map: Mapping[str, Selector] | None, gone: set[int], n: int) -> Mapping[str, Selector] | None:
    """``coo_map`` for the inputs left after skipping ``gone``: per-input values without theirs,
    ``INDEX`` and callables still given each input's index among all the inputs."""
    if not coo_map:
        return coo_map
    import numpy as np

    kept = [i for i in range(n) if i not in gone]
    out = dict(coo_map)
    for dim, sel in coo_map.items():
        if isinstance(sel, str):
            if sel == "INDEX":
                out[dim] = kept
        elif isinstance(sel, list | tuple | np.ndarray) and len(sel) == n:
            out[dim] = [sel[i] for i in kept]
        elif callable(sel) and not hasattr(sel, "search"):
            out[dim] = _Renumbered(sel, kept)
    return out


@dataclasses.dataclass(frozen=True)
class _Renumbered:
    """A ``coo_map`` callable called with each input's index among all the inputs given."""

    fn: Callable[[int, ReferenceSet, str], Any]
    kept: list[int]

    def __call__(self, i: int, rs: ReferenceSet, name: str) -> Any:
        return self.fn(self.kept[i], rs, name)
def _combine(inputs: SetStack, dims: list[str], identical_dims: Sequence[str],
             coo_map: Mapping[str, Selector] | None, coo_dtypes: Mapping[str, Any] | None,
             postprocess: Callable[[ReferenceSet], ReferenceSet] | None, check: bool,
             ro: Mapping[str, Any]) -> ReferenceSet:
    _check_identical(identical_dims, inputs.paths())
    inputs.all_fingerprints()  # inputs made from two versions of one file are refused before any work
    coords = coordinates(inputs, dims, dict(coo_map or {}), dict(coo_dtypes or {}), ro)
    out = Combiner(inputs, coords, set(identical_dims), check, ro).build()
    return postprocess(out) if postprocess is not None else out


def _check_identical(names: Sequence[str], paths: Sequence[str]) -> None:
    """Every name in ``identical_dims`` is a variable of some input (a typo would check nothing)."""
    have = set(paths)
    missing = [n for n in names if n.strip("/") not in have]
    if missing:
        raise InvalidReferences(Problem("combine: ", OptionRef("identical_dims", "identical_dims"),
                                        f" names {', '.join(map(repr, missing))}, which no input has (its "
                                        f"variables: {', '.join(sorted(have)) or 'none'})"))
