"""DeepSpeed imported by the runs that use it, not by every run that could.

accelerate's ``extract_model_from_parallel``, which every Trainer calls (TRL's GRPOTrainer at
construction, through ``is_peft_model``), imports the deepspeed package whenever it is installed,
only to test whether the model is a ``DeepSpeedEngine`` (accelerate/utils/other.py). DeepSpeed
is in the dev and GPU sets for the ZeRO recipes, so every tiny job paid about 4 s (10 % of a
tiny job) for an import it never used. A model can only be a ``DeepSpeedEngine`` once deepspeed
has been imported (a ZeRO run imports it when TrainingArguments registers its config), so the
check asks for it only then: the same answer, without the import.
"""

from __future__ import annotations

import sys


def import_only_when_used() -> None:
    """Make accelerate's check import deepspeed only when it is already imported (idempotent)."""
    from accelerate.utils import other

    if getattr(other, "_vqa_r1_lazy_deepspeed", False):
        return
    installed = other.is_deepspeed_available
    other.is_deepspeed_available = lambda: "deepspeed" in sys.modules and installed()
    other._vqa_r1_lazy_deepspeed = True
