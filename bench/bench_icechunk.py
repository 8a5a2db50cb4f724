"""Writing a reference set into a new Icechunk repository: refset vs VirtualiZarr vs the API's floor.

usage: python bench/bench_icechunk.py [--refs REFS.json] [--sets DIR] [--repeat N] [--out results.md]

Three sets: the 1.13M-reference synthetic archive (``--refs``, made by ``python
../shared/bench/synth_refs.py refs.json --files 1000 --grid 24x48``), the combined archive of 1000
single-file kerchunk sets (``--sets``, ``bench_combine.py`` makes them: 324,002 byte ranges and 25,001
inline chunks), and that archive without its inline chunks (``archive-ranges``: what every writer
writes alike). Three writers, each timed from
references in memory to the commit (loading is outside the clock), in a process of its own (its peak
memory is measured), alternated run by run:

- ``refset``: ``refset.save(rs, PATH, format="icechunk")`` of the loaded set;
- ``virtualizarr``: ``ds.vz.to_icechunk(store)`` + ``commit`` of a virtual dataset whose ManifestArrays
  were built from the same references (``ChunkManifest.from_arrays``: VirtualiZarr's own in-memory form,
  no parsing in the clock); arrays of inline chunks only (coordinates) as loaded numpy variables, as
  VirtualiZarr keeps them; a manifest holds no inline chunk, so the archive's 25,000 small chunks
  inlined among byte ranges are left out of its run (in its favour);
- ``floor``: the bare API: metadata documents and inline chunks written as native chunks, then
  ``set_virtual_refs`` of VirtualChunkSpecs prepared before the clock, ``commit`` (what any writer must
  at least spend).
Timings are medians of --repeat runs; the machine is shared and noisy, so read the ratios.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

TOOLS = ("refset", "virtualizarr", "floor")


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _load(case: str, refs: str, sets: str) -> Any:
    import numpy as np

    import refset

    if case == "synth":
        return refset.load(refs).loaded()
    paths = sorted(glob.glob(os.path.join(sets, "*.json")))
    rs = refset.combine(paths, concat_dims=["time"]).loaded()
    if case == "archive":
        return rs
    # archive-ranges: the byte ranges only (what a VirtualiZarr manifest holds); arrays of inline chunks
    # only (the time coordinate) stay as they are
    from refset.model.table import RANGE, ChunkTable

    tables = {}
    for p in rs.grids:
        t = rs.table(p)
        if (t.kind == RANGE).any():
            f = np.flatnonzero(t.kind == RANGE)
            t = ChunkTable.from_entries(rs.grids[p], f, t.kind[f], t.path_id[f], t.offset[f], t.length[f])
        tables[p] = t
    return refset.ReferenceSet.from_arrays({}, tables, rs.urls, other=rs.key_table(), validate=False)


def _containers(rs: Any) -> Any:
    import icechunk

    from refset.formats.icechunk.repo import container_prefixes, location

    config = icechunk.RepositoryConfig.default()
    for p in container_prefixes(location(u) for u in rs.urls):
        store = (icechunk.local_filesystem_store(p[len("file://"):]) if p.startswith("file://")
                 else icechunk.s3_store(region="us-east-1"))
        config.set_virtual_chunk_container(icechunk.VirtualChunkContainer(p, store))
    return config


def child(case: str, tool: str, refs: str, sets: str, dest: str) -> dict[str, float]:
    import warnings

    import numpy as np

    warnings.simplefilter("ignore")
    import icechunk

    import refset
    from refset.formats.icechunk.repo import import_icechunk, location
    from refset.formats.icechunk.writer import plan_of, put_documents
    from refset.model.table import RANGE

    import_icechunk()  # its log filter
    rs = _load(case, refs, sets)
    nrefs = sum(int((rs.table(p).kind == RANGE).sum()) for p in rs.grids)
    prepared: Any = None
    if tool == "floor":
        plan = plan_of(rs)
        specs = {}
        for p in rs.grids:
            t, g = rs.table(p), rs.grids[p]
            flat = np.flatnonzero(t.kind == RANGE)
            idx = np.stack(np.unravel_index(flat, g.grid_shape), axis=1).tolist()
            locs = plan.locations
            specs[p] = [icechunk.VirtualChunkSpec(index=i, location=locs[u], offset=o, length=n)
                        for i, u, o, n in zip(idx, t.path_id[flat].tolist(), t.offset[flat].tolist(),
                                              t.length[flat].tolist())]
        from refset.formats.icechunk.writer import native_chunks

        docs = {f"{p}/zarr.json": json.dumps(d).encode() for p, d in plan.arrays.items()}
        docs["zarr.json"] = json.dumps(plan.groups[""]).encode()
        prepared = (specs, docs, native_chunks(plan, rs.grids))
    elif tool == "virtualizarr":
        import xarray as xr
        from virtualizarr.manifests import ChunkManifest, ManifestArray
        from zarr.core.metadata.v3 import ArrayV3Metadata

        plan = plan_of(rs)
        variables = {}
        locs = np.array([location(u) if u else "" for u in rs.urls] + [""], dtype=np.dtypes.StringDType())
        for p in rs.grids:
            t, g = rs.table(p), rs.grids[p]
            doc = plan.arrays[p]
            dims = doc.get("dimension_names")
            kind = t.kind.reshape(g.grid_shape)
            if not (kind == RANGE).any():  # a loaded variable, as VirtualiZarr holds coordinates
                variables[p] = xr.Variable(dims, refset.open_dataset(rs, decode_cf=False)[p].values)
                continue
            pid = np.where(kind == RANGE, t.path_id.reshape(g.grid_shape).astype(np.int64), len(locs) - 1)
            manifest = ChunkManifest.from_arrays(paths=locs[pid], offsets=t.offset.reshape(g.grid_shape).astype(np.uint64),
                                                 lengths=t.length.reshape(g.grid_shape).astype(np.uint64),
                                                 validate_paths=False)
            meta = ArrayV3Metadata.from_dict({k: v for k, v in doc.items() if k != "attributes"}
                                             | {"attributes": doc.get("attributes", {})})
            variables[p] = xr.Variable(dims, ManifestArray(meta, manifest), attrs=doc.get("attributes", {}))
        coords = {k: v for k, v in variables.items() if v.dims == (k,)}  # no indexes: as VirtualiZarr opens them
        prepared = xr.Dataset({k: v for k, v in variables.items() if k not in coords},
                              coords=xr.Coordinates(coords, indexes={}))
    before = _rss_mb()
    t0 = time.perf_counter()
    if tool == "refset":
        refset.save(rs, dest, format="icechunk")
    else:
        repo = icechunk.Repository.create(icechunk.local_filesystem_storage(dest), config=_containers(rs))
        session = repo.writable_session("main")
        if tool == "floor":
            specs, docs, native = prepared
            put_documents(session.store, docs)
            put_documents(session.store, native)
            for p, s in specs.items():
                session.store.set_virtual_refs(p, s, validate_containers=True)
        else:
            prepared.vz.to_icechunk(session.store)
        session.commit("bench")
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": seconds, "before_mb": before, "peak_mb": peak, "refs": nrefs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--refs", default="/work/bench-data/refs.json")
    ap.add_argument("--sets", default="/work/bench-data/combine/sets1000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cases", default="synth,archive,archive-ranges")
    ap.add_argument("--out")
    ap.add_argument("--child", nargs=2, metavar=("CASE", "TOOL"), help=argparse.SUPPRESS)
    ap.add_argument("--dest", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(child(a.child[0], a.child[1], a.refs, a.sets, a.dest)))
        return 0
    lines = ["| set | references | writer | time (median) | vs floor | peak RSS (before the clock) |",
             "|---|---:|---|---:|---:|---:|"]
    for case in a.cases.split(","):
        got: dict[str, list[dict[str, float]]] = {t: [] for t in TOOLS}
        for _ in range(a.repeat):
            for tool in TOOLS:
                tmp = tempfile.mkdtemp(prefix="bench-icechunk-")
                try:
                    out = subprocess.run([sys.executable, __file__, "--child", case, tool, "--refs", a.refs,
                                          "--sets", a.sets, "--dest", os.path.join(tmp, "repo")],
                                         capture_output=True, text=True)
                    if out.returncode:
                        sys.stderr.write(out.stderr[-3000:])
                        return 1
                    got[tool].append(json.loads(out.stdout.strip().splitlines()[-1]))
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
        floor = statistics.median(r["seconds"] for r in got["floor"])
        for tool in TOOLS:
            rs = got[tool]
            med = statistics.median(r["seconds"] for r in rs)
            peak = max(r["peak_mb"] for r in rs)
            before = statistics.median(r["before_mb"] for r in rs)
            lines.append(f"| {case} | {int(rs[0]['refs']):,} | {tool} | {med:.2f} s | {med / floor:.2f}x | "
                         f"{peak:,.0f} MB ({before:,.0f} MB) |")
        print("\n".join(lines[-3:]), flush=True)
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
