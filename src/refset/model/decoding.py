"""What decoding a variable's stored values needs, compared between the inputs of a combine.

A combined variable has one ``.zarray`` and one ``.zattrs``: every input's chunks are decoded with them.
So inputs may differ where decoding does not look (a zlib level, a ``history`` attribute, ``gregorian``
for ``standard``) and must agree where it does: the codecs' decoding parameters, and the CF attributes
xarray decodes with (packing, fill and missing values, valid ranges, ``_Unsigned``, ``_Encoding``, and
the ``units``/``calendar`` of times, also those a bounds variable inherits from its parent; units of
durations; xarray's ``dtype`` attribute). A difference
there is refused naming the variable, the field and both inputs, never decoded with the first input's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeGuard

from refset.model.metadata import ArrayMetadata

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = ["CF_DECODING", "decoding_codecs", "decoding_attrs", "time_encoding", "attrs_difference", "calendar",
           "calendars_needing_dates", "same_calendar_after_1582", "bounds_parent", "is_time_units",
           "absent_reads_missing", "missing_fill"]

#: CF attributes xarray decodes stored values with (besides the ``units``/``calendar`` of times).
CF_DECODING = ("scale_factor", "add_offset", "_FillValue", "missing_value", "valid_min", "valid_max",
               "valid_range", "_Unsigned", "_Encoding")

#: Codec parameters that only the encoder uses: the decoder reads what it needs from the stream.
_ENCODE_ONLY: Mapping[str, frozenset[str]] = {
    "zlib": frozenset({"level"}),
    "gzip": frozenset({"level"}),
    "bz2": frozenset({"level"}),
    "zstd": frozenset({"level", "checksum"}),
    "lz4": frozenset({"acceleration"}),
    "blosc": frozenset({"cname", "clevel", "shuffle", "blocksize", "typesize", "nthreads"}),
    "lzma": frozenset({"preset"}),
}

#: Units xarray decodes as durations (``decode_timedelta``).
_DURATIONS = frozenset({"days", "day", "d", "hours", "hour", "hr", "h", "minutes", "minute", "min",
                        "seconds", "second", "sec", "s", "milliseconds", "millisecond", "msec", "ms",
                        "microseconds", "microsecond", "usec", "us", "nanoseconds", "nanosecond", "nsec",
                        "ns"})

_CALENDARS = {"gregorian": "standard", "365_day": "noleap", "366_day": "all_leap"}
#: The calendars that agree on every date from 1582-10-15 on.
_AGREE_AFTER_1582 = frozenset({"standard", "proleptic_gregorian"})


def decoding_codecs(meta: ArrayMetadata) -> tuple[Any, ...]:
    """The codecs of an array as their decoders need them, in the order they encode (zarr v2's
    ``filters``, then its ``compressor``: a compressor is the last filter, zarr decodes it first)."""
    m = meta.to_v2()
    return tuple(_codec(s) for s in [*m.filters, m.compressor] if s is not None)


def _codec(spec: Any) -> Any:
    if not isinstance(spec, Mapping):
        return _frozen(spec)
    drop = _ENCODE_ONLY.get(str(spec.get("id")), frozenset())
    return _frozen({k: v for k, v in spec.items() if k not in drop})


def _frozen(v: Any) -> Any:
    if isinstance(v, Mapping):
        return tuple(sorted((str(k), _frozen(x)) for k, x in v.items()))
    if isinstance(v, list | tuple):
        return tuple(_frozen(x) for x in v)
    return v


def calendar(attrs: Mapping[str, Any]) -> str:
    """The CF calendar of ``attrs``, aliases resolved (``standard`` when there is none)."""
    c = attrs.get("calendar", "standard")
    c = c.lower() if isinstance(c, str) else c
    return _CALENDARS.get(c, c)


def is_time_units(units: Any) -> TypeGuard[str]:
    return isinstance(units, str) and " since " in units


def decoding_attrs(attrs: Mapping[str, Any], parent: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The attributes of ``attrs`` that decoding its values looks at, normalised for comparison.
    ``parent``: the attributes of the variable whose ``bounds`` names this one (CF bounds inherit
    the parent's ``units`` and ``calendar`` where they have none, and xarray decodes them so)."""
    out = {k: _value(attrs[k]) for k in CF_DECODING if k in attrs}
    if "_Unsigned" in out and isinstance(out["_Unsigned"], str):
        out["_Unsigned"] = out["_Unsigned"].lower()
    units, cal = time_encoding(attrs, parent)
    if is_time_units(units):
        out["units"] = " ".join(str(units).split())
        out["calendar"] = cal
    elif isinstance(units, str) and units.strip().lower() in _DURATIONS:
        out["units"] = units.strip().lower()  # xarray decodes durations (decode_timedelta) with them
    if "dtype" in attrs:  # xarray's own encoding of bool and timedelta64 variables
        out["dtype"] = attrs["dtype"]
    return out


