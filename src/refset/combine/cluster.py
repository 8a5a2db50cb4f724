"""``combine`` on a Dask cluster: a tree reduction of small columnar sets.

1. The inputs are opened (or scanned) on the workers, a group per task, where their sets stay;
   only their coordinate values come back to the client (a few numbers per input).
2. The client orders the inputs by coordinate (CF times compared in the first input's units) and
   cuts the order into batches of contiguous coordinates (with several concat dims, a batch varies
   only along the last).
3. Each batch is combined on a worker into an intermediate set (its sets in input order, so "the
   first input" means what it means in one process), whose inputs are then released;
   intermediates are combined the same way, ``batch`` at a time, until one set is left, which comes
   back to the client. No process ever holds every input set.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from refset.combine.coords import coordinates, is_cf_time, reencode
from refset.combine.placement import Combiner
from refset.combine.values import digests
from refset.model.refset import ReferenceSet
from refset.model.stack import SetStack
from refset.scan import Scan

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["combine_on_cluster", "BATCH", "CLUSTER_INPUTS", "local_client"]

#: Inputs (or intermediate sets) combined by one task.
BATCH = 64


@dataclass(frozen=True)
class _AtIndex:
    """A ``coo_map`` callable called with the input's index in the whole combine, not the batch's."""

    fn: Callable[[int, ReferenceSet, str], Any]
    index: int

    def __call__(self, _: int, rs: ReferenceSet, name: str) -> Any:
        return self.fn(self.index, rs, name)


def _one_input(sel: Any, i: int) -> Any:
    """Selector ``sel`` for input ``i`` alone: list values and ``INDEX`` become that input's value."""
    if isinstance(sel, str):
        return [i] if sel == "INDEX" else sel
    if callable(sel) and not hasattr(sel, "search"):
        return _AtIndex(sel, i)
    if isinstance(sel, Sequence | np.ndarray) and not isinstance(sel, str):
        return [sel[i]]
    return sel  # a compiled regex, or something coordinates() names as not a selector


_Group = tuple[list[Any], list[Any], list[set[str]], tuple[int, int, int, int], list[Any]]


def _open_group(xs: Sequence[Any], start: int, maps: Sequence[Mapping[str, Any]], dims: Sequence[str],
                coo_dtypes: Mapping[str, Any], so: Mapping[str, Any], ro: Mapping[str, Any],
                preprocess: Callable[..., ReferenceSet] | None,
                scan_options: Mapping[str, Any], concurrency: int | None = None, skip: bool = False,
                verify: bool = True) -> _Group:
    """Inputs ``start...`` opened (scanned, with ``scan_options``; remote ones ``concurrency`` at a
    time) with ``so``, each one's coordinate values and attributes (data read with ``ro``), the
    names to drop each one lacked (reported once, by the client), what the scans cost (files,
    requests, bytes, the most round trips of a file) and, with ``skip``, the inputs that failed
    (:class:`~refset.combine.inputs.Skipped`; the others are the group's sets, in order)."""
    from refset.combine.inputs import Skipped, open_inputs
    from refset.scan import Scan

    sets, coords = [], []
    run = Scan(**scan_options)  # one run per task: its files share parsed headers
    skipped: list[Skipped] | None = [] if skip else None
    opened, unused = open_inputs(xs, start, storage_options=so, scan=run, concurrency=concurrency,
                                 skipped=skipped)
    gone = {s.index - start for s in skipped or ()}
    kept = [i for i in range(len(xs)) if i not in gone]
    for k, (rs, name) in zip(kept, opened, strict=True):
        if preprocess is not None:
            rs = preprocess(rs)
        sets.append((rs, name))
        one = SetStack.from_sets([rs], [name])
        one.verify = verify
        coords.append(([(c.per_input[0], c.attrs) for c in coordinates(one, dims, maps[k], coo_dtypes, ro)],
                       _digests(one, dims, ro)))
    return sets, coords, [unused[i] for i in kept], run.costs(), list(skipped or ())


