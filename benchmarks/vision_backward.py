"""P7: seconds per GRPO step with LoRA and gradient checkpointing, input-gradient hooks on the
language model only (ours) against the library's hooks, which also reach the frozen vision tower.

With PEFT and gradient checkpointing, TRL, PEFT and transformers call ``enable_input_require_grads()``,
which in transformers 5.23 hooks the input embeddings of every ``PreTrainedModel`` in the model, the
vision tower's patch embedding included: the image features then require grad, and backward (and
the checkpointed recomputation) runs through every vision block although LoRA wraps the language
model alone. ``vqa_r1.train.input_grads.hook_language_inputs_only`` (called by ``runner.train``)
keeps the hook on the language model's embeddings only.

Both sides run ``runner.train`` on the same recipe with ``train.gradient_checkpointing=true`` (the
tiny CPU recipe has it off); the library's side runs it with ``hook_language_inputs_only`` replaced
by a no-op for the duration of the call (``library_hooks`` below): the code as it was before the
fix, with nothing else changed. A forward hook on the vision tower's patch embedding
(``VisionInputProbe``) records whether its output required grad in the forwards with grad enabled:
that is the mechanism, and the checks say ours never does and the library's always does. LoRA is
language-only, so both sides must log the same losses, rewards and gradient norms (up to float
noise: compared with a relative tolerance of 1e-4, the largest differences reported).
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

from transformers import TrainerCallback

from benchmarks import Result, Timing, side_by_side
from benchmarks.trainer_overhead import StepClock, StepRun
from vqa_r1.config import RunConfig
from vqa_r1.models.adapters import get_adapter
from vqa_r1.models.registry import get_spec
from vqa_r1.recipes import load_config
from vqa_r1.train import runner
from vqa_r1.train.input_grads import transformers_model

MODEL = "tiny-qwen2.5-vl-pretrained"  # the demo's model and GRPO recipe

# logged values compared between the sides, with this relative tolerance
_COMPARED = ("loss", "grad_norm", "reward")
_REL_TOL = 1e-4


@dataclass(frozen=True)
class Size:
    steps: int  # max_steps of each run
    first: int  # steady state: from the end of this step to the end of the last
    num_samples: int  # seeded subset of the training split


FULL = Size(steps=20, first=5, num_samples=256)
QUICK = Size(steps=5, first=2, num_samples=64)


class VisionInputProbe(TrainerCallback):
    """Counts the vision tower's patch-embedding forwards with grad enabled, and how many of their
    outputs required grad; times each step's loss forward and backward.

    The library's hook sets ``requires_grad`` on the output in place, and it may be registered
    after this one (transformers re-hooks after each GRPO generation), so the outputs are kept and
    read at the end of each step, after every hook has run. The loss forward and backward of a step
    (what the fix changes; generation is the rest of a step) run from the model's first forward
    with grad enabled to ``on_pre_optimizer_step`` (after backward and gradient clipping)."""

    def __init__(self, family: str) -> None:
        self.adapter = get_adapter(family)
        self.module_name: str | None = None
        self.with_grad = 0
        self.required_grad = 0
        self._pending: list[Any] = []
        self._handles: list[Any] = []
        self._loss_started: float | None = None
        self.loss_seconds: dict[int, float] = {}  # step -> loss forward + backward

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        from transformers import PreTrainedModel

        base = transformers_model(model)
        for name, module in base.named_modules():
            if (
                name
                and isinstance(module, PreTrainedModel)
                and self.adapter.is_vision_module(name + ".")
            ):
                embeddings = module.get_input_embeddings()
                self.module_name = next(n for n, m in base.named_modules() if m is embeddings)
                self._handles = [
                    embeddings.register_forward_hook(self._record),
                    base.register_forward_pre_hook(self._forward_starts),
                ]
                return
        raise RuntimeError(f"P7: no vision tower with input embeddings in {type(base).__name__}")

    def _record(self, module: Any, inputs: Any, output: Any) -> None:
        import torch

        if torch.is_grad_enabled():
            self._pending.append(output)

    def _forward_starts(self, module: Any, inputs: Any) -> None:
        import torch

        if torch.is_grad_enabled() and self._loss_started is None:
            self._loss_started = time.perf_counter()

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if self._loss_started is not None:
            self.loss_seconds[state.global_step + 1] = time.perf_counter() - self._loss_started
            self._loss_started = None

    def on_step_end(self, args, state, control, **kwargs):
        self.with_grad += len(self._pending)
        self.required_grad += sum(bool(o.requires_grad) for o in self._pending)
        self._pending.clear()

    def on_train_end(self, args, state, control, **kwargs):
        self.on_step_end(args, state, control)
        for handle in self._handles:
            handle.remove()


@dataclass
class ProbedRun:
    step: StepRun
    probe: VisionInputProbe

    @property
    def loss_per_step(self) -> float:
        """Mean seconds of the loss forward and backward over the steady-state steps."""
        steady = [s for s in self.probe.loss_seconds.items() if s[0] > self.step.first]
        return sum(v for _, v in steady) / len(steady)


def _no_hook_replacement(model: Any, adapter: Any) -> bool:
    return False  # what hook_language_inputs_only returns when it leaves the library's hooks


@contextlib.contextmanager
def library_hooks() -> Iterator[None]:
    """``runner.train`` as before the fix: ``hook_language_inputs_only`` is not applied."""
    with mock.patch.object(runner, "hook_language_inputs_only", _no_hook_replacement):
        yield


def bench_config(size: Size) -> RunConfig:
    return load_config(
        "grpo",
        MODEL,
        overrides=[
            f"train.max_steps={size.steps}",
            "train.gradient_checkpointing=true",
            "train.logging_steps=1",  # every step's loss and gradient norm compared
            f"train.save_steps={size.steps}",  # saved after the last step: outside the window
            f"data.num_samples={size.num_samples}",
        ],
    )


def one_run(config: RunConfig, run_dir: Path, first: int, library: bool) -> ProbedRun:
    clock = StepClock()
    probe = VisionInputProbe(get_spec(config.model.name).family)
    called = time.perf_counter()
    with library_hooks() if library else contextlib.nullcontext():
        status = runner.train(config, run_dir, callbacks=[clock, probe])
    returned = time.perf_counter()
    if status["state"] != "COMPLETED":
        raise RuntimeError(f"P7: a run ended {status['state']}: {status}")
    return ProbedRun(StepRun(called, returned, clock, first), probe)


def _logged(run: ProbedRun) -> list[dict[str, float]]:
    return [
        {"step": h["step"], **{k: h[k] for k in _COMPARED}}
        for h in run.step.clock.log_history
        if all(k in h for k in _COMPARED)
    ]


def _largest_differences(a: ProbedRun, b: ProbedRun) -> dict[str, float] | None:
    """The largest relative difference of each compared value; None if the steps differ."""
    la, lb = _logged(a), _logged(b)
    if not la or [x["step"] for x in la] != [y["step"] for y in lb]:
        return None
    return {
        k: max(
            abs(x[k] - y[k]) / max(abs(x[k]), abs(y[k]), 1e-12) for x, y in zip(la, lb, strict=True)
        )
        for k in _COMPARED
    }


def _same_logs(diffs: list[dict[str, float] | None]) -> bool:
    return all(d is not None and all(v <= _REL_TOL for v in d.values()) for d in diffs)


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def measure(size: Size, repeats: int, warmup: bool) -> Result:
    config = bench_config(size)
    with tempfile.TemporaryDirectory(prefix="vqa-r1-bench-p7-") as tmp:
        runs = iter(range(10**6))
        ours_t, lib_t, ours_runs, lib_runs = side_by_side(
            lambda: one_run(config, Path(tmp) / f"ours-{next(runs)}", size.first, False),
            lambda: one_run(config, Path(tmp) / f"library-{next(runs)}", size.first, True),
            repeats,
            labels=("language-only input hooks (ours)", "library hooks (vision too)"),
            warmup=warmup,
        )
    diffs = [_largest_differences(a, b) for a, b in zip(ours_runs, lib_runs, strict=True)]
    largest = {
        k: max(d[k] for d in diffs if d is not None) if all(diffs) else None for k in _COMPARED
    }
    t = config.train
    loss_ours = [r.loss_per_step for r in ours_runs]
    loss_lib = [r.loss_per_step for r in lib_runs]
    probe_name = ours_runs[0].probe.module_name

    def probed(rs: list[ProbedRun]) -> str:
        return f"{sum(r.probe.required_grad for r in rs)} of {sum(r.probe.with_grad for r in rs)}"

    return Result(
        id="P7",
        title="GRPO step, LoRA + checkpointing: language-only input hooks vs the library's",
        ours=Timing(f"{ours_t.label}, s/step", [r.step.per_step for r in ours_runs]),
        baseline=Timing(f"{lib_t.label}, s/step", [r.step.per_step for r in lib_runs]),
        kind="speedup",
        checks={
            "vision patch-embedding output required grad, ours": any(
                r.probe.required_grad for r in ours_runs
            ),
            "vision patch-embedding output required grad, library's": all(
                r.probe.with_grad and r.probe.required_grad == r.probe.with_grad for r in lib_runs
            ),
            "same logged losses, gradient norms and rewards": _same_logs(diffs),
            "steps": size.steps,
        },
        details={
            "model / recipe": f"{MODEL} / {config.recipe}, train.gradient_checkpointing=true "
            "on both sides",
            "per step": f"{t.per_device_train_batch_size} completions ({t.num_generations} per "
            f"prompt), up to {t.max_completion_length} new tokens, LoRA r={config.lora.r} on the "
            "language model, vision tower frozen",
            "steady state": f"steps {size.first + 1}..{size.steps} "
            f"({size.steps - size.first} steps), logging every step, one save after the last",
            "probe": f"forward hook on {probe_name}; outputs that required grad, of the "
            f"forwards with grad enabled, all runs: ours {probed(ours_runs)}, library's "
            f"{probed(lib_runs)}",
            "logged steps with a non-zero gradient norm (zero: every completion of a prompt got "
            "the same reward), ours run 1": f"{sum(h['grad_norm'] > 0 for h in _logged(ours_runs[0]))}"
            f" of {len(_logged(ours_runs[0]))}",
            "largest relative difference of the logged values, ours vs library's": {
                k: (None if v is None else float(f"{v:.3g}")) for k, v in largest.items()
            },
            "loss forward + backward of a step (s, steady state; generation is the rest), ours / "
            "library's": f"{_median(loss_ours)} / {_median(loss_lib)} "
            f"({statistics.median(loss_lib) / statistics.median(loss_ours):.2f}x faster)",
            "start-up, call to on_train_begin (s), ours / library's": (
                f"{_median([r.step.startup for r in ours_runs])} / "
                f"{_median([r.step.startup for r in lib_runs])}"
            ),
            "wall per run (s), ours / library's": f"{ours_t.median:.2f} / {lib_t.median:.2f}",
        },
        notes=[
            "seconds per step in the steady state (StepClock on both sides); the library's side "
            "is runner.train with hook_language_inputs_only disabled (the code before the fix)",
            "the vision tower of the tiny model is 2 blocks of width 64 beside a 4-layer language "
            "model of width 128; on real models the vision tower is a larger share (Qwen2.5-VL-3B: "
            "32 blocks of width 1280), so the saving there is expected to be larger (unmeasured)",
            "warm-up: " + ("one untimed run of each side" if warmup else "none"),
        ],
    )


def run(quick: bool, repeats: int) -> Result:
    return measure(QUICK if quick else FULL, repeats, warmup=True)
