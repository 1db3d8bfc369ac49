"""DeepSpeed ZeRO-3 on two CPU processes (gloo): a LoRA GRPO run, one continuing an SFT adapter,
and one preempted and requeued.

DeepSpeed runs on CPU processes (its CPU accelerator; the first run compiles its shared-memory
communication op, cached under ~/.cache/torch_extensions). The CPU install carries deepspeed (the
`dev` extra, pinned in constraints.txt), so CI runs these; they are skipped where it is missing.
What they show: the model is partitioned as it loads (the training arguments exist first), the
run completes with DeepSpeed checkpoints, a continued adapter (and TRL's "ref" copy of it) has the
dtype of the model, as ZeRO-3 needs, and a run stopped part-way and resumed from DeepSpeed's
sharded checkpoint logs the same steps and writes the same adapter as one never stopped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("deepspeed")

import torch  # noqa: E402

from vqa_r1.run_dir import RunDir  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MODEL = "tiny-qwen2.5-vl-pretrained"
OVERRIDES = [
    "train.deepspeed=zero3",
    "train.max_steps=2",
    "train.save_steps=2",
    "train.logging_steps=1",
    "train.per_device_train_batch_size=4",
    "train.num_generations=4",
    "train.max_completion_length=8",
    "data.synthetic_train=16",
    "data.synthetic_validation=4",
    "data.synthetic_test=4",
]
# runner.train in each rank, with what the model looked like after loading and after the
# trainer was built written to rank-<r>.json
DRIVER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path

    from vqa_r1 import ranks
    from vqa_r1.recipes import load_config
    from vqa_r1.train import runner

    model, run_dir, out, overrides = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4:]
    seen = {}
    load, build = runner.load_model, runner.build_trainer

    def load_spy(*args, **kwargs):
        loaded = load(*args, **kwargs)
        base = [p for n, p in loaded.model.named_parameters() if "lora_" not in n]
        seen["base"] = len(base)
        seen["partitioned_at_load"] = sum(hasattr(p, "ds_id") for p in base)
        return loaded

    def build_spy(*args, **kwargs):
        trainer = build(*args, **kwargs)
        model = trainer.model
        seen["model_dtype"] = str(model.get_base_model().dtype)
        seen["adapters"] = sorted(
            {f"{n.split('.')[-2]}:{p.dtype}" for n, p in model.named_parameters() if "lora_" in n}
        )
        return trainer

    runner.load_model, runner.build_trainer = load_spy, build_spy
    status = runner.train(load_config("grpo", model, overrides=overrides), run_dir)
    seen["state"] = status["state"]
    (out / f"rank-{ranks.rank()}.json").write_text(json.dumps(seen))
    """
)


def _run(tmp_path: Path, name: str, extra: list[str]) -> tuple[Path, list[dict]]:
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    run, out = tmp_path / name, tmp_path / f"{name}-seen"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    env.pop("CI", None)  # transformers would print its log lines twice (shared/notes)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    result = subprocess.run(
        [*cmd, str(driver), MODEL, str(run), str(out), *OVERRIDES, *extra],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-5000:]
    return run, [json.loads((out / f"rank-{r}.json").read_text()) for r in (0, 1)]


@pytest.mark.slow
def test_zero3_lora_grpo_on_two_cpu_processes_partitions_at_load(tmp_path):
    run, seen = _run(tmp_path, "zero3", [])
    for rank in seen:
        assert rank["state"] == "COMPLETED"
        assert rank["partitioned_at_load"] == rank["base"] > 0  # no whole copy on any rank
        assert rank["adapters"] == [f"default:{rank['model_dtype']}"]
    checkpoint = run / "checkpoints" / "checkpoint-2"
    assert (checkpoint / "global_step2").is_dir()  # DeepSpeed's sharded optimizer state
    assert (run / "final" / "adapter_model.safetensors").exists()


@pytest.mark.slow
def test_zero3_grpo_continuing_an_sft_adapter_keeps_one_dtype(tmp_path):
    from peft import LoraConfig, get_peft_model

    from vqa_r1.models.loading import load_model
    from vqa_r1.recipes import load_config

    loaded = load_model(load_config("sft", MODEL))
    sft = get_peft_model(
        loaded.model,
        LoraConfig(r=4, lora_alpha=8, target_modules=loaded.adapter.lora_target_regex()),
    )
    adapter = tmp_path / "sft-adapter"
    sft.save_pretrained(adapter)
    _, seen = _run(tmp_path, "continued", [f"init_adapter={adapter}", "train.beta=0.04"])
    for rank in seen:
        assert rank["state"] == "COMPLETED"
        dtype = rank["model_dtype"]
        assert rank["adapters"] == [f"default:{dtype}", f"ref:{dtype}"]  # TRL's KL reference


