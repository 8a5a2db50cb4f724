"""Coordinates of each input along each concat dim, in kerchunk's ``coo_map`` vocabulary.

A selector gives either the input's values along a dim it has (``"data:VAR"``, ``"cf:VAR"``, the
default) or one value for an input of one step / for a new dim (a list, a regex on the input's name,
``"attr:NAME"``, ``"vattr:VAR:NAME"``, ``"INDEX"``, a callable). Times whose ``units``/``calendar``
differ between inputs are decoded with cftime and encoded again in the first input's units.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from refset.combine.values import attributes_of, read_arrays
from refset.errors import InvalidReferences, OptionRef, Problem, Unsupported
from refset.model.decoding import calendar, decoding_attrs, is_time_units, same_calendar_after_1582
from refset.model.stack import SetStack

__all__ = ["Coordinate", "coordinates", "reencode", "is_cf_time"]


@dataclass
class Coordinate:
    """The combined coordinate of one concat dim: sorted values, and per input its values."""

    dim: str
    values: np.ndarray  # sorted, unique
    per_input: list[np.ndarray]  # one array per input (length 1 for one-value selectors)
    attrs: dict[str, Any]  # of the coordinate variable (units of the combined encoding)
    new: bool  # the dim is not in the inputs
    decoded: dict[str, Any] = field(default_factory=dict)  # units/calendar of times cast to datetime64

    def __post_init__(self) -> None:
        # every input's values in one array: input i's are flat[starts[i]:starts[i] + sizes[i]]
        self.sizes = np.array([p.size for p in self.per_input], np.int64)
        self.starts = np.concatenate(([0], np.cumsum(self.sizes)[:-1])).astype(np.int64)
        self.flat = np.concatenate(self.per_input) if self.per_input else self.values[:0]
        self.first = self.flat[np.minimum(self.starts, max(len(self.flat) - 1, 0))]  # one per input


def coordinates(
    inputs: SetStack,
    dims: Sequence[str],
    coo_map: Mapping[str, Any],
    coo_dtypes: Mapping[str, Any],
    storage_options: Mapping[str, Any] | None,
    target: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[Coordinate]:
    """Each dim's combined coordinate. ``target[dim]``: the attributes (CF ``units``/``calendar``)
    times are encoded in, instead of the first input's (a combine done in parts)."""
    out = []
    names = inputs.names
    for dim in dims:
        sel = coo_map.get(dim)
        new = not any(_has_dim(m, dim) for m in inputs.metadata)
        attrs: dict[str, Any] = {}
        if sel is None:
            if not any(dim in m for m in inputs.metadata):
                import difflib

                close = difflib.get_close_matches(dim, inputs.paths(), 1)
                raise InvalidReferences(Problem(
                    f"concat dim {dim!r}: no input has a variable {dim!r} to take its values from"
                    + (f" (did you mean {close[0]!r}?)" if close else "") + "; give ",
                    OptionRef(f"coo_map={{{dim!r}: ...}} (e.g. 'INDEX', a regex on the file name, 'attr:NAME')",
                              "coo_map", dim, "give")))
            sel = f"data:{dim}"
        if isinstance(sel, str) and sel.split(":", 1)[0] in ("data", "cf"):
            kind, var = sel.split(":", 1)
            per, attrs = _data(inputs, dim, var, cf=kind == "cf" or None, so=storage_options,
                               target=(target or {}).get(dim))
        else:
            _check_lengths(sel, inputs.n, dim)
            per = [np.atleast_1d(np.asarray(_one(sel, i, inputs, dim))) for i in range(inputs.n)]
        decoded: dict[str, Any] = {}
        if dim in coo_dtypes:
            per, cast = _cast(per, coo_dtypes[dim], attrs, dim)
            decoded = {k: v for k, v in attrs.items() if k not in cast}
            attrs = cast
        per = [p.astype(str) if p.dtype.kind == "O" and all(isinstance(x, str) for x in p) else p for p in per]
        values = np.unique(np.concatenate(per))
        if len(dims) == 1 and values.size != sum(p.size for p in per):
            _duplicate(per, names, dim, attrs)  # with several dims, inputs share values: see the placement check
        out.append(Coordinate(dim, values, per, attrs, new, decoded))
    return out


