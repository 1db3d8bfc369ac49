"""The GPU smoke (``scripts/gpu-smoke``): the shipped pretrained tiny model through every stage on
one NVIDIA GPU, with proof that the work ran there.

Stages: SFT, GRPO with ``generate()`` continuing the SFT adapter, GRPO with vLLM colocated (when
vLLM is installed), evaluation of the GRPO adapter, and a merge of the SFT adapter, all in
bfloat16. A global forward pre-hook records, for every call of a whole model, where its weights
and its tensor inputs were; a stage passes only if every such call ran on CUDA (and it made at
least one, merge excepted: it runs no forward). Each stage reports seconds, steps per second
(training stages) and peak GPU memory; one failing stage does not stop the others, and the exit
status is 1 if any failed.

Without a usable GPU it says so in one line and exits 1 before any work. ``cpu`` mode runs the
same stages on the CPU in float32 with fewer steps (vLLM skipped), asserting CPU placement: the
script's logic is tested here, where no GPU exists (tests/test_gpu_smoke.py).
"""

from __future__ import annotations

import json
import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MODEL = "tiny-qwen2.5-vl-pretrained"
REPORT = "gpu-smoke.json"


@dataclass
class Stage:
    name: str
    status: str = "not run"  # ok | FAIL | skipped
    seconds: float | None = None
    steps: int | None = None
    steps_per_second: float | None = None  # training steps over the training loop's time
    peak_gpu_memory_mib: float | None = None
    model_calls: int = 0
    devices: list[str] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    error: str | None = None


class PlacementProbe:
    """Records the devices of the weights and tensor inputs of every call of a whole model: a
    transformers PreTrainedModel called with no PreTrainedModel call around it (a PEFT wrapper
    calls one; a vision tower inside one is not counted again)."""

    def __init__(self) -> None:
        self.calls = 0
        self.devices: set[str] = set()
        self.dtypes: set[str] = set()
        self._depth = 0
        self._saved: Any = None

    def __enter__(self) -> PlacementProbe:
        from transformers import PreTrainedModel

        self._saved = PreTrainedModel.__dict__.get("__call__")
        inner = PreTrainedModel.__call__  # torch.nn.Module's, unless transformers defines one
        probe = self

        def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
            if probe._depth == 0:
                probe._record(module, [*args, *kwargs.values()])
            probe._depth += 1
            try:
                return inner(module, *args, **kwargs)
            finally:
                probe._depth -= 1

        PreTrainedModel.__call__ = __call__
        return self

    def __exit__(self, *exc: Any) -> None:
        from transformers import PreTrainedModel

        if self._saved is None:
            del PreTrainedModel.__call__
        else:
            PreTrainedModel.__call__ = self._saved

    def _record(self, module: Any, values: list[Any]) -> None:
        import torch

        self.calls += 1
        param = next(module.parameters(), None)
        if param is not None:
            self.devices.add(f"weights:{param.device.type}")
            self.dtypes.add(str(param.dtype).replace("torch.", ""))
        for value in values:
            if isinstance(value, torch.Tensor):
                self.devices.add(f"inputs:{value.device.type}")


def _peak_reset(gpu: bool) -> None:
    if gpu:
        import torch

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def _peak_mib(gpu: bool) -> float | None:
    if not gpu:
        return None
    import torch

    torch.cuda.synchronize()
    return round(torch.cuda.max_memory_allocated() / 2**20, 1)


def run_stage(stage: Stage, work: Callable[[], int | None], device: str, forward: bool = True):
    """Run ``work`` (returns its step count, or None) under a PlacementProbe; fill ``stage``."""
    import torch

    gpu = device == "cuda" and torch.cuda.is_available()
    _peak_reset(gpu)
    started = time.perf_counter()
    try:
        with PlacementProbe() as probe:
            steps = work()
        stage.seconds = round(time.perf_counter() - started, 2)
        stage.steps = steps
        stage.peak_gpu_memory_mib = _peak_mib(gpu)
        stage.model_calls = probe.calls
        stage.devices = sorted(probe.devices)
        stage.dtypes = sorted(probe.dtypes) or stage.dtypes
        wrong = [d for d in probe.devices if not d.endswith(f":{device}")]
        if forward and not probe.calls:
            raise AssertionError("no model call was seen")
        if wrong:
            raise AssertionError(f"expected everything on {device}, saw {stage.devices}")
        stage.status = "ok"
    except Exception as err:  # one stage's failure is reported; the others still run
        stage.seconds = round(time.perf_counter() - started, 2)
        stage.status = "FAIL"
        stage.error = f"{type(err).__name__}: {err}"
        log.error("gpu-smoke stage %s failed:\n%s", stage.name, traceback.format_exc())


def no_gpu_reason() -> str | None:
    """None when torch can use a CUDA device here; else one line saying why not and what to do
    (the job-start check's message: launch/cuda_check.py)."""
    from vqa_r1.launch.cuda_check import SmiReport, cuda_problem, nvidia_smi, torch_cuda

    facts = torch_cuda()
    problem = cuda_problem(facts, nvidia_smi() if not facts.available else SmiReport())
    return f"gpu-smoke: {problem}" if problem else None


def _settings(device: str) -> dict[str, Any]:
    if device == "cuda":
        return {"dtype": "bfloat16", "bf16": "true", "steps": 20, "batch": 16, "eval_limit": 64}
    return {"dtype": "float32", "bf16": "false", "steps": 2, "batch": 4, "eval_limit": 4}