def _digests(one: SetStack, dims: Sequence[str], ro: Mapping[str, Any]) -> dict[str, str]:
    """What the input holds in each of its variables that has none of ``dims`` (see
    :func:`~refset.combine.values.digests`): the client keeps those that every input holds alike."""
    out = {}
    for path, m in one.metadata[0].items():
        if path in dims or set(dims) & set(m.dimension_names or ()):
            continue
        out[path] = digests(one, path, [0], ro)[0]
    return out


def _coords_part(group: _Group) -> bytes:
    """The group's coordinates, unused drops, scan costs and skipped inputs, pickled into one message
    frame (distributed sends each numpy array of a result as a frame of its own: ~5 ms per 100)."""
    return _frame((group[1], group[2], group[3], group[4]))


def _combine_picked(groups: Sequence[tuple[list[Any], ...]], picks: Sequence[tuple[int, int]],
                    *args: Any) -> bytes:
    return _combined([groups[g][0][j] for g, j in picks], *args)


def _combine_batch(parts: Sequence[bytes], *args: Any) -> bytes:
    return _combined([pickle.loads(p) for p in parts], *args)


def _combined(parts: Sequence[tuple[ReferenceSet, str]], dims: Sequence[str], identical: Sequence[str],
              coo_map: Mapping[str, Any], coo_dtypes: Mapping[str, Any], target: Mapping[str, Mapping[str, Any]],
              check: bool, so: Mapping[str, Any], name: str, verify: bool = True,
              kept: set[str] | None = None) -> bytes:
    """The combined set of ``parts`` and ``name``, pickled: one message frame, where distributed
    would send each column of each table as a frame of its own. ``kept``: the variables without the
    new dims that every input of the whole combine holds alike."""
    inputs = SetStack.from_sets([p[0] for p in parts], [p[1] for p in parts])
    inputs.verify = verify
    coords = coordinates(inputs, dims, coo_map, coo_dtypes, so, target=target)
    return _frame((Combiner(inputs, coords, set(identical), check, so, kept=kept).build(), name))


def _frame(obj: Any) -> bytes:
    """``obj`` pickled (by cloudpickle when plain pickle cannot: values of classes defined in
    ``__main__``, as distributed itself does)."""
    try:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        import cloudpickle

        out: bytes = cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        return out


