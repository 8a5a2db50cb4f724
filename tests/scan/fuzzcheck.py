"""One case of a scanner's fuzz test: scan a mutated file and read what it gives."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

import refset
from refset.errors import RefsetError

MAX_READ = 64 << 20  # arrays claiming more bytes are scanned, not read: a flipped size allocates them


def scan_and_read(case: Path, *, read: bool = True, mask_and_scale: bool = False) -> str:
    """``"read"`` (the scan succeeded and, with ``read``, every array up to :data:`MAX_READ` bytes read
    through refset.open_dataset), ``"refset error"`` (a RefsetError naming the file), or what went
    wrong: ``"unnamed: ..."`` or ``"bare TYPE: ..."``."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rs = refset.scan(str(case))
            ds = refset.open_dataset(rs, mask_and_scale=mask_and_scale)
            for name in rs.metadata if read else ():
                meta = rs.metadata[name]
                if name in ds.variables and int(np.prod(meta.shape, dtype=np.float64)) * meta.dtype.itemsize < MAX_READ:
                    ds[name].values  # noqa: B018
    except RefsetError as e:
        return "refset error" if str(case) in str(e) else f"unnamed: {e}"
    except Exception as e:
        return f"bare {type(e).__name__}: {e}"
    return "read"
