"""The two timestamps the package writes (one for folder names, one for JSON records), and how a
duration reads in a log line or `status`.

Both are local time, to the second, so that a folder name and the record written next to it read
the same way (`20260101-100000`, `2026-01-01T10:00:00`).
"""

from __future__ import annotations

import math
import time


def run_stamp() -> str:
    """`20260101-100000`: sorts by time and is safe in a folder name."""
    return time.strftime("%Y%m%d-%H%M%S")


def now_iso() -> str:
    """`2026-01-01T10:00:00`: ISO 8601 without a time zone, for `submitted`/`updated` fields."""
    return time.strftime("%Y-%m-%dT%H:%M:%S")


def duration(seconds: float | None) -> str:
    """``1:02:03``, or ``2d 01:02:03`` past a day; ``?`` when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    seconds = int(round(max(seconds, 0)))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = (
        f"{hours}:{minutes:02d}:{secs:02d}"
        if days == 0
        else f"{hours:02d}:{minutes:02d}:{secs:02d}"
    )
    return f"{days}d {clock}" if days else clock
