"""Variables made of parts: a combined variable whose inputs differ in how their values are stored
(chunks, codecs, dtype, fill value, CF packing) is an ordered concatenation, along its concat dim, of
regular zarr arrays, the *parts*, each with its own metadata and chunk table.

In a set such a variable is a zarr group at the variable's path: its attributes hold the variable's own
(``long_name``, ...) and, under :data:`PARTS_ATTR`, the layout (the concat dim, the dims, the whole
shape, and each part's name and the rows ``[start, stop)`` of the whole it covers); its arrays
``part0``, ``part1``, ... are the parts, regular arrays whose attributes are their inputs' (so each
decodes alone, in any zarr reader). A part's shape along the concat dim is exactly its rows: an
input's padded last chunk is a partial chunk of its part. Nothing else in the set changes, so every
storage format holds parts as it holds any group; only refset serves the variable whole
(:mod:`refset.serve.parts`). See docs/formats.md, "Variables made of parts".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from refset.errors import InvalidReferences

if TYPE_CHECKING:
    from refset.model.metadata import ArrayMetadata
    from refset.model.refset import ReferenceSet

__all__ = ["PARTS_ATTR", "Parts", "PartsWarning", "find_parts", "layouts", "group_documents", "part_name", "parse_parts"]


class PartsWarning(UserWarning):
    """A set written with variables made of parts, which only refset serves whole."""

#: The group attribute that makes a group a variable made of parts.
PARTS_ATTR = "refset_parts"


def part_name(k: int) -> str:
    return f"part{k}"


@dataclass(frozen=True)
class Parts:
    """The layout of one variable made of parts: ``path``, its ``dims`` and whole ``shape``; it is
    concatenated along ``dim`` (axis ``axis``) from the arrays ``path/names[k]``, part ``k`` covering
    rows ``bounds[k]:bounds[k + 1]``. Immutable, pickles as a few tuples."""

    path: str
    dim: str
    dims: tuple[str, ...]
    shape: tuple[int, ...]
    names: tuple[str, ...]
    bounds: tuple[int, ...]

    @property
    def axis(self) -> int:
        return self.dims.index(self.dim)

    def paths(self) -> list[str]:
        """The parts' array paths, in order."""
        return [f"{self.path}/{n}" if self.path else n for n in self.names]

    def to_json(self) -> dict[str, Any]:
        return {"dim": self.dim, "dims": list(self.dims), "shape": list(self.shape),
                "parts": [[n, a, b] for n, a, b in zip(self.names, self.bounds[:-1], self.bounds[1:],
                                                      strict=True)]}

    def check(self, metadata: Mapping[str, ArrayMetadata]) -> None:
        """Each part is an array of the set whose shape is its rows of the whole."""
        axis = self.axis
        for p, a, b in zip(self.paths(), self.bounds[:-1], self.bounds[1:], strict=True):
            m = metadata.get(p)
            if m is None:
                raise InvalidReferences(f"variable {self.path!r}: its part {p!r} is not an array of the set")
            dims = list(m.dimension_names or ())
            if dims != list(self.dims):
                raise InvalidReferences(f"variable {self.path!r}: part {p!r} has dims {dims}, the layout says "
                                        f"{list(self.dims)}")
            want = [*self.shape[:axis], b - a, *self.shape[axis + 1:]]
            if list(m.shape) != want:
                raise InvalidReferences(f"variable {self.path!r}: part {p!r} has shape {list(m.shape)}, its "
                                        f"rows {a}:{b} of the whole {list(self.shape)} need {want}")


def parse_parts(path: str, value: Any) -> Parts:
    """The :data:`PARTS_ATTR` attribute ``value`` of group ``path``, checked for form."""
    try:
        dim, dims, shape = str(value["dim"]), tuple(str(d) for d in value["dims"]), tuple(
            int(s) for s in value["shape"])
        rows = [(str(n), int(a), int(b)) for n, a, b in value["parts"]]
    except (KeyError, TypeError, ValueError) as e:
        raise InvalidReferences(f"variable {path!r}: attribute {PARTS_ATTR!r} is not a parts layout "
                                f"({type(e).__name__}: {e})") from e
    if dim not in dims or len(dims) != len(shape) or not rows:
        raise InvalidReferences(f"variable {path!r}: attribute {PARTS_ATTR!r}: dim {dim!r}, dims {list(dims)}, "
                                f"shape {list(shape)} and {len(rows)} parts do not fit together")
    bounds = [rows[0][1]] + [b for _, _, b in rows]
    if bounds[0] != 0 or bounds[-1] != shape[dims.index(dim)] or any(
            a != prev for (_, a, _), prev in zip(rows, bounds[:-1], strict=True)) or any(
            b <= a for _, a, b in rows) or [n for n, _, _ in rows] != [part_name(k) for k in range(len(rows))]:
        raise InvalidReferences(f"variable {path!r}: attribute {PARTS_ATTR!r}: the parts "
                                f"{[list(r) for r in rows]} do not cover rows 0:{shape[dims.index(dim)]} in "
                                "order, named part0, part1, ...")
    return Parts(path, dim, dims, shape, tuple(n for n, _, _ in rows), tuple(bounds))


