"""Let torch.load restore to ``cpu:N``, the device several CPU processes train on.

With several CPU processes (gloo) accelerate gives each the device ``torch.device("cpu", 0)``
(``PartialState.set_device``: ``torch.cpu.device_count()`` is 1). transformers 5.17's Trainer then
loads a checkpoint's optimizer state with ``map_location=args.device`` when ``world_size > 1``
(``Trainer._load_optimizer_and_scheduler``), and torch knows the location ``cpu`` but not
``cpu:0``: every resume of a multi-process CPU run failed with "don't know how to restore data
location ... (tagged with cpu:0)". transformers 5.23 no longer does this; the GPU set pins 5.17.

torch's public extension point for storage locations (``torch.serialization.register_package``)
takes a deserializer; this one maps ``cpu:N`` to the CPU. It changes nothing for any other location.
"""

from __future__ import annotations

import re

import torch

_CPU_INDEX = re.compile(r"cpu:\d+")
_registered = False


def _restore_indexed_cpu(storage, location: str):
    return storage if _CPU_INDEX.fullmatch(location) else None


def allow_indexed_cpu_locations() -> None:
    """Register the ``cpu:N`` deserializer once per process."""
    global _registered
    if not _registered:
        torch.serialization.register_package(15, lambda obj: None, _restore_indexed_cpu)
        _registered = True