def combine_on_cluster(client: Any, items: Sequence[Any], *, dims: Sequence[str], identical: Sequence[str],
                       coo_map: Mapping[str, Any], coo_dtypes: Mapping[str, Any],
                       preprocess: Callable[..., ReferenceSet] | None, check: bool,
                       so: Mapping[str, Any], ro: Mapping[str, Any] | None = None, batch: int = BATCH,
                       progress: Callable[[int], Any] | None = None,
                       scan_options: Mapping[str, Any] | None = None,
                       concurrency: int | None = None, scan: Scan | None = None,
                       skipped: list[Any] | None = None, verify: bool = True) -> ReferenceSet:
    if batch < 2:
        raise ValueError(f"batch_size: must be at least 2, got {batch}")
    n = len(items)
    items = list(items)
    ro = so if ro is None else ro  # combining reads data only (coordinate values)
    maps = [{d: _one_input(s, i) for d, s in coo_map.items()} for i in range(n)]
    # inputs opened a group per task (a task costs ~ms of scheduling: as much as a scan)
    threads = sum(client.nthreads().values()) or 1
    size = max(1, min(batch, -(-n // (4 * threads))))
    groups = [client.submit(_open_group, items[s:s + size], s, maps[s:s + size], dims, coo_dtypes, so, ro,
                            preprocess, dict(scan_options or {}), concurrency, skipped is not None, verify,
                            pure=False)
              for s in range(0, n, size)]
    pending = [client.submit(_coords_part, g, pure=False) for g in groups]
    got: dict[int, Any] = {}

    def arrived(k: int, frame: bytes) -> None:
        got[k] = part = pickle.loads(frame)
        if scan is not None:  # what the workers' scans cost, counted in the caller's run as it comes
            scan.count(*part[2])

    if progress is not None:
        from distributed import as_completed

        for f in as_completed(pending):
            k = pending.index(f)
            arrived(k, f.result())
            progress(min(size, n - size * k))
    rest = [k for k in range(len(pending)) if k not in got]
    for k, frame in zip(rest, client.gather([pending[k] for k in rest]), strict=True):
        arrived(k, frame)
    from refset.combine.inputs import warn_unused

    parts = [got[k] for k in range(len(pending))]
    info = [c for part, _, _, _ in parts for c, _ in part]
    held = [d for part, _, _, _ in parts for _, d in part]
    kept = {p for p in set().union(*held) if len({h.get(p) for h in held}) == 1 and all(p in h for h in held)} \
        if held else set()
    warn_unused([u for _, us, _, _ in parts for u in us])
    # each opened input's group and place in it (inputs that failed, with skipped, are not in them)
    where = [(g, j) for g, part in enumerate(parts) for j in range(len(part[0]))]
    if skipped is not None:
        skipped.extend(x for part in parts for x in part[3])
        if not where:
            from refset.combine.inputs import all_failed

            raise all_failed(skipped)
    n = len(where)
    target = {d: info[0][k][1] for k, d in enumerate(dims) if is_cf_time(info[0][k][1])}
    keys = []
    for k, d in enumerate(dims):
        vals = [v[k][0] for v in info]
        if d in target:
            vals = reencode(vals, [v[k][1] for v in info], target[d], [str(i) for i in range(n)], d, d)
        keys.append(np.array([v[0] if v.size else 0 for v in vals]))
    order = np.lexsort(keys[::-1]).tolist()
    # Batches are cut in coordinate order, never across a value of the dims before the one being
    # reduced; within a batch the sets go in input order, so that whatever "the first input" gives
    # (group attributes, variables off the concat dims) is what the in-process combine takes.
    lead = len(dims) - 1
    level: list[tuple[int, tuple[Any, ...], Any]] = []  # (first input, leading values, future)
    for run in _runs(order, [tuple(k[i] for k in keys[:lead]) for i in range(n)], batch):
        run = sorted(run)
        sel = {d: coo_map[d] if _is_data(coo_map.get(d)) else [info[i][k][0] for i in run]
               for k, d in enumerate(dims) if d in coo_map}
        used = sorted({where[i][0] for i in run})
        picks = [(used.index(where[i][0]), where[i][1]) for i in run]
        level.append((run[0], tuple(k[run[0]] for k in keys[:lead]), client.submit(
            _combine_picked, [groups[g] for g in used], picks, dims, identical, sel, coo_dtypes, target,
            check, ro, f"inputs {run[0]}..{run[-1]}", verify, kept, pure=False)))
    del groups, pending  # each group of input sets is released once its batches are combined
    for axis in range(lead, -1, -1):  # the last dim first, then the one before it...
        while len({e[1][:axis] for e in level}) < len(level):
            nxt = []
            for run in _runs(list(range(len(level))), [e[1][:axis] for e in level], batch):
                parts = sorted((level[j] for j in run), key=lambda e: e[0])
                nxt.append((parts[0][0], level[run[0]][1], client.submit(
                    _combine_batch, [e[2] for e in parts], dims, identical, {}, coo_dtypes, target,
                    check, ro, f"part of inputs {parts[0][0]}...", verify, kept, pure=False)))
            level = nxt
    rs: ReferenceSet = pickle.loads(client.gather(level[0][2]))[0]
    return rs


def _is_data(sel: Any) -> bool:
    return sel is None or (isinstance(sel, str) and sel.split(":", 1)[0] in ("data", "cf"))


def _runs(order: list[int], group: Sequence[Any], batch: int) -> list[list[int]]:
    """``order`` cut into batches of at most ``batch`` whose members share ``group[i]``."""
    out: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        if cur and (len(cur) == batch or group[i] != group[cur[0]]):
            out.append(cur)
            cur = []
        cur.append(i)
    out.append(cur)
    return out


#: Inputs from which an embedded local cluster pays for its start-up (about two seconds): the
#: ``refset`` command starts one (:func:`local_client`, a worker per core) for this many or more.
CLUSTER_INPUTS = 500


def local_client(workers: int) -> Client:
    """A Dask client of a new local cluster of ``workers`` processes, one thread each, its dashboard
    on any free port; closing the client closes the cluster.

    Give it to :func:`refset.combine` as ``client=``; needs ``dask[distributed]``.
    """
    from distributed import Client

    # Client starts the LocalCluster itself from these keywords, and so closes it when closed
    return Client(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0")
