"""DAPO's dynamic sampling for TRL's GRPOTrainer: groups without reward variance are replaced.

A group whose completions all earn the same reward has zero advantage everywhere: it costs a
generation and a backward pass and moves nothing (TRL logs their share as
``frac_reward_zero_std``; on the demo it is most groups at times). DAPO drops such groups and
fills the batch with groups of further prompts. TRL has no such option, and the seam is private:
the generation batch is made in ``GRPOTrainer._generate_and_score_completions``, which takes the
dataloader's prompts and returns the scored tensors of exactly that many rows. The dataloader's
iterator is out of reach there, so the further prompts come from the training set itself, drawn
by a generator seeded with (train.seed, global step, round): a requeued run resumed from a
checkpoint draws what the uninterrupted run drew (the sampling itself follows the RNG state the
checkpoint restores). Nothing of the dataloader's order changes.

One batch, per generation:

1. TRL generates and scores the dataloader's prompts (round 1); the rewards of every rank are
   gathered there already (``_calculate_rewards``), so every rank sees which groups of every rank
   have variance and all ranks take the same decisions without another collective;
2. while some rank holds fewer groups with variance than its batch has groups, and rounds are
   left (``train.dynamic_sampling_max_rounds``), every rank generates a further round of fresh
   prompts (all ranks together: TRL's generation gathers across ranks);
3. each rank keeps its first groups with variance, in the order generated; a rank still short is
   filled with zero-variance groups (they change nothing; logged), so every rank ends with the
   batch size TRL expects and the same number of groups.

Rows are selected and the rounds joined with TRL's own pixel-value helpers (which know each
family's image tensors) and right/left padding of the token tensors. Advantages stay as TRL
computed them per round: with ``scale_rewards=group`` (the default) a group's advantages depend on
that group alone; with ``batch`` each round's standard deviation is used. Logged per step:
``dynamic_sampling/generated_groups``, ``kept_groups`` (with variance), ``filled_groups`` and
``rounds`` (sums over ranks, rounds averaged).
"""

from __future__ import annotations

import hashlib
from typing import Any

# tensors left-padded by TRL (prompts); every other 2-D per-row tensor is right-padded, but for
# the per-token type ids: TRL's prompt part (left-padded) then zeros over the completion
_LEFT_PADDED = ("prompt_ids", "prompt_mask")
_PROMPT_THEN_COMPLETION = ("token_type_ids", "mm_token_type_ids")
_PAD_VALUE = {"prompt_mask": 0, "completion_mask": 0, "tool_mask": 1}


