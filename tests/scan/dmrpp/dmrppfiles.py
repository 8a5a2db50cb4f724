"""DMR++ sidecars for HDF5 files, written from h5py's own view of their storage (chunk offsets and
sizes from ``get_chunk_info``, the filter pipeline from the dataset's creation property list), in the
layout OPeNDAP's ``build_dmrpp`` writes: an independent description to scan against the file itself."""

from __future__ import annotations

import base64
from pathlib import Path
from xml.sax.saxutils import quoteattr

import numpy as np

_TYPES = {"u1": "Byte", "i1": "Int8", "i2": "Int16", "u2": "UInt16", "i4": "Int32", "u4": "UInt32", "i8": "Int64",
          "u8": "UInt64", "f4": "Float32", "f8": "Float64"}
_FILTERS = {1: "deflate", 2: "shuffle", 3: "fletcher32"}


def _attr(name: str, value: object) -> str:
    v = np.asarray(value)
    if v.dtype.kind in "SUO":
        text = value.decode() if isinstance(value, bytes) else str(value)
        return f'<Attribute name={quoteattr(name)} type="String"><Value>{text}</Value></Attribute>'
    kind = _TYPES[v.dtype.str[1:]]
    vals = "".join(f"<Value>{x!r}</Value>" for x in v.reshape(-1).tolist())
    return f"<Attribute name={quoteattr(name)} type={quoteattr(kind)}>{vals}</Attribute>"


def write_dmrpp(h5path: Path, out: Path, href: str | None = None) -> None:
    import h5py

    lines = ['<?xml version="1.0" encoding="ISO-8859-1"?>',
             '<Dataset xmlns="http://xml.opendap.org/ns/DAP/4.0#" xmlns:dmrpp="http://xml.opendap.org/dap/dmrpp/1.0.0#"'
             f' dapVersion="4.0" dmrVersion="1.0" name={quoteattr(h5path.name)}'
             f' dmrpp:href={quoteattr(href or str(h5path))}>']
    with h5py.File(h5path, "r") as f:
        def group(g: h5py.Group, indent: str) -> None:
            for name, obj in g.items():
                if isinstance(obj, h5py.Group):
                    lines.append(f"{indent}<Group name={quoteattr(name)}>")
                    group(obj, indent + "  ")
                    lines.append(f"{indent}</Group>")
                    continue
                dt = obj.dtype
                kind = _TYPES[dt.str[1:]]
                lines.append(f"{indent}<{kind} name={quoteattr(name)}>")
                lines.extend(f"{indent}  <Dim size=\"{n}\"/>" for n in obj.shape)
                lines.extend(f"{indent}  {_attr(k, v)}" for k, v in obj.attrs.items())
                dcpl = obj.id.get_create_plist()
                names = [_FILTERS[dcpl.get_filter(i)[0]] for i in range(dcpl.get_nfilters())]
                level = next((dcpl.get_filter(i)[2][0] for i in range(dcpl.get_nfilters())
                              if dcpl.get_filter(i)[0] == 1), None)
                comp = f' compressionType="{" ".join(names)}"' if names else ""
                comp += f' deflateLevel="{level}"' if level is not None else ""
                order = "LE" if dt.byteorder in "<=|" else "BE"
                lines.append(f'{indent}  <dmrpp:chunks{comp} fillValue="{obj.fillvalue.item()!r}" byteOrder="{order}">')
                if obj.chunks:
                    lines.append(f"{indent}    <dmrpp:chunkDimensionSizes>{' '.join(map(str, obj.chunks))}"
                                 "</dmrpp:chunkDimensionSizes>")
                    for i in range(obj.id.get_num_chunks()):
                        info = obj.id.get_chunk_info(i)
                        pos = ",".join(str(int(x)) for x in info.chunk_offset)
                        lines.append(f'{indent}    <dmrpp:chunk offset="{info.byte_offset}" nBytes="{info.size}"'
                                     f' chunkPositionInArray="[{pos}]"/>')
                else:
                    lines.append(f'{indent}    <dmrpp:chunk offset="{obj.id.get_offset()}"'
                                 f' nBytes="{obj.id.get_storage_size()}"/>')
                lines.append(f"{indent}  </dmrpp:chunks>")
                lines.append(f"{indent}</{kind}>")
        group(f, "  ")
    lines.append("</Dataset>")
    out.write_text("\n".join(lines))


def compact_dmrpp(out: Path, href: str, values: np.ndarray) -> None:
    """A sidecar holding one variable's values in ``dmrpp:compact`` (base64 of its bytes)."""
    data = base64.b64encode(np.ascontiguousarray(values).tobytes()).decode()
    kind = _TYPES[values.dtype.str[1:]]
    dims = "".join(f'<Dim size="{n}"/>' for n in values.shape)
    out.write_text('<?xml version="1.0"?><Dataset xmlns="http://xml.opendap.org/ns/DAP/4.0#" '
                   'xmlns:dmrpp="http://xml.opendap.org/dap/dmrpp/1.0.0#" name="c" '
                   f'dmrpp:href={quoteattr(href)}><{kind} name="v">{dims}<dmrpp:compact>{data}</dmrpp:compact>'
                   f"</{kind}></Dataset>")
