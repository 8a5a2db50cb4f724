"""Packed reference sets (see docs/packed-format.md)."""

from __future__ import annotations

MAGIC = b"RFSPACK\x00"