def _cast(per: list[np.ndarray], dtype: Any, attrs: dict[str, Any], dim: str,
          ) -> tuple[list[np.ndarray], dict[str, Any]]:
    """``coo_dtypes[dim]`` applied: CF times cast to datetime64 are decoded with their units and
    calendar (as xarray does; a plain cast would read "days since 2024-01-01" 1 as 1970-01-01T00:00:01),
    and the coordinate then carries no ``units``/``calendar``."""
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise InvalidReferences(f"coo_dtypes[{dim!r}]: {dtype!r} is not a numpy dtype ({e})") from None
    if dt.kind != "M" or not is_cf_time(attrs) or all(p.dtype.kind == "M" for p in per):
        try:
            return [p.astype(dt) for p in per], attrs
        except (TypeError, ValueError, OverflowError) as e:
            raise InvalidReferences(f"coo_dtypes[{dim!r}]: the values of {dim!r} do not cast to {dt} ({e})"
                                    ) from None
    import cftime

    units, cal = attrs["units"], calendar(attrs)
    out = []
    for p in per:
        try:
            dates = cftime.num2date(p, units, cal, only_use_cftime_datetimes=False,
                                    only_use_python_datetimes=True)
        except (ValueError, OverflowError) as e:
            raise Unsupported(f"coo_dtypes[{dim!r}]={dt}: the times of {dim!r} in units {units!r}, calendar "
                              f"{cal!r} are not dates numpy's datetime64 holds ({e}); leave them CF-encoded"
                              ) from None
        out.append(np.asarray(dates, dtype="M8[us]").reshape(-1).astype(dt))
    return out, {k: v for k, v in attrs.items() if k not in ("units", "calendar")}


def _has_dim(metadata: Mapping[str, Any], dim: str) -> bool:
    """Whether an array of ``metadata`` has the dimension ``dim`` (a 0-d variable of that name, such
    as a GRIB file's or a daily file's scalar ``time``, makes it a new dim: every variable gains it)."""
    return any(dim in (m.dimension_names or ()) for m in metadata.values())


def _duplicate(per: list[np.ndarray], names: Sequence[str], dim: str, attrs: Mapping[str, Any]) -> None:
    seen: dict[Any, int] = {}
    for i, p in enumerate(per):
        for v in p.tolist():
            if v in seen:
                where = (f"inputs {names[seen[v]]!r} and {names[i]!r} both have"
                         if seen[v] != i else f"input {names[i]!r} has twice")
                raise InvalidReferences(f"concat dim {dim!r}: {where} the value {v!r}{_as_date(v, attrs)}")
            seen[v] = i


def _as_date(v: Any, attrs: Mapping[str, Any]) -> str:
    """`` (2000-01-03 00:00:00)``: a CF time value as the date it stands for; "" when it is none."""
    if not is_cf_time(attrs) or not isinstance(v, int | float):
        return ""
    import cftime

    try:
        return f" ({cftime.num2date(v, attrs['units'], calendar(attrs))})"
    except (ValueError, OverflowError, TypeError):
        return ""


def _coo(dim: str) -> OptionRef:
    """``coo_map[dim]``, named in a problem."""
    return OptionRef(f"coo_map[{dim!r}]", "coo_map", dim)


def _one(sel: Any, i: int, inputs: SetStack, dim: str) -> Any:
    """One input's value for a one-value selector."""
    name = inputs.names[i]
    if isinstance(sel, re.Pattern):
        m = sel.search(name)
        if m is None:
            raise InvalidReferences(Problem(_coo(dim), f": the pattern {sel.pattern!r} does not match the "
                                            f"input {name!r}"))
        return m.group(1) if m.groups() else m.group(0)
    if isinstance(sel, str):
        if sel == "INDEX":
            return i
        kind, _, rest = sel.partition(":")
        if kind == "attr":
            attrs = attributes_of(inputs, i, "")
            if rest not in attrs:
                raise InvalidReferences(Problem(_coo(dim), f"={sel!r}: input {name!r} has no global "
                                                f"attribute {rest!r}"))
            return attrs[rest]
        if kind == "vattr":
            var, _, attr = rest.partition(":")
            attrs = attributes_of(inputs, i, var)
            if attr not in attrs:
                raise InvalidReferences(Problem(_coo(dim), f"={sel!r}: input {name!r} has no attribute "
                                                f"{attr!r} on variable {var!r}"))
            return attrs[attr]
        raise InvalidReferences(Problem(_coo(dim), f": unknown selector {sel!r} (one of 'INDEX', "
                                        "'attr:NAME', 'vattr:VAR:NAME', 'data:VAR', 'cf:VAR', a list, a "
                                        "compiled regex or a callable)"))
    if callable(sel):
        return sel(i, inputs.set(i), name)
    if isinstance(sel, Sequence | np.ndarray):
        return sel[i]
    raise InvalidReferences(Problem(_coo(dim), f": a {type(sel).__name__} is not a selector"))


def _check_lengths(sel: Any, n: int, dim: str) -> None:
    if isinstance(sel, Sequence | np.ndarray) and not isinstance(sel, str) and len(sel) != n:
        raise InvalidReferences(Problem(_coo(dim), f": {len(sel)} values for {n} inputs"))


