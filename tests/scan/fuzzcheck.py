"""One case of a scanner's fuzz test: scan a mutated file and read what it gives; and what makes a
scan's refusal of a file right (:func:`refusal_problem`), which every scan fuzz applies."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

import refset
from refset.errors import InvalidFile, RefsetError

MAX_READ = 64 << 20  # arrays claiming more bytes are scanned, not read: a flipped size allocates them


def from_broken(e: BaseException) -> bool:
    """Whether a scan's ``InvalidFile`` comes from the scan's one ``Broken`` (a structure no valid file
    has, or a library's refusal of the file wrapped in one where the library is called): the frame
    raises it from the Broken, or from the library's error with the Broken as its context."""
    from refset.io.scanfile import Broken

    seen: set[int] = set()
    todo: list[BaseException | None] = [e]
    while todo:
        x = todo.pop()
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, Broken):
            return True
        todo += [x.__cause__, x.__context__]
    return False


def refusal_problem(case: str, e: RefsetError) -> str | None:
    """What is wrong with a scan's refusal of the file ``case`` (None: nothing): it does not name the
    file, or it is an ``InvalidFile`` no ``Broken`` caused (an error that is no format fault passed
    off as the file's: the frame maps Broken alone, anything else is a bug and propagates)."""
    if isinstance(e, InvalidFile) and not from_broken(e):
        return f"InvalidFile not from Broken: {e}"
    if case not in str(e):
        return f"unnamed: {e}"
    return None


def scan_and_read(case: Path, *, read: bool = True, mask_and_scale: bool = False) -> str:
    """``"read"`` (the scan succeeded and, with ``read``, every array up to :data:`MAX_READ` bytes read
    through refset.open_dataset), ``"refset error"`` (a RefsetError naming the file; from the scan,
    an InvalidFile from a Broken), or what went wrong: ``"unnamed: ..."``, ``"InvalidFile not from
    Broken: ..."`` or ``"bare TYPE: ..."``."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rs = refset.scan(str(case))
    except RefsetError as e:
        return refusal_problem(str(case), e) or "refset error"
    except Exception as e:
        return f"bare {type(e).__name__}: {e}"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
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
