"""The two timestamps the package writes: one for folder names, one for JSON records.

Both are local time, to the second, so that a folder name and the record written next to it read
the same way (`20260101-100000`, `2026-01-01T10:00:00`).
"""

from __future__ import annotations

import time


def run_stamp() -> str:
    """`20260101-100000`: sorts by time and is safe in a folder name."""
    return time.strftime("%Y%m%d-%H%M%S")


def now_iso() -> str:
    """`2026-01-01T10:00:00`: ISO 8601 without a time zone, for `submitted`/`updated` fields."""
    return time.strftime("%Y-%m-%dT%H:%M:%S")