def _data(inputs: SetStack, dim: str, var: str, cf: bool | None,
          so: Mapping[str, Any] | None, target: Mapping[str, Any] | None = None,
          ) -> tuple[list[np.ndarray], dict[str, Any]]:
    """Each input's values of ``var``, in one common encoding when they are CF times: the first
    input's, or ``target``'s."""
    names = inputs.names
    for m, name in zip(inputs.metadata, names):
        if var not in m:
            raise InvalidReferences(f"concat dim {dim!r}: input {name!r} has no variable {var!r}")
    raw = read_arrays(inputs, var, range(inputs.n), so)
    raw = [np.asarray(r).reshape(-1) for r in raw]
    attrs = [attributes_of(inputs, i, var, so) for i in range(inputs.n)]
    first = dict(target) if target is not None else attrs[0]
    keep = {k: v for k, v in first.items() if k != "_ARRAY_DIMENSIONS"}
    is_time = is_cf_time(first)
    if cf is None:
        cf = is_time
    _same_packing(attrs, names, var, dim)
    if not cf:
        return raw, keep
    if not is_time:
        raise Unsupported(Problem(_coo(dim), f"='cf:{var}': input {names[0]!r}: {var!r} has no CF time "
                                  f"units (units={first.get('units')!r})"))
    return reencode(raw, attrs, first, names, dim, var), keep


def _same_packing(attrs: Sequence[Mapping[str, Any]], names: Sequence[str], var: str, dim: str) -> None:
    """The coordinate's values are kept as stored, with the first input's attributes: the CF attributes
    they decode with (but times' ``units``/``calendar``, which are re-encoded) must agree."""
    def packing(a: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in decoding_attrs(a).items() if k not in ("units", "calendar")}

    want = packing(attrs[0])
    for a, name in zip(attrs[1:], names[1:]):
        if a is attrs[0]:
            continue
        got = packing(a)
        if got != want:
            field = next(k for k in sorted(set(got) | set(want)) if got.get(k) != want.get(k))
            raise Unsupported(f"concat dim {dim!r}: {field} {got.get(field)!r} of {var!r} in input {name!r} "
                              f"differs from {want.get(field)!r} in input {names[0]!r}: its values would be "
                              "decoded with the first input's")


def is_cf_time(attrs: Mapping[str, Any]) -> bool:
    return is_time_units(attrs.get("units"))


def reencode(raw: Sequence[np.ndarray], attrs: Sequence[Mapping[str, Any]], first: Mapping[str, Any],
             names: Sequence[str], dim: str, var: str) -> list[np.ndarray]:
    """CF times of each input (``raw[i]`` in ``attrs[i]``'s units) in ``first``'s units. Different
    calendars are refused, but for ``standard`` and ``proleptic_gregorian`` on dates from 1582-10-15
    on, where they agree (xarray writes the one, many archives the other)."""
    units = [a.get("units") for a in attrs]
    cal = [calendar(a) for a in attrs]
    units0, cal0 = first.get("units"), calendar(first)
    for r, u, c, name in zip(raw, units, cal, names):
        if not is_time_units(u):
            raise Unsupported(f"concat dim {dim!r}: input {name!r}: {var!r} has units {u!r}, not CF "
                              "time units like the first input's")
        if c != cal0 and not ({c, cal0} <= {"standard", "proleptic_gregorian"}
                              and same_calendar_after_1582(r, u, c)):
            raise Unsupported(f"concat dim {dim!r}: input {name!r} uses calendar {c!r}, the first "
                              f"input {cal0!r}: dates of different calendars cannot share one time axis"
                              + (" (these two agree only from 1582-10-15 on)"
                                 if {c, cal0} <= {"standard", "proleptic_gregorian"} else ""))
    if all(u == units0 for u in units):
        return list(raw)
    import cftime

    out = []
    for r, u, c in zip(raw, units, cal):
        if u == units0:
            out.append(np.asarray(r, np.float64).reshape(-1))
            continue
        # dates of the other calendar of the pair are real dates after 1582: decoded as such
        try:
            dates = cftime.num2date(r, u, c, only_use_cftime_datetimes=c == cal0,
                                    only_use_python_datetimes=c != cal0)
            out.append(np.asarray(cftime.date2num(dates, units0, cal0)).reshape(-1))
        except (ValueError, OverflowError, TypeError) as e:
            name = names[len(out)]
            raise InvalidReferences(f"concat dim {dim!r}: input {name!r}: the times of {var!r} (units {u!r}, "
                                    f"calendar {c!r}) cannot be read as dates in the first input's units "
                                    f"{units0!r}: {e}") from None
    dtype = raw[0].dtype
    if dtype.kind in "iu" and all(np.array_equal(o, np.round(o)) for o in out):
        return [o.astype(dtype) for o in out]
    return [o.astype(np.float64) for o in out]
