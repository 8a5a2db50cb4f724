"""GRIB files for the tests, written with ecCodes from its own samples."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np


def write_grib(path: Path, fields: Iterable[dict[str, object]], *, sample: str = "regular_ll_pl_grib2",
               seed: int = 0) -> list[np.ndarray]:
    """One message per field (keys set in order: shortName, typeOfLevel, level, dataDate, dataTime,
    step in hours, number, ...), random values (``missing``: indices set to the missing value, with a
    bitmap). The values written, as ecCodes reads them back."""
    import eccodes

    rng = np.random.default_rng(seed)
    out = []
    with open(path, "wb") as f:
        for fld in fields:
            h = eccodes.codes_grib_new_from_samples(sample)
            try:
                missing = fld.get("missing")
                for k, v in fld.items():
                    if k == "missing":
                        continue
                    if k == "step":
                        eccodes.codes_set(h, "stepUnits", "h")
                    if k == "number":
                        eccodes.codes_set(h, "productDefinitionTemplateNumber", 1)
                        eccodes.codes_set(h, "typeOfEnsembleForecast", 3)
                        eccodes.codes_set(h, "numberOfForecastsInEnsemble", 10)
                        eccodes.codes_set(h, "perturbationNumber", v)
                        continue
                    eccodes.codes_set(h, k, v)
                n = eccodes.codes_get(h, "numberOfPoints")
                vals = rng.normal(280, 10, n).round(2)
                if missing is not None:
                    eccodes.codes_set(h, "bitmapPresent", 1)
                    vals[list(missing)] = eccodes.codes_get(h, "missingValue")  # type: ignore[call-overload]
                eccodes.codes_set_values(h, vals)
                eccodes.codes_write(h, f)
                out.append(np.asarray(eccodes.codes_get_values(h)))
            finally:
                eccodes.codes_release(h)
    return out


def forecast(path: Path, *, date: int = 20240115, seed: int = 0) -> list[np.ndarray]:
    """Two pressure-level variables (t, u) on two levels and a 2 m temperature, three steps each."""
    fields: list[dict[str, object]] = []
    for var, tol, levels in (("t", "isobaricInhPa", (500, 850)), ("u", "isobaricInhPa", (500, 850)),
                             ("2t", "heightAboveGround", (2,))):
        for lv in levels:
            for st in (0, 6, 12):
                fields.append({"shortName": var, "typeOfLevel": tol, "level": lv, "dataDate": date,
                               "dataTime": 1200, "step": st})
    return write_grib(path, fields, seed=seed)


def write_idx(grib: Path) -> Path:
    """wgrib2's inventory of ``grib`` (``GRIB.idx``), from ecCodes: offsets, reference times, levels
    and steps."""
    import eccodes

    lines = []
    with open(grib, "rb") as f:
        n = 0
        while True:
            h = eccodes.codes_grib_new_from_file(f)
            if h is None:
                break
            try:
                n += 1
                off = int(eccodes.codes_get(h, "offset"))
                date, time = int(eccodes.codes_get(h, "dataDate")), int(eccodes.codes_get(h, "dataTime"))
                var = str(eccodes.codes_get(h, "shortName")).upper()
                level = f"{eccodes.codes_get(h, 'level')} {eccodes.codes_get(h, 'typeOfLevel')}"
                step = int(eccodes.codes_get(h, "endStep"))
                fc = "anl" if step == 0 else f"{step} hour fcst"
                lines.append(f"{n}:{off}:d={date}{time // 100:02d}:{var}:{level}:{fc}:")
            finally:
                eccodes.codes_release(h)
    out = grib.with_name(grib.name + ".idx")
    out.write_text("\n".join(lines) + "\n")
    return out