def attrs_parts(path: str, attrs: Mapping[str, Any]) -> Parts | None:
    """The layout in a group's attributes, if they hold one."""
    return parse_parts(path, attrs[PARTS_ATTR]) if PARTS_ATTR in attrs else None


def group_attrs(raw: Any, key: str) -> Mapping[str, Any] | None:
    """The attributes in a group's stored document ``raw`` (``.zattrs`` or a v3 ``zarr.json``) when
    it may hold a parts layout, else None (most groups: told without parsing)."""
    if not isinstance(raw, bytes) or PARTS_ATTR.encode() not in raw:
        return None
    var = key.rpartition("/")[0]
    try:
        doc = json.loads(raw)
    except ValueError as e:
        raise InvalidReferences(f"variable {var!r}: {key}, naming {PARTS_ATTR!r}, is not JSON ({e})") from e
    attrs = doc.get("attributes", {}) if isinstance(doc, dict) and key.endswith("zarr.json") else doc
    if not isinstance(attrs, dict):
        raise InvalidReferences(f"variable {var!r}: {key}, naming {PARTS_ATTR!r}, is not a JSON object")
    return attrs


def find_parts(rs: ReferenceSet) -> dict[str, Parts]:
    """Every variable made of parts in ``rs``, by path, each checked against the set's arrays."""
    other = rs.other
    return layouts(zip(other.keys.tolist(), other.data, strict=True), rs.metadata,
                   lambda key: other.find(key) >= 0)


def layouts(items: Iterable[tuple[str, Any]], metadata: Mapping[str, ArrayMetadata],
            has: Callable[[str], bool] | None = None) -> dict[str, Parts]:
    """The variables made of parts among a set's keys outside its arrays (``(key, stored document)``
    pairs), by path, each checked against the set's arrays ``metadata``; ``has(key)``: whether the set
    holds a key (a v2 layout must have its group document), None to not ask."""
    out: dict[str, Parts] = {}
    for key, raw in items:
        head, _, name = key.rpartition("/")
        if name not in (".zattrs", "zarr.json") or head in metadata:
            continue
        attrs = group_attrs(raw, key)
        got = attrs_parts(head, attrs) if attrs is not None else None
        if got is not None:
            group = (f"{head}/.zgroup" if head else ".zgroup") if name == ".zattrs" else None
            if has is not None and group is not None and not has(group):
                raise InvalidReferences(f"variable {head!r}: a layout of parts without its group ({group!r})")
            got.check(metadata)
            out[head] = got
    return out


def group_documents(parts: Parts, attrs: Mapping[str, Any], zarr_format: int) -> dict[str, bytes]:
    """``{key: text}`` of the group that holds ``parts``: its attributes ``attrs`` (the variable's, as
    xarray shows them) with the layout."""
    doc = {**{k: v for k, v in attrs.items() if k != "_ARRAY_DIMENSIONS"}, PARTS_ATTR: parts.to_json()}
    head = f"{parts.path}/" if parts.path else ""
    if zarr_format == 3:
        return {f"{head}zarr.json": _dumps({"zarr_format": 3, "node_type": "group", "attributes": doc})}
    return {f"{head}.zgroup": b'{"zarr_format":2}', f"{head}.zattrs": _dumps(doc)}


def _dumps(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":"), allow_nan=True).encode()


def bounds_of(sizes: Sequence[int]) -> tuple[int, ...]:
    """Part bounds from the parts' sizes along the concat dim."""
    out = [0]
    for s in sizes:
        out.append(out[-1] + int(s))
    return tuple(out)


def why_split(metadata: Mapping[str, ArrayMetadata], layout: Parts, k: int) -> str:
    """What differs between parts ``k - 1`` and ``k`` of ``layout`` (for messages)."""
    from refset.model.decoding import decoding_attrs, decoding_codecs

    a, b = (metadata[p] for p in layout.paths()[k - 1:k + 1])
    pa, pb = layout.paths()[k - 1:k + 1]
    fields = {"chunks": (list(a.chunks), list(b.chunks)), "dtype": (a.dtype_json, b.dtype_json),
              "codecs": (decoding_codecs(a), decoding_codecs(b)), "fill_value": (a.fill_value, b.fill_value)}
    for name, (x, y) in fields.items():
        if x != y and not (x != x and y != y):
            return f"{name} {y!r} in {pb!r} differ from {x!r} in {pa!r}"
    da, db = decoding_attrs(a.attributes), decoding_attrs(b.attributes)
    for name in sorted(set(da) | set(db)):
        if da.get(name) != db.get(name):
            return f"{name} {db.get(name)!r} in {pb!r} differs from {da.get(name)!r} in {pa!r}"
    return (f"the rows of {pa!r} end in a partial (padded) chunk of {a.chunks[layout.axis]} rows along "
            f"{layout.dim!r}: the next rows do not fall on its chunk grid")
