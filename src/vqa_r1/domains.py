"""The range each numeric setting may take, checked on the login node with one message format.

A value that types correctly can still mean nothing: ``train.max_steps=-5`` ran one epoch,
``train.num_iterations=-1`` and ``lora.dropout=1.5`` failed after the queue wait and the model
load. So every numeric setting has a ``Domain``:

* ours are declared beside the field, ``option(..., domain=...)`` (or ``minimum=``), so the
  help and the range of a key are read in one place; ``typed_config.build`` checks them as it
  types a recipe, a ``--set`` or a config.yaml, and the message names the file or flag;
* TRL's fields that TRL itself does not check (``TRL``, below) are checked when a ``train.`` key
  of TRL's is typed (trl_options.typed_value); those it does check are refused by constructing
  its config on the login node (train/runner.check_trl_config);
* tests/test_value_domains.py fails when a numeric field of ours or of TRL's has no domain.

The message: ``train.max_steps: must be -1 or 0 (not set: num_train_epochs counts) or at least 1,
got -5`` -- the key, the allowed range, the value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from vqa_r1.errors import UserError


@dataclass(frozen=True)
class Domain:
    """Numbers from ``low`` to ``high`` (either may be open, or absent), finite, and ``special``
    values outside that range with what they mean. ``whole_from``: from this value on, only whole
    numbers (transformers' step fields: a float below 1 is a fraction of all steps, 1 and above a
    step count that it would truncate). ``note`` ends the range's text (what an edge means)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    special: tuple[tuple[float, str], ...] = ()
    whole_from: float | None = None
    note: str = ""

    def allows(self, value: float) -> bool:
        if any(value == v for v, _ in self.special):
            return True
        if isinstance(value, float) and not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            return False
        return self.whole_from is None or value < self.whole_from or float(value).is_integer()

    def text(self) -> str:
        """``at least 1``, ``in [0, 1)``, ``-1 (not set) or at least 1``, ..."""
        low, high = _show(self.low), _show(self.high)
        if self.low is not None and self.high is not None:
            text = (
                f"in {'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"
            )
        elif self.low is not None:
            text = f"{'above' if self.low_open else 'at least'} {low}"
        elif self.high is not None:
            text = f"{'below' if self.high_open else 'at most'} {high}"
        else:
            text = "a finite number"
        notes = [self.note] if self.note else []
        if self.whole_from is not None:
            notes.append(f"from {_show(self.whole_from)}: a whole number")
        if notes:
            text += f" ({'; '.join(notes)})"
        if self.special:
            values = " or ".join(_show(v) for v, _ in self.special)
            meanings = {m for _, m in self.special}
            meaning = f" ({meanings.pop()})" if len(meanings) == 1 else ""
            text = f"{values}{meaning} or {text}"
        return text

    def check(self, value: Any, where: str) -> None:
        """A UserError naming ``where``, the range and ``value`` when it is outside (None, the
        unset value of an optional key, and non-numbers pass: their type is checked elsewhere);
        a list is checked item by item (``where[i]``)."""
        if isinstance(value, list | tuple):
            for i, item in enumerate(value):
                self.check(item, f"{where}[{i}]")
            return
        if isinstance(value, bool) or not isinstance(value, int | float):
            return
        if not self.allows(value):
            raise UserError(f"{where}: must be {self.text()}, got {value!r}")


def _show(number: float | None) -> str:
    return "" if number is None else f"{number:g}" if isinstance(number, float) else str(number)


def at_least(low: float, note: str = "") -> Domain:
    return Domain(low=low, note=note)


def above(low: float, note: str = "") -> Domain:
    return Domain(low=low, low_open=True, note=note)


def between(
    low: float, high: float, low_open: bool = False, high_open: bool = False, note: str = ""
) -> Domain:
    return Domain(low=low, high=high, low_open=low_open, high_open=high_open, note=note)


ANY = Domain()  # any finite number (a reward weight may be negative: a penalty)
FRACTION = between(0, 1)
PROBABILITY_BELOW_ONE = between(0, 1, high_open=True)
# numpy's generator (transformers' set_seed, the data subsets) takes 0 .. 2**32 - 1
SEED = between(0, 2**32 - 1)
# TrainingArguments' step intervals: a fraction of all steps below 1, a step count from 1 on
STEPS = Domain(low=0, low_open=True, whole_from=1, note="below 1: a fraction of all steps")
WARMUP = Domain(low=0, whole_from=1, note="below 1: a fraction of all steps")


# TRL's numeric fields (GRPOConfig, SFTConfig, TrainingArguments) that TRL does not refuse out of
# range, under TRL's names: each range from the field's help (what the trainer does with it).
# Fields the suite sets itself (trl_options.OWNED) and ours (config.TrainConfig) are not here;
# tests/test_value_domains.py checks that every other numeric field is.
TRL: dict[str, Domain] = {
    # TrainingArguments (torch.optim.AdamW refuses these only when the trainer builds it)
    "adam_beta1": PROBABILITY_BELOW_ONE,
    "adam_beta2": PROBABILITY_BELOW_ONE,
    "adam_epsilon": at_least(0),
    "label_smoothing_factor": PROBABILITY_BELOW_ONE,
    "neftune_noise_alpha": above(0),
    "torch_empty_cache_steps": at_least(1),
    "eval_steps": STEPS,
    "eval_delay": at_least(0),
    "per_device_eval_batch_size": at_least(1),
    "eval_accumulation_steps": at_least(1),
    "save_total_limit": at_least(1, "none: keep every checkpoint"),
    "dataloader_prefetch_factor": at_least(1),
    "ddp_bucket_cap_mb": at_least(1),
    "ddp_timeout": at_least(1, "seconds"),
    "router_aux_loss_coef": at_least(0),
    "pad_to_multiple_of": at_least(1),
    # SFTConfig
    "dataset_num_proc": at_least(1),
    # GRPOConfig: batches and generation
    "num_generations_eval": at_least(1),
    "generation_batch_size": at_least(1),
    "steps_per_generation": at_least(1),
    "num_iterations": at_least(1, "updates per generated batch"),
    "top_p": between(0, 1, low_open=True),
    "top_k": at_least(0, "0: no top-k filtering"),
    "min_p": FRACTION,
    "repetition_penalty": above(0, "1: none"),
    "vllm_server_timeout": above(0, "seconds"),
    "max_tool_calling_iterations": at_least(0),
    "num_completions_to_print": at_least(1, "none: all"),
    # GRPOConfig: the loss
    "epsilon": between(0, 1, note="the ratio is clipped to [1 - epsilon, 1 + epsilon_high]"),
    "epsilon_high": at_least(0),
    "delta": above(1, "the two-sided loss's upper bound on the ratio"),
    "sapo_temperature_neg": above(0),
    "sapo_temperature_pos": above(0),
    "vespo_k_pos": at_least(0),
    "vespo_lambda_pos": at_least(0),
    "vespo_k_neg": at_least(0),
    "vespo_lambda_neg": at_least(0),
    "ref_model_mixup_alpha": FRACTION,
    "ref_model_sync_steps": at_least(1),
    "top_entropy_quantile": between(0, 1, note="the share of tokens kept, by entropy"),
    "entropy_coef": at_least(0),
    "entropy_coef_min": at_least(0),
    "entropy_coef_max": at_least(0),
    "entropy_coef_delta": at_least(0),
    "entropy_target": at_least(0, "nats"),
    "vllm_importance_sampling_clip_max": above(0),
    "vllm_importance_sampling_clip_min": at_least(0),
    "vllm_importance_sampling_cap": above(0),
    "off_policy_mask_threshold": above(0),
}