# ------------------------------------------------- a preemption and a requeue under ZeRO-3
STEPS, PREEMPT_AT = 3, 1
REQUEUE_OVERRIDES = [
    "train.deepspeed=zero3",
    f"train.max_steps={STEPS}",
    "train.save_steps=2",
    "train.logging_steps=1",
    "train.per_device_train_batch_size=4",  # global batch 8 = 2 prompts x 4 generations
    "train.num_generations=4",
    "train.max_completion_length=8",
    "data.synthetic_train=16",
    "data.synthetic_validation=4",
    "data.synthetic_test=4",
    "train.reward_funcs=[mp_rewards:e_share]",  # dense: rewards and gradients differ per step
    "train.reward_weights=[1.0]",
    "train.temperature=4.0",
    "train.beta=0.04",  # a KL term: the loss is not ~0 after the first step (GRPO's is, beta 0)
]


def _adapter(run: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(run / "final" / "adapter_model.safetensors")


@pytest.mark.slow
def test_zero3_preempted_and_requeued_equals_an_uninterrupted_run(tmp_path):
    """The two-process preemption of tests/test_multiprocess.py (SIGTERM on rank 0 at the end of
    step PREEMPT_AT, submitit's handlers stood in for) under ZeRO-3: the requeued task resumes
    from DeepSpeed's sharded checkpoint and logs the same steps, and writes the same adapter, as
    a run that was never stopped."""
    from test_multiprocess import COMPARED, DRIVER, _env, _per_step, _torchrun

    env = _env(tmp_path)
    reference = tmp_path / "reference"
    started = time.time()
    out = _torchrun(
        ["-m", "vqa_r1", "grpo", "--model", MODEL, "--output-dir", str(reference)]
        + [a for o in REQUEUE_OVERRIDES for a in ("--set", o)],
        tmp_path / "reference-logs",
        env,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    print(f"uninterrupted ZeRO-3 run: {time.time() - started:.0f} s")

    run, seen = tmp_path / "preempted", tmp_path / "preempted-out"
    run.mkdir()
    seen.mkdir()
    (run / "config.yaml").write_text((reference / "config.yaml").read_text())
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    started = time.time()
    first = _torchrun([str(driver), str(run), str(PREEMPT_AT), str(seen)], tmp_path / "l1", env)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-4000:]
    statuses = [json.loads((seen / f"status-{r}.json").read_text()) for r in (0, 1)]
    assert [(s["state"], s["global_step"]) for s in statuses] == [("STOPPED", PREEMPT_AT)] * 2
    stopped_at = run / "checkpoints" / f"checkpoint-{PREEMPT_AT}"
    assert (stopped_at / f"global_step{PREEMPT_AT}").is_dir()  # DeepSpeed's shards, both ranks
    assert RunDir(run).status()["state"] == "REQUEUED"

    second = _torchrun([str(driver), str(run), "0", str(seen)], tmp_path / "l2", env)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-4000:]
    print(f"preempted + requeued ZeRO-3 runs: {time.time() - started:.0f} s")
    status = RunDir(run).status()
    assert status["state"] == "COMPLETED" and status["starts"] == 2
    assert status["resumed_from"].endswith(f"checkpoint-{PREEMPT_AT}")
    resumed, uninterrupted = _per_step(run), _per_step(reference)
    assert [r["step"] for r in resumed] == list(range(1, STEPS + 1))  # none lost nor repeated
    assert len({r["reward"] for r in uninterrupted}) > 1 and all(r["grad_norm"] for r in resumed)
    for a, b in zip(resumed, uninterrupted, strict=True):
        for key in (*COMPARED, "kl"):
            assert a[key] == b[key], (a["step"], key)  # bit-identical, as without DeepSpeed
    adapter, expected = _adapter(run), _adapter(reference)
    assert adapter.keys() == expected.keys() and all(t.numel() for t in adapter.values())
    for name, tensor in expected.items():
        assert torch.equal(adapter[name], tensor), name
