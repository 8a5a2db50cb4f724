"""Warnings a scan holds back until it succeeds, kept per thread.

The native HDF5 walk may give up half-way and hand the file to h5py, whose walk would warn again: its
warnings are held (:func:`held`; numpy's floating-point ones through :func:`numpy_warning`) and
released (:func:`release`) once it succeeds. Other libraries' warnings are not held (Python 3.11 has no
per-thread warning state to hold them with). ``warnings.
catch_warnings`` would hold them too, but it swaps the process's filters and ``showwarning`` for the
block, and threads (``Scan.many``'s) entering and leaving such blocks out of order leave them swapped:
every later warning of the process filtered differently or appended to a finished scan's list. A scanner
warns with :func:`warn`: at once, or into its thread's hold.
"""

from __future__ import annotations

import sys
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["warn", "held", "release", "numpy_warning"]

_local = threading.local()


def warn(message: str | Warning, category: type[Warning] = UserWarning, stacklevel: int = 1) -> None:
    """``warnings.warn(message, category, stacklevel)``, or into the calling thread's :func:`held` list,
    with the file and line ``stacklevel`` names, to be released as they would have been warned."""
    box = getattr(_local, "box", None)
    if box is None:
        warnings.warn(message, category, stacklevel=stacklevel + 1)
        return
    if isinstance(message, Warning):
        category = type(message)
    try:
        frame = sys._getframe(stacklevel)
    except ValueError:  # fewer frames than asked: the outermost
        frame = sys._getframe(0)
        while frame.f_back is not None:
            frame = frame.f_back
    box.append((message, category, frame.f_code.co_filename, frame.f_lineno))


def numpy_warning(kind: str, flag: int) -> None:
    """For ``np.errstate(call=numpy_warning)`` (per context, so per thread): numpy's floating-point
    warnings ("overflow", "invalid value", ...) through :func:`warn`, held with the others."""
    warn(f"{kind} encountered in a numpy operation", RuntimeWarning, stacklevel=2)


@contextmanager
def held() -> Iterator[list[tuple[Any, ...]]]:
    """A block whose :func:`warn` calls, on this thread, are kept in the list it yields."""
    before = getattr(_local, "box", None)
    box: list[tuple[Any, ...]] = []
    _local.box = box
    try:
        yield box
    finally:
        _local.box = before


def release(box: list[tuple[Any, ...]]) -> None:
    """Warn what a :func:`held` block kept, each from the file and line it named (into the enclosing
    block's hold, when this one was inside another on the thread)."""
    outer = getattr(_local, "box", None)
    if outer is not None:
        outer.extend(box)
        return
    for message, category, filename, lineno in box:
        warnings.warn_explicit(message, category, filename, lineno)
