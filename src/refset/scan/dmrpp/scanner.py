"""DMR++ sidecars -> reference sets: the :class:`DmrppScanner`.

A DMR++ file (OPeNDAP's DAP4 metadata response with ``dmrpp:`` chunk annotations, as NASA's
``build_dmrpp`` writes it beside HDF5/NetCDF4 granules) describes every chunk of every variable: its
byte offset and size in the granule (``dmrpp:href``, resolved against the sidecar's own location when
relative), the filters (``compressionType``: ``shuffle``, ``deflate``, ``fletcher32``, in the order
they were applied), the fill value and byte order. The set is made from the sidecar, and the
granule's chunks smaller than ``inline_threshold`` are read from it (opened beside the sidecar through
the scan's opener, all in one batch); with ``inline_threshold=0`` the granule is not read at all. Groups become zarr groups; ``<Dim size=N/>`` and named dimensions become
``_ARRAY_DIMENSIONS``; attributes (``<Attribute><Value>``) become attributes; ``dmrpp:compact`` data is
inlined. Refused, naming the variable: strings and other non-numeric types, filters other than those
three, chunk positions off the chunk grid. A sidecar that is not well-formed XML or lacks what a DMR++
holds is :class:`~refset.errors.InvalidFile`.
"""

from __future__ import annotations

import base64
import math
import re
import xml.etree.ElementTree as ET
from typing import Any, ClassVar

import numpy as np

from refset.abc.scanner import DropList
from refset.errors import ReferenceNotReachable
from refset.io.magic import is_dmrpp
from refset.io.scanfile import Broken, ScanFile, resolve
from refset.model.setwriter import SetWriter
from refset.scan.flat import FlatScanner
from refset.scan.writer import cannot

__all__ = ["DmrppScanner", "MAX_BYTES"]

MAX_BYTES = 1 << 30  # a sidecar larger than this is refused (build_dmrpp's are kilobytes to megabytes)
DAP = "{http://xml.opendap.org/ns/DAP/4.0#}"
_DMRPP_NS = ("http://xml.opendap.org/dap/dmrpp/1.0.0#", "https://xml.opendap.org/dap/dmrpp/1.0.0#")
_TYPES = {"Byte": "u1", "UInt8": "u1", "Int8": "i1", "Char": "S1", "Int16": "i2", "UInt16": "u2", "Int32": "i4",
          "UInt32": "u4", "Int64": "i8", "UInt64": "u8", "Float32": "f4", "Float64": "f8"}
_ATTR_TYPES = {"Byte", "UInt8", "Int8", "Int16", "UInt16", "Int32", "UInt32", "Int64", "UInt64", "Float32",
               "Float64", "String", "URL"}


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _attr(el: ET.Element, name: str) -> str | None:
    """An attribute of ``el`` in the dmrpp namespace (either scheme) or none."""
    for ns in _DMRPP_NS:
        v = el.get(f"{{{ns}}}{name}")
        if v is not None:
            return v
    return el.get(name)