def group_has_variance(rewards_per_func: Any, weights: Any, num_generations: int) -> Any:
    """One bool per group of ``num_generations`` consecutive rows: are its total rewards unequal?

    The total is TRL's weighted sum of the reward functions; a row that no function scored (all
    NaN) is left out of its group, as TRL leaves it out of the group's mean."""
    import torch
    from trl.trainer.utils import nanstd

    totals = (rewards_per_func * weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
    totals[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
    std = nanstd(totals.view(-1, num_generations), dim=1)
    return ~(torch.isclose(std, torch.zeros_like(std)) | torch.isnan(std))


def draw_prompts(size: int, count: int, seed: int, step: int, round_: int) -> list[int]:
    """``count`` row indices of a training set of ``size`` rows, a function of its arguments only
    (so a resumed run draws the same rows; Python's ``hash`` is salted per process)."""
    import torch

    key = hashlib.sha256(f"{seed}:{step}:{round_}".encode()).digest()
    generator = torch.Generator().manual_seed(int.from_bytes(key[:8], "little") >> 1)
    return torch.randint(size, (count,), generator=generator).tolist()


def select_rows(batch: dict, rows: list[int]) -> dict:
    """The rows ``rows`` of a generation batch whose pixel values are split per row."""
    out = {}
    for key, value in batch.items():
        if value is None or (hasattr(value, "ndim") and value.ndim == 0):
            out[key] = value
        elif isinstance(value, list):
            out[key] = [value[i] for i in rows]
        else:
            out[key] = value[rows]
    return out


def join_batches(parts: list[dict], pad_token_id: int) -> dict:
    """Generation batches (pixel values split per row) as one: rows in order, 2-D token tensors
    padded to the longest part (prompts on the left, as TRL pads them)."""
    import torch
    import torch.nn.functional as F

    if len(parts) == 1:
        return parts[0]
    joined = {}
    for key in parts[0]:
        values = [p[key] for p in parts]
        first = values[0]
        if first is None or (hasattr(first, "ndim") and first.ndim == 0):
            joined[key] = first  # recomputed by the caller where it matters (num_items_in_batch)
        elif isinstance(first, list):
            joined[key] = [item for v in values for item in v]
        elif key in _PROMPT_THEN_COMPLETION and first.ndim == 2:
            joined[key] = torch.cat([_token_types(p, key, parts) for p in parts])
        elif first.ndim == 2 and len({v.shape[1] for v in values}) > 1:
            width = max(v.shape[1] for v in values)
            pad = _PAD_VALUE.get(key, pad_token_id if key.endswith("_ids") else 0)
            left = key in _LEFT_PADDED
            joined[key] = torch.cat(
                [
                    F.pad(
                        v, (width - v.shape[1], 0) if left else (0, width - v.shape[1]), value=pad
                    )
                    for v in values
                ]
            )
        else:
            joined[key] = torch.cat(values)
    return joined


def _token_types(part: dict, key: str, parts: list[dict]) -> Any:
    """``part[key]`` (prompt columns, then completion columns) padded to the widest prompt (left)
    and the widest completion (right) of ``parts``."""
    import torch.nn.functional as F

    prompt = max(p["prompt_ids"].shape[1] for p in parts)
    completion = max(p["completion_ids"].shape[1] for p in parts)
    value, width = part[key], part["prompt_ids"].shape[1]
    if value.shape[1] == width:  # the prompt's alone
        return F.pad(value, (prompt - width, 0))
    return F.pad(
        value, (prompt - width, completion - (value.shape[1] - width))
    )  # one pad: left of the prompt, right of the completion


class DynamicSamplingMixin:
    """Mix into GRPOTrainer; ``self.dynamic_sampling_rounds`` (0: off) is set by the runner."""

    dynamic_sampling_rounds = 0

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._gathered_rewards = rewards  # every rank's rows, in rank order (TRL gathers them)
        return rewards

    def _generate_and_score_completions(self, inputs):
        if not self.dynamic_sampling_rounds or not self.model.training:
            return super()._generate_and_score_completions(inputs)
        from trl.trainer.utils import split_pixel_values_by_grid, unsplit_pixel_values_by_grid

        size, world = self.num_generations, self.accelerator.num_processes
        rank = self.accelerator.process_index
        groups = len(inputs) // size  # per rank; a multiple of num_generations (checked at start)
        kept = [[] for _ in range(world)]  # per rank: (round, local group index) with variance
        flat = [[] for _ in range(world)]  # per rank: those without
        outputs, generated = [], 0
        batch = inputs
        for round_ in range(self.dynamic_sampling_rounds):
            outputs.append(
                split_pixel_values_by_grid(super()._generate_and_score_completions(batch))
            )
            varied = group_has_variance(self._gathered_rewards, self.reward_weights, size)
            varied = varied.view(world, groups).tolist()
            generated += world * groups
            for r in range(world):
                for g in range(groups):
                    (kept if varied[r][g] else flat)[r].append((round_, g))
            if min(len(k) for k in kept) >= groups or round_ + 1 == self.dynamic_sampling_rounds:
                break
            picks = draw_prompts(
                len(self.train_dataset), world * groups, self.args.seed, self.state.global_step,
                round_ + 1,
            )  # fmt: skip
            mine = picks[rank * groups : (rank + 1) * groups]
            keys = list(inputs[0])
            batch = [
                {k: row[k] for k in keys} for i in mine for row in [self.train_dataset[i]] * size
            ]
        chosen = (kept[rank] + flat[rank])[:groups]
        parts = []
        for round_, output in enumerate(outputs):
            rows = [g * size + j for r, g in chosen if r == round_ for j in range(size)]
            if rows:
                parts.append(select_rows(output, rows))
        joined = join_batches(parts, self.processing_class_pad_id())
        mask = joined["completion_mask"]
        if joined.get("tool_mask") is not None:
            mask = mask * joined["tool_mask"]
        joined["num_items_in_batch"] = self.accelerator.gather(mask.sum()).sum()
        metrics = self._metrics["train"]
        kept_total = sum(min(len(k), groups) for k in kept)
        metrics["dynamic_sampling/generated_groups"].append(float(generated))
        metrics["dynamic_sampling/kept_groups"].append(float(kept_total))
        metrics["dynamic_sampling/filled_groups"].append(float(world * groups - kept_total))
        metrics["dynamic_sampling/rounds"].append(float(len(outputs)))
        return unsplit_pixel_values_by_grid(joined)

    def processing_class_pad_id(self) -> int:
        tokenizer = getattr(self.processing_class, "tokenizer", self.processing_class)
        return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
