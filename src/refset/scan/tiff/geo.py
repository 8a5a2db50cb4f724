"""GeoTIFF georeferencing (GeoTIFF 1.1, OGC 19-008r4) as attributes and coordinates xarray users know.

The model tie point and pixel scale (or the model transformation) give GDAL's ``GeoTransform`` (the
corner of the first pixel and the pixel size; a ``PixelIsPoint`` raster shifted half a pixel, as GDAL
reads it); the GeoKey directory gives the keys by name and, where the model is an EPSG projected or
geographic system, ``EPSG:CODE``. Written as rioxarray and GDAL's netCDF driver write them: a
``spatial_ref`` scalar whose attributes hold them, named by each image's ``grid_mapping``, and ``x``/``y``
coordinates at the pixel centres (without rotation).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from refset.io.scanfile import Broken
from refset.scan.tiff.ifd import Ifd

if TYPE_CHECKING:
    from refset.model.setwriter import SetWriter

__all__ = ["Georef", "georeference", "attributes", "write_coordinates", "GEOKEY_NAMES"]

PIXEL_SCALE, TIEPOINT, TRANSFORMATION, KEYS, DOUBLES, ASCII = 33550, 33922, 34264, 34735, 34736, 34737

GEOKEY_NAMES = {
    1024: "GTModelTypeGeoKey", 1025: "GTRasterTypeGeoKey", 1026: "GTCitationGeoKey",
    2048: "GeographicTypeGeoKey", 2049: "GeogCitationGeoKey", 2050: "GeogGeodeticDatumGeoKey",
    2051: "GeogPrimeMeridianGeoKey", 2052: "GeogLinearUnitsGeoKey", 2054: "GeogAngularUnitsGeoKey",
    2056: "GeogEllipsoidGeoKey", 2057: "GeogSemiMajorAxisGeoKey", 2058: "GeogSemiMinorAxisGeoKey",
    2059: "GeogInvFlatteningGeoKey", 3072: "ProjectedCSTypeGeoKey", 3073: "PCSCitationGeoKey",
    3074: "ProjectionGeoKey", 3075: "ProjCoordTransGeoKey", 3076: "ProjLinearUnitsGeoKey",
    3078: "ProjStdParallel1GeoKey", 3079: "ProjStdParallel2GeoKey", 3080: "ProjNatOriginLongGeoKey",
    3081: "ProjNatOriginLatGeoKey", 3082: "ProjFalseEastingGeoKey", 3083: "ProjFalseNorthingGeoKey",
    3088: "ProjCenterLongGeoKey", 3089: "ProjCenterLatGeoKey", 3092: "ProjScaleAtNatOriginGeoKey",
    4096: "VerticalCSTypeGeoKey", 4097: "VerticalCitationGeoKey", 4098: "VerticalDatumGeoKey",
    4099: "VerticalUnitsGeoKey",
}


@dataclass
class Georef:
    transform: list[float]  # GDAL's GeoTransform of the first image
    keys: dict[str, Any] = field(default_factory=dict)

    @property
    def epsg(self) -> int | None:
        for name in ("ProjectedCSTypeGeoKey", "GeographicTypeGeoKey"):
            code = self.keys.get(name)
            if isinstance(code, int) and 1024 <= code < 32767:
                return code
        return None

    @property
    def rotated(self) -> bool:
        return self.transform[2] != 0 or self.transform[4] != 0


def _keys(ifd: Ifd) -> dict[str, Any]:
    if not ifd.has(KEYS):
        return {}
    d = ifd.ints(KEYS)
    if d.size < 4 or d.size < 4 + 4 * int(d[3]):
        raise Broken(f"GeoKey directory of {d.size} values for {int(d[3]) if d.size >= 4 else '?'} keys")
    doubles = ifd.values(DOUBLES).astype(np.float64) if ifd.has(DOUBLES) else np.zeros(0)
    raw_ascii = ifd.text(ASCII) or ""
    out: dict[str, Any] = {}
    for i in range(int(d[3])):
        key, where, count, value = (int(x) for x in d[4 + 4 * i: 8 + 4 * i])
        name = GEOKEY_NAMES.get(key, f"GeoKey{key}")
        if where == 0:
            out[name] = value
        elif where == DOUBLES:
            vals = doubles[value:value + count]
            if vals.size != count:
                raise Broken(f"GeoKey {key}: doubles {value}..{value + count} of {doubles.size}")
            out[name] = float(vals[0]) if count == 1 else [float(v) for v in vals]
        elif where == ASCII:
            out[name] = raw_ascii[value:value + count].rstrip("|\0")
        else:
            out[name] = None  # a key stored in another tag: rare, left unread
    return out


def georeference(ifd: Ifd) -> Georef | None:
    """The georeferencing of the first image, None when it has none."""
    keys = _keys(ifd)
    point = keys.get("GTRasterTypeGeoKey") == 2
    if ifd.has(TRANSFORMATION):
        m = ifd.values(TRANSFORMATION).astype(np.float64)
        if m.size != 16:
            raise Broken(f"ModelTransformation of {m.size} values, expected 16")
        a, b, d, e, f, h = (float(x) for x in (m[0], m[1], m[3], m[4], m[5], m[7]))
        gt = [d, a, b, h, e, f]
        if point:
            gt[0] -= (a + b) / 2
            gt[3] -= (e + f) / 2
    elif ifd.has(PIXEL_SCALE) and ifd.has(TIEPOINT):
        s = ifd.values(PIXEL_SCALE).astype(np.float64)
        t = ifd.values(TIEPOINT).astype(np.float64)
        if s.size < 2 or t.size < 6:
            raise Broken(f"ModelPixelScale of {s.size} or ModelTiepoint of {t.size} values")
        sx, sy = float(s[0]), float(s[1])
        i, j, x, y = float(t[0]), float(t[1]), float(t[3]), float(t[4])
        gt = [x - i * sx, sx, 0.0, y + j * sy, 0.0, -sy]
        if point:
            gt[0] -= sx / 2
            gt[3] += sy / 2
    else:
        return None if not keys else Georef([0.0, 1.0, 0.0, 0.0, 0.0, 1.0], keys)
    if not all(np.isfinite(gt)):
        raise Broken(f"a georeferencing of non-finite numbers {gt}")
    return Georef(gt, keys)


def _transform_text(gt: list[float]) -> str:
    return " ".join(repr(float(v)) for v in gt)


def _scaled(gt: list[float], base: tuple[int, int], size: tuple[int, int]) -> list[float]:
    """The GeoTransform of an overview of ``size`` pixels of an image of ``base`` pixels."""
    fy, fx = base[0] / size[0], base[1] / size[1]
    return [gt[0], gt[1] * fx, gt[2] * fy, gt[3], gt[4] * fx, gt[5] * fy]


def attributes(g: Georef, base: tuple[int, int], size: tuple[int, int]) -> dict[str, Any]:
    """An image's georeferencing attributes: its ``GeoTransform``; the first image's size also names
    ``spatial_ref``."""
    out: dict[str, Any] = {"GeoTransform": _transform_text(_scaled(g.transform, base, size))}
    if size == base:
        out["grid_mapping"] = "spatial_ref"
        out["coordinates"] = "spatial_ref"  # a coordinate of the image, as rioxarray writes it
    return out


def write_coordinates(out: SetWriter, g: Georef, base: tuple[int, int]) -> None:
    """``spatial_ref`` and, without rotation, ``x`` and ``y`` at the first image's pixel centres."""
    attrs: dict[str, Any] = {"GeoTransform": _transform_text(g.transform), **{k: v for k, v in g.keys.items()
                                                                             if v is not None}}
    if g.epsg is not None:
        attrs["spatial_ref"] = f"EPSG:{g.epsg}"
    out.array("spatial_ref", shape=(), chunks=(), dtype=np.dtype("<i8"), fill_value=None, filters=None,
              attrs=attrs, dims=[], inline={0: struct.pack("<q", 0)})
    if g.rotated:
        return
    h, w = base
    gt = g.transform
    x = gt[0] + (np.arange(w, dtype=np.float64) + 0.5) * gt[1]
    y = gt[3] + (np.arange(h, dtype=np.float64) + 0.5) * gt[5]
    for name, vals in (("x", x), ("y", y)):
        out.array(name, shape=vals.shape, chunks=vals.shape, dtype=np.dtype("<f8"), fill_value=None, filters=None,
                  attrs={}, dims=[name], inline={0: vals.astype("<f8").tobytes()})
