"""Re-create examples/tiny.nc and examples/tiny.json (run from the repository root).

tiny.nc: a small NetCDF4 file (time x lat x lon, zlib-compressed chunks, one chunk never written).
tiny.json: its Version 0 reference set (made with kerchunk), with the file named relative to the
repository root so that the README's command reads it from there.
"""

import json

import netCDF4
import numpy as np
from kerchunk.hdf import SingleHdf5ToZarr

with netCDF4.Dataset("examples/tiny.nc", "w") as ds:
    ds.createDimension("time", 4)
    ds.createDimension("lat", 6)
    ds.createDimension("lon", 8)
    t = ds.createVariable("time", "f8", ("time",))
    t.units = "days since 2003-01-01"
    t[:] = np.arange(4)
    ds.createVariable("lat", "f4", ("lat",))[:] = np.linspace(-50, 50, 6)
    ds.createVariable("lon", "f4", ("lon",))[:] = np.linspace(0, 315, 8)
    v = ds.createVariable("temp", "f4", ("time", "lat", "lon"), zlib=True, chunksizes=(1, 3, 4),
                          fill_value=-999.0)
    v.units = "K"
    data = 280 + np.arange(4 * 6 * 8, dtype="f4").reshape(4, 6, 8) % 17
    v[:3] = data[:3]  # the last time step is never written: its chunks read as the fill value
refs = SingleHdf5ToZarr("examples/tiny.nc", inline_threshold=0).translate()
refs = refs.get("refs", refs)
for r in refs.values():
    if isinstance(r, list):
        r[0] = "examples/tiny.nc"
with open("examples/tiny.json", "w") as f:
    json.dump(refs, f, indent=1, sort_keys=True)