def smoke(out: str | Path, device: str = "cuda") -> tuple[list[Stage], Path]:
    """Run every stage into ``out``; returns the stages and the report's path."""
    import importlib.util

    from benchmarks.trainer_overhead import StepClock
    from vqa_r1.eval.evaluate import evaluate
    from vqa_r1.recipes import load_config
    from vqa_r1.train.merge import merge_adapter
    from vqa_r1.train.runner import train

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    s = _settings(device)
    common = [
        f"model.dtype={s['dtype']}",
        f"train.bf16={s['bf16']}",
        f"train.max_steps={s['steps']}",
        f"train.save_steps={s['steps']}",
        "train.logging_steps=1",
        f"train.per_device_train_batch_size={s['batch']}",
        "data.synthetic_train=64",
        "data.synthetic_validation=16",
        f"data.synthetic_test={s['eval_limit']}",
    ]
    grpo = [*common, "train.num_generations=4", "train.max_completion_length=32"]
    stages: list[Stage] = []

    def training(stage: Stage, verb: str, overrides: list[str], run: str) -> Callable[[], int]:
        def work() -> int:
            clock = StepClock()
            config = load_config(verb, MODEL, overrides=overrides)
            status = train(config, out / run, callbacks=[clock])
            if status.get("state") != "COMPLETED":
                raise AssertionError(f"{run} ended {status.get('state')}")
            steps = int(status["global_step"])
            if clock.begin is not None and clock.end is not None and steps:
                stage.steps_per_second = round(steps / (clock.end - clock.begin), 3)
            return steps

        return work

    sft = Stage("sft")
    run_stage(sft, training(sft, "sft", common, "sft"), device)
    stages.append(sft)
    adapter = out / "sft" / "final"

    g = Stage("grpo (generate)")
    run_stage(g, training(g, "grpo", [*grpo, f"init_adapter={adapter}"], "grpo"), device)
    stages.append(g)

    v = Stage("grpo (vLLM colocate)")
    if device != "cuda":
        v.status, v.error = "skipped", "vLLM generates on GPUs only"
    elif importlib.util.find_spec("vllm") is None:
        v.status, v.error = "skipped", "vllm is not installed"
    else:  # the prompts vLLM is handed: train/vllm_prompts.py (checked on CPU, test_vllm_prompts)
        vllm = [
            *grpo,
            "train.use_vllm=true",
            "train.vllm_mode=colocate",
            "train.vllm_gpu_memory_utilization=0.3",
            "train.vllm_max_model_length=1024",
        ]
        run_stage(v, training(v, "grpo", vllm, "grpo-vllm"), device)
    stages.append(v)

    e = Stage("evaluate")

    def evaluation() -> None:
        config = load_config(
            "evaluate", MODEL, overrides=[*common, f"eval.limit={s['eval_limit']}"]
        )
        scores = evaluate(config, out / "evaluate", adapter=out / "grpo", progress=False)
        (out / "evaluate" / "smoke-scores.json").write_text(json.dumps(scores, default=str))

    run_stage(e, evaluation, device)
    stages.append(e)

    m = Stage("merge")

    def merge() -> None:
        from safetensors import safe_open

        config = load_config("merge", MODEL, overrides=common)
        status = merge_adapter(config, adapter, out / "merge")
        dtypes = set()
        for shard in Path(status["merged"]).glob("*.safetensors"):
            with safe_open(str(shard), "pt") as fh:
                dtypes |= {str(fh.get_slice(k).get_dtype()) for k in fh.keys()}
        m.dtypes = sorted(dtypes)
        wanted = "BF16" if s["dtype"] == "bfloat16" else "F32"
        if dtypes != {wanted}:
            raise AssertionError(f"merged weights are {sorted(dtypes)}, expected {wanted}")

    run_stage(m, merge, device, forward=False)
    stages.append(m)

    report = out / REPORT
    report.write_text(json.dumps(_report(stages, device), indent=2) + "\n")
    return stages, report


def _report(stages: list[Stage], device: str) -> dict:
    import torch

    environment = {
        "torch": torch.__version__,
        "cuda build": torch.version.cuda,
        "device": device,
    }
    if device == "cuda":
        environment["gpu"] = torch.cuda.get_device_name(0)
        environment["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
    for name in ("transformers", "trl", "peft", "accelerate", "vllm", "deepspeed"):
        from importlib import metadata

        try:
            environment[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            environment[name] = None
    return {"environment": environment, "stages": [asdict(s) for s in stages]}


def main(out: str, mode: str = "cuda") -> int:
    """The script's entry: ``mode`` is ``cuda`` (the smoke) or ``cpu`` (its logic, on the CPU)."""
    if mode == "cuda":
        reason = no_gpu_reason()
        if reason:
            print(reason)
            return 1
    stages, report = smoke(out, mode)
    width = max(len(s.name) for s in stages)
    for s in stages:
        figures = ", ".join(
            part
            for part in (
                f"{s.seconds} s" if s.seconds is not None else "",
                f"{s.steps_per_second} steps/s" if s.steps_per_second else "",
                f"peak {s.peak_gpu_memory_mib} MiB" if s.peak_gpu_memory_mib is not None else "",
                ",".join(s.devices),
                ",".join(s.dtypes),
                s.error or "",
            )
            if part
        )
        print(f"{s.name:<{width}}  {s.status:<7}  {figures}")
    print(f"report: {report}")
    return 0 if all(s.status in ("ok", "skipped") for s in stages) else 1