class DmrppScanner(FlatScanner):
    """DMR++ sidecar files (``.dmrpp``): the granule they describe, reading only its chunks smaller than
    ``inline_threshold``."""

    name: ClassVar[str] = "dmrpp"
    title: ClassVar[str] = "DMR++"

    @classmethod
    def sniff(cls, head: bytes) -> bool:
        # docstring inherited
        return is_dmrpp(head)

    def walk(self, file: ScanFile, out: SetWriter, drop: DropList) -> ScanFile | None:
        # docstring inherited: the references point into the granule, opened when chunks are to be read
        if file.size > MAX_BYTES:
            raise Broken(f"a DMR++ of {file.size:,} bytes (more than {MAX_BYTES:,})", titled=False)
        text = file.read_exact(0, file.size, metadata=False)  # its references point into another file
        try:
            root = ET.fromstring(text)
        except ET.ParseError as e:
            raise Broken(f"not well-formed XML ({e})") from None
        except (LookupError, ValueError) as e:  # the XML parser's other refusals: an encoding it has not
            raise Broken(f"not XML the parser reads ({type(e).__name__}: {e})") from None
        if _local(root.tag) != "Dataset":
            raise Broken(f"its root is <{_local(root.tag)}>, not <Dataset>")
        href = _attr(root, "href")
        if not href:
            raise Broken("the <Dataset> has no dmrpp:href naming the granule")
        granule = resolve(href, file.url)
        # references name the granule: the writer's URL table holds it (the sidecar is not referenced)
        out.url = granule
        self._group(out, root, "", _declared(root, ""), granule, drop)
        if not out.small_chunks:
            return None  # nothing to read from the granule
        try:
            return file.sibling(granule)
        except OSError as e:
            raise ReferenceNotReachable("", granule, f"the granule {file.url} describes, whose chunks below "
                                        f"inline_threshold={self.inline_threshold} bytes are stored in the set "
                                        f"({type(e).__name__}: {e}); inline_threshold=0 scans the sidecar "
                                        "alone") from e

    def _group(self, out: SetWriter, el: ET.Element, path: str, dims: dict[str, int], granule: str,
               drop: DropList) -> None:
        dims = dict(dims)  # full paths, and this group's own names
        for child in el:
            if _local(child.tag) == "Dimension" and child.get("name"):
                dims[str(child.get("name"))] = dims[f"/{path}/{child.get('name')}" if path else f"/{child.get('name')}"]
        out.group(path, _attributes(el))
        names = [c.get("name") for c in el if _local(c.tag) in ("Group", *_TYPES, "String", "URL", "Structure",
                                                                   "Sequence", "Opaque", "Enum")]
        if len(names) != len(set(names)):
            dup = next(n for n in names if names.count(n) > 1)
            raise Broken(f"two members named {dup!r} in group {'/' + path!r}")
        for child in el:
            tag = _local(child.tag)
            if tag == "Group":
                name = child.get("name") or ""
                if not name or "/" in name:
                    raise Broken(f"a <Group> named {name!r}")
                self._group(out, child, f"{path}/{name}" if path else name, dims, granule, drop)
            elif tag in _TYPES or tag in ("String", "URL", "Structure", "Sequence", "Opaque", "Enum"):
                name = child.get("name") or ""
                if not name or "/" in name:
                    raise Broken(f"a <{tag}> named {name!r}")
                full = f"{path}/{name}" if path else name
                if name in drop or full in drop:
                    continue
                self._variable(out, child, tag, full, dims)

    def _variable(self, out: SetWriter, el: ET.Element, tag: str, path: str, dims: dict[str, int]) -> None:
        if tag not in _TYPES or tag == "Char":
            raise cannot(path, f"DAP type {tag} is not referenced (numeric types are)")
        shape: list[int] = []
        names: list[str] = []
        for d in el:
            if _local(d.tag) != "Dim":
                continue
            if d.get("size") is not None:
                if not d.get("size", "").isdigit():
                    raise Broken(f"variable {path!r}: <Dim size={d.get('size')!r}>")
                shape.append(int(d.get("size", "0")))
                names.append(f"{path.rsplit('/', 1)[-1]}_dim{len(names)}")
            else:
                ref = d.get("name") or ""
                if ref not in dims and ref.lstrip("/") not in dims:
                    raise Broken(f"variable {path!r}: dimension {ref!r} is not declared")
                shape.append(dims.get(ref, dims.get(ref.lstrip("/"), 0)))
                names.append(ref.rsplit("/", 1)[-1])
        chunks_el = next((c for c in el if _local(c.tag) == "chunks"), None)
        compact = next((c for c in el if _local(c.tag) == "compact"), None)
        order = "<"
        fill = None
        filters: list[dict[str, Any]] = []
        item = np.dtype(_TYPES[tag]).itemsize
        if chunks_el is not None:
            order = {"LE": "<", "BE": ">"}.get(chunks_el.get("byteOrder", "LE"), "")
            if not order:
                raise Broken(f"variable {path!r}: byteOrder {chunks_el.get('byteOrder')!r}")
            fill = chunks_el.get("fillValue")
            filters = _filters(chunks_el.get("compressionType") or "", item, chunks_el.get("deflateLevel"), path)
        dtype = np.dtype(("|" if item == 1 else order) + _TYPES[tag])
        attrs = _attributes(el)
        fill_value = _fill(fill, dtype, path) if fill is not None else None
        if compact is not None:
            try:
                data = base64.b64decode((compact.text or "").strip(), validate=False)
            except ValueError:
                raise Broken(f"variable {path!r}: dmrpp:compact is not base64") from None
            if len(data) != math.prod(shape) * dtype.itemsize:
                raise Broken(f"variable {path!r}: {len(data)} bytes of compact data for shape {shape}")
            out.array(path, shape=tuple(shape), chunks=tuple(shape) if shape else (), dtype=dtype,
                      fill_value=fill_value, filters=None, attrs=attrs, dims=names, inline={0: data})
            return
        if chunks_el is None:
            raise cannot(path, "no dmrpp:chunks and no dmrpp:compact (its values are not in the granule)")
        size_el = next((c for c in chunks_el if _local(c.tag) == "chunkDimensionSizes"), None)
        cshape = [int(x) for x in (size_el.text or "").split()] if size_el is not None else list(shape)
        if len(cshape) != len(shape) or any(c <= 0 for c in cshape):
            raise Broken(f"variable {path!r}: chunk sizes {cshape} for shape {shape}")
        grid = tuple(-(-s // c) for s, c in zip(shape, cshape))
        n = math.prod(grid) if grid else 1
        offset = np.zeros(n, np.int64)
        length = np.zeros(n, np.int64)
        for c in chunks_el:
            if _local(c.tag) != "chunk":
                continue
            if _attr(c, "href") is not None:
                raise cannot(path, "chunks in other files than the granule (per-chunk href)")
            try:
                o, nb = int(c.get("offset", "")), int(c.get("nBytes", ""))
            except ValueError:
                raise Broken(f"variable {path!r}: a chunk's offset/nBytes {c.attrib}") from None
            pos_text = c.get("chunkPositionInArray")
            pos = [int(x) for x in re.findall(r"-?\d+", pos_text)] if pos_text else [0] * len(shape)
            if len(pos) != len(shape) or any(p < 0 or p % k or p >= max(s, 1) for p, k, s in zip(pos, cshape, shape)):
                raise cannot(path, f"chunk position {pos_text} is off its grid of {cshape} chunks")
            if o < 0 or nb < 0:
                raise Broken(f"variable {path!r}: a chunk at {o} of {nb} bytes")
            flat = int(np.ravel_multi_index(tuple(p // k for p, k in zip(pos, cshape)), grid)) if grid else 0
            offset[flat], length[flat] = o, nb
        gshape = grid if grid else ()
        out.array(path, shape=tuple(shape), chunks=tuple(cshape), dtype=dtype, fill_value=fill_value,
                  filters=filters or None, attrs=attrs, dims=names,
                  offset=offset.reshape(gshape), length=length.reshape(gshape))


def _declared(el: ET.Element, path: str) -> dict[str, int]:
    """Every ``<Dimension>`` of ``el`` and the groups under it, by its full path (``/g/x``)."""
    out: dict[str, int] = {}
    for child in el:
        tag = _local(child.tag)
        if tag == "Dimension":
            name, size = child.get("name"), child.get("size")
            if name is None or size is None or not size.isdigit():
                raise Broken(f"a <Dimension> without a name or a size: {child.attrib}")
            out[f"{path}/{name}"] = int(size)
        elif tag == "Group" and child.get("name"):
            out.update(_declared(child, f"{path}/{child.get('name')}"))
    return out


def _filters(spec: str, item: int, level: str | None, path: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for name in spec.split():
        if name == "shuffle":
            if item > 1:
                out.append({"id": "shuffle", "elementsize": item})
        elif name == "deflate":
            out.append({"id": "zlib", "level": int(level) if level and level.isdigit() else 6})
        elif name == "fletcher32":
            out.append({"id": "fletcher32"})
        else:
            raise cannot(path, f"filter {name!r} (shuffle, deflate and fletcher32 are referenced)")
    return out


def _fill(text: str, dtype: np.dtype[Any], path: str) -> Any:
    """A ``fillValue`` as a value of ``dtype`` (integers parsed exactly: 64-bit fills do not survive a
    float); one the type cannot hold is refused."""
    t = text.strip()
    if dtype.kind == "f":
        try:
            return float(t)
        except ValueError:
            raise Broken(f"variable {path!r}: fillValue {text!r} is no {dtype}") from None
    m = re.fullmatch(r"([+-]?\d+)(?:\.0*)?", t)
    if m is None:
        raise Broken(f"variable {path!r}: fillValue {text!r} is no {dtype}")
    v = int(m.group(1))
    info = np.iinfo(dtype)
    if not info.min <= v <= info.max:
        raise Broken(f"variable {path!r}: fillValue {v} is outside {dtype}")
    return v


def _attributes(el: ET.Element) -> dict[str, Any]:
    """The ``<Attribute>`` children of ``el`` (numbers as numbers, one value as a scalar; containers
    left out)."""
    out: dict[str, Any] = {}
    for a in el:
        if _local(a.tag) != "Attribute":
            continue
        kind, name = a.get("type", ""), a.get("name")
        if not name or kind not in _ATTR_TYPES:
            continue
        values: list[Any] = [v.text or "" for v in a if _local(v.tag) == "Value"]
        if kind not in ("String", "URL"):
            try:
                values = [float(v) if kind.startswith("Float") else int(v) for v in values]
            except ValueError:
                continue
        if values:
            out[name] = values[0] if len(values) == 1 else values
    return out
