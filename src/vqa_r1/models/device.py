"""Where a model runs outside a Trainer: one policy for evaluate, merge, prompt tuning and its
scoring, pretraining and the benchmarks.

A Trainer places its model itself (accelerate); everything else used to leave the model where
``from_pretrained`` put it, on the CPU, so a 3B evaluation ran on a GPU node's CPUs for hours. Here
the device is resolved once per entry point from the setting ``device``:

* ``auto``: the first CUDA device when torch sees one, else the CPU;
* ``cuda`` / ``cuda:N``: that device, and an error at once when torch sees none (a job that asked
  for a GPU never falls back to hours on the CPU);
* ``cpu``.

The choice is logged and written into what the run leaves (``scores.json``'s ``device``).
"""

from __future__ import annotations

import logging
import re

from vqa_r1.config import DEVICE_PATTERN
from vqa_r1.errors import UserError

log = logging.getLogger(__name__)

_DEVICE = re.compile(DEVICE_PATTERN)


def check_device_setting(value: str, key: str = "model.device") -> None:
    """A setting's value is one of auto, cpu, cuda, cuda:N (checked before a job is queued)."""
    if not _DEVICE.match(value):
        raise UserError(f"{key}: {value!r} is not auto, cpu, cuda or cuda:N")


def resolve_device(requested: str = "auto", key: str = "model.device") -> str:
    """The device a setting names, as ``cpu`` or ``cuda:N``; logged once per call."""
    import torch

    check_device_setting(requested, key)
    if requested == "cpu":
        device = "cpu"
    elif not torch.cuda.is_available():
        if requested != "auto":
            raise UserError(
                f"{key}={requested}: torch sees no usable CUDA device (torch {torch.__version__}, "
                f"built for CUDA {torch.version.cuda or 'none: a CPU build'}). Check `nvidia-smi` "
                "and that the NVIDIA driver supports this CUDA build, or set "
                f"{key}=cpu to run on the CPU"
            )
        device = "cpu"
    else:
        index = int(requested.split(":")[1]) if ":" in requested else torch.cuda.current_device()
        count = torch.cuda.device_count()
        if index >= count:
            raise UserError(f"{key}={requested}: torch sees {count} CUDA device(s)")
        device = f"cuda:{index}"
    log.info("device: %s (%s=%s)", describe_device(device), key, requested)
    return device


def describe_device(device: str) -> str:
    """``cuda:0 (NVIDIA H100 80GB HBM3)``, or ``cpu``."""
    if not device.startswith("cuda"):
        return device
    import torch

    try:
        return f"{device} ({torch.cuda.get_device_name(torch.device(device))})"
    except Exception:  # a name is only for the log
        return device