def time_encoding(attrs: Mapping[str, Any], parent: Mapping[str, Any] | None = None) -> tuple[Any, str]:
    """``(units, calendar)`` a variable's values decode with: each inherited from ``parent`` (the
    variable it is the bounds of) where the variable has none, as xarray does."""
    timed = dict(attrs)
    for k in ("units", "calendar"):
        if parent is not None and k not in timed and k in parent:
            timed[k] = parent[k]
    return timed.get("units"), calendar(timed)


def _value(v: Any) -> Any:
    """An attribute value for comparison: numbers as floats (NaN equal to NaN, 1 equal to 1.0 and [1]),
    lists as tuples."""
    if isinstance(v, list | tuple):
        vals = tuple(_value(x) for x in v)
        return vals[0] if len(vals) == 1 else vals
    if isinstance(v, bool) or not isinstance(v, int | float):
        return v if v not in ("NaN", "nan") else _NAN
    return _NAN if math.isnan(v) else float(v)


class _Nan:
    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Nan)

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "nan"


_NAN = _Nan()


def attrs_difference(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[str, Any, Any] | None:
    """The first decoding attribute in which ``a`` and ``b`` (from :func:`decoding_attrs`) differ, as
    ``(name, a's value, b's value)`` (None: absent); a calendar pair that agrees after 1582 is not a
    difference here (see :func:`same_calendar_after_1582`)."""
    for name in sorted(set(a) | set(b)):
        va, vb = a.get(name), b.get(name)
        if va == vb:
            continue
        if name == "calendar" and {va, vb} <= _AGREE_AFTER_1582:
            continue
        return name, va, vb
    return None


def calendars_needing_dates(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether ``a`` and ``b`` agree only if the dates lie on or after 1582-10-15."""
    ca, cb = a.get("calendar"), b.get("calendar")
    return ca != cb and {ca, cb} <= _AGREE_AFTER_1582


def same_calendar_after_1582(values: ArrayLike, units: str, cal: str) -> bool:
    """Whether every number of ``values`` (in ``units``, calendar ``cal``) is a date on or after
    1582-10-15, where ``standard`` and ``proleptic_gregorian`` agree."""
    import numpy as np

    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    arr = arr[np.isfinite(arr)]
    if not arr.size:
        return True
    import cftime

    try:
        first = cftime.num2date(float(arr.min()), units, cal)
    except (ValueError, OverflowError):
        return False
    return bool((first.year, first.month, first.day) >= (1582, 10, 15))


def bounds_parent(metadata: Mapping[str, ArrayMetadata], path: str) -> str | None:
    """The path of the array in ``metadata`` whose ``bounds`` attribute names ``path`` (same group),
    or None."""
    group, _, leaf = path.rpartition("/")
    for var, m in metadata.items():
        if var == path or var.rpartition("/")[0] != group:
            continue
        if m.attributes.get("bounds") == leaf:
            return var
    return None


def _mask_values(meta: ArrayMetadata, attrs: Mapping[str, Any]) -> list[Any]:
    """The values xarray's CF decoding masks besides the zarr fill value: a zarr v3 array's
    ``_FillValue`` attribute (xarray's encoding of it) and ``missing_value`` (one value or several)."""
    from refset.model.dtypes import xarray_fill_value

    out: list[Any] = []
    if meta.zarr_format == 3 and "_FillValue" in attrs:
        out.append(xarray_fill_value(attrs["_FillValue"], meta.dtype))
    mv = attrs.get("missing_value")
    out.extend(mv if isinstance(mv, list) else [] if mv is None else [mv])
    return out


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) or (a != a and b != b)
    except (TypeError, ValueError):
        return False


def absent_reads_missing(meta: ArrayMetadata, attrs: Mapping[str, Any]) -> bool:
    """Whether a chunk without a reference decodes as missing (NaN) in xarray with its CF masking on: it
    reads as the zarr fill value, which must be NaN or a value xarray masks (zarr v2: the fill value is
    xarray's ``_FillValue``; zarr v3: the ``_FillValue`` or ``missing_value`` attribute equal to it)."""
    fill = meta.fill
    if fill is None:
        return False
    if meta.dtype.kind in "fc" and meta.dtype.names is None and fill != fill:
        return True
    if meta.zarr_format == 2:
        return True
    return any(_equal(fill, m) for m in _mask_values(meta, attrs))


def missing_fill(meta: ArrayMetadata, attrs: Mapping[str, Any]) -> Any:
    """A zarr fill value (the document's JSON form) under which a chunk without a reference decodes as
    missing and present values decode as before, or None when there is none: NaN for floats; for
    integers a value xarray masks already (``missing_value``, a zarr v3 ``_FillValue``) that the type
    holds. Integers without one have no such value: any other would mask stored values."""
    import numpy as np

    from refset.model.dtypes import fill_json

    dt = meta.dtype
    if dt.names is not None:
        return None
    if dt.kind in "fc":
        return fill_json(np.nan, dt)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        for m in _mask_values(meta, attrs):
            if isinstance(m, bool) or not isinstance(m, int | float) or m != m:
                continue
            if float(m).is_integer() and info.min <= m <= info.max:
                return int(m)
    return None
