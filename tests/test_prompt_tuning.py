"""Prompt tuning: positions and generation with virtual tokens, answer-mode scoring, the CLI run,
resume after a kill, and clear errors."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest
from checkpoint_kill import STALL_SAVE, kill_while_writing

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

FAMILY_MODELS = {
    "qwen2_5_vl": "tiny-qwen2.5-vl-pretrained",
    "internvl": "tiny-internvl-pretrained",
    "smolvlm": "tiny-smolvlm-pretrained",
}


def _loaded(name):
    from vqa_r1.config import ModelConfig
    from vqa_r1.models.loading import load_model

    loaded = load_model(ModelConfig(name=name, dtype="float32"))
    loaded.model.eval()
    return loaded


@pytest.fixture(scope="module")
def items():
    """Four validation items of the demo's data, one question made longer (left padding)."""
    import torch
    from PIL import Image

    from vqa_r1.data.datasets import dataset_dir, load_split
    from vqa_r1.data.prompts import problem_text
    from vqa_r1.train.prompt_tuning import PromptTuneConfig

    torch.set_num_threads(1)
    ds = load_split(dataset_dir(PromptTuneConfig().data), "validation").select(range(4))
    images = [Image.open(p).convert("RGB") for p in ds["image_path"]]
    questions = [problem_text(c) for c in ds["caption"]]
    questions[1] += " Look closely."
    return images, questions


@pytest.mark.slow
@pytest.mark.parametrize("family", list(FAMILY_MODELS))
def test_masked_prompt_generates_what_the_base_model_generates(family, items):
    """Virtual tokens masked out (a no-op prompt): the greedy loop with the cache gives the text of
    the ordinary generate (Generator), so the positions and the cache handling are the model's."""
    import torch

    from vqa_r1.models.generation import GenerationSettings, Generator
    from vqa_r1.models.virtual_prompt import VirtualPromptModel

    images, questions = items
    loaded = _loaded(FAMILY_MODELS[family])
    base = Generator(loaded, GenerationSettings(max_new_tokens=60, cache="on"))
    expected = base.generate(images, questions)
    vp = VirtualPromptModel(loaded)
    prompt = torch.randn(5, loaded.model.get_input_embeddings().weight.shape[1])
    assert vp.generate(images, questions, prompt, 60, visible=False) == expected
    assert vp.generate(images, questions, None, 60) == expected
    assert any("<answer>" in text for text in expected)  # the comparison covers whole answers


@pytest.mark.slow
@pytest.mark.parametrize("family", list(FAMILY_MODELS))
def test_text_prompt_equals_those_tokens_in_front(family, items):
    """Virtual tokens set to the embeddings of real text tokens: generation and answer logits equal
    the ordinary model's on input ids with that text in front. For Qwen2.5-VL this checks the
    M-RoPE positions of every image and text token after a visible prompt."""
    import torch

    from vqa_r1.models.virtual_prompt import VirtualPromptModel

    images, questions = items
    loaded = _loaded(FAMILY_MODELS[family])
    vp = VirtualPromptModel(loaded)
    text = "left to right: red, blue. top to bottom:"
    ids = vp.tokenizer(text, add_special_tokens=False)["input_ids"]
    prompt = vp.embed(torch.tensor(ids)).detach()

    mine = vp.generate(images, questions, prompt, 60)
    batch = vp.encode(images, [text + vp.prompt_text(q) for q in questions])
    with torch.inference_mode():
        out = loaded.model.generate(
            **batch,
            max_new_tokens=60,
            do_sample=False,
            suppress_tokens=[vp.image_token_id],
            pad_token_id=vp.pad_id,
        )
    expected = vp.processor.batch_decode(
        out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True
    )
    assert mine == expected

    answer = vp.answer_tokens()
    got = vp.answer_logits(images, questions, prompt)
    batch = vp.encode(images, [text + vp.prompt_text(q) + answer.prefix for q in questions])
    with torch.inference_mode():
        logits = loaded.model(**batch).logits[:, -1]
    direct = logits[:, [answer.true_id, answer.false_id]]
    assert torch.allclose(got, direct, atol=1e-4)

    if family == "qwen2_5_vl":  # the check has teeth: plain 1-D positions give other logits
        inputs = vp.model_inputs(vp.answer_inputs(images, questions), prompt)
        mask = inputs["attention_mask"]
        linear = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
        inputs["position_ids"] = linear.unsqueeze(0).expand(3, -1, -1)
        with torch.inference_mode():
            wrong = loaded.model(**inputs).logits[:, -1][:, [answer.true_id, answer.false_id]]
        assert not torch.allclose(wrong, direct, atol=1e-3)


@pytest.mark.slow
def test_answer_mode_scoring_equals_a_direct_computation(items, tmp_path):
    """The scored prediction of two items is the comparison of the " True" and " False" logits
    after the assistant prefix + "<answer>", computed here by hand from the tokenizer."""
    import torch

    from vqa_r1.eval.prompt_scoring import answer_predictions
    from vqa_r1.models.virtual_prompt import VirtualPromptModel

    images, questions = items
    loaded = _loaded("tiny-qwen2.5-vl-pretrained")
    vp = VirtualPromptModel(loaded)
    answer = vp.answer_tokens()
    tok = vp.tokenizer
    assert answer.prefix == "<answer>"
    assert tok.convert_ids_to_tokens([answer.true_id, answer.false_id]) == ["ĠTrue", "ĠFalse"]
    prompt = torch.randn(4, loaded.model.get_input_embeddings().weight.shape[1]) * 0.05
    said, pair = answer_predictions(vp, images[:2], questions[:2], prompt)
    for i in range(2):
        text = vp.prompt_text(questions[i]) + "<answer>"
        batch = vp.processor(text=[text], images=[[images[i]]], return_tensors="pt")
        embeds = loaded.model.get_input_embeddings()(batch["input_ids"])
        embeds = torch.cat([prompt.unsqueeze(0), embeds], dim=1)
        ids = torch.cat([torch.zeros(1, 4, dtype=torch.long), batch["input_ids"]], dim=1)
        types = torch.cat([torch.zeros(1, 4, dtype=torch.long), batch["mm_token_type_ids"]], 1)
        mask = torch.ones_like(ids)
        positions, _ = loaded.model.model.get_rope_index(
            ids,
            mm_token_type_ids=types,
            image_grid_thw=batch["image_grid_thw"],
            attention_mask=mask,
        )
        with torch.inference_mode():
            logits = loaded.model(
                inputs_embeds=embeds,
                attention_mask=mask,
                position_ids=positions,
                pixel_values=batch["pixel_values"],
                image_grid_thw=batch["image_grid_thw"],
            ).logits[0, -1]
        t, f = (
            tok(" True", add_special_tokens=False)["input_ids"][0],
            tok(" False", add_special_tokens=False)["input_ids"][0],
        )
        assert pair[i] == pytest.approx([float(logits[t]), float(logits[f])], abs=1e-4)
        assert said[i] == bool(logits[t] > logits[f])


def _cli(*argv):
    from vqa_r1.cli import main

    return main(["prompt-tune", *argv])


SMALL = [
    "--set",
    "data.synthetic_train=64",
    "--set",
    "eval.limit=8",
    "--set",
    "train.per_device_train_batch_size=4",
    "--set",
    "train.logging_steps=1",
]


@pytest.mark.slow
def test_cli_run_writes_adapter_and_scores_and_resumes(tmp_path, capsys):
    """As a user types it: a run killed after 2 of 4 steps resumes from its checkpoint and ends
    with the same prompt as an uninterrupted run; final/ and eval/scores.json are written."""
    from peft.utils import load_peft_weights

    keys = {"accuracy", "accuracy_ci_95", "f1_weighted", "n", "correct", "per_relation"}
    keys |= {"format_rate", "mode", "model", "split"}
    common = ["--model", "tiny-qwen2.5-vl-pretrained", "--mode", "answer", *SMALL]
    common += ["--set", "train.max_steps=4", "--set", "train.save_steps=2"]

    whole = tmp_path / "whole"
    capsys.readouterr()
    assert _cli(*common, "--output-dir", str(whole)) == 0
    assert (whole / "final" / "adapter_config.json").exists()
    scores = json.loads((whole / "eval" / "scores.json").read_text())
    low, high = scores["accuracy_ci_95"]
    printed = capsys.readouterr().out.splitlines()  # a line a person reads, not a dict (#30)
    assert printed[-2:] == [
        f"prompt-tune: answer prompt on tiny-qwen2.5-vl-pretrained, validation split: accuracy "
        f"{scores['accuracy']:.3f} (95% CI {low:.3f}-{high:.3f}) on 8 items; format rate not "
        "scored in answer mode",
        f"scores in {whole}/eval",
    ]
    assert keys <= set(scores)
    assert scores["n"] == 8 and scores["mode"] == "answer" and scores["format_rate"] is None
    assert scores["split"] == "validation"
    records = json.loads((whole / "eval" / "generated_responses.json").read_text())
    assert set(records[0]) >= {"true_response", "predicted_response"}

    killed = tmp_path / "killed"
    assert _cli(*common, "--output-dir", str(killed), "--stop-after", "2") == 0
    assert not (killed / "final").exists()
    assert (killed / "checkpoints" / "checkpoint-2" / "CHECKPOINT_COMPLETE").exists()
    # the record of its base (models/base_record.py), in final/ and each checkpoint
    base = json.loads((killed / "checkpoints" / "checkpoint-2" / "adapter_base.json").read_text())
    assert base["model"] == {"name": "tiny-qwen2.5-vl-pretrained", "path": None}
    assert json.loads((whole / "final" / "adapter_base.json").read_text()) == base
    assert _cli(*common, "--output-dir", str(killed)) == 0
    record = json.loads((killed / "final" / "prompt_tuning.json").read_text())
    assert record["resumed_from"] == 2 and record["global_step"] == 4
    a = load_peft_weights(str(whole / "final"))["prompt_embeddings"]
    b = load_peft_weights(str(killed / "final"))["prompt_embeddings"]
    assert (a - b).abs().max() < 1e-6
    steps = _per_step(killed)
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    assert [r["loss"] for r in steps] == pytest.approx([r["loss"] for r in _per_step(whole)])
    assert json.loads((killed / "eval" / "scores.json").read_text())["n"] == 8


def _per_step(run_dir):
    """metrics.jsonl's per-step lines (the Trainer also logs a summary when training ends)."""
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in lines if "loss" in r]


# 12 training rows in batches of 4: 3 steps an epoch, so checkpoint-4 is a step into epoch 1 and
# a run resumed there crosses the boundary into epoch 2 (at step 6) before it ends at step 8
RESUMED = [
    "model.name=tiny-qwen2.5-vl-pretrained",
    "mode=answer",
    "data.synthetic_train=64",
    "data.num_samples=12",
    "train.per_device_train_batch_size=4",
    "train.max_steps=8",
    "train.save_steps=4",
    "train.logging_steps=1",
    "eval.limit=4",
]


def _resumed_config():
    from vqa_r1.train.prompt_tuning import config_from_overrides

    return config_from_overrides(RESUMED)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The run the interrupted ones are compared with: RESUMED's 8 steps in one go."""
    from vqa_r1.train.prompt_tuning import train_prompt

    run = tmp_path_factory.mktemp("uninterrupted") / "run"
    record = train_prompt(_resumed_config(), run, progress=False)
    assert record["complete"] and record["resumed_from"] == 0
    return run


def _assert_same_run(run, uninterrupted):
    """The per-step losses and learning rates and the final prompt of ``run`` are those of the
    uninterrupted run: no step lost, repeated or trained on other rows."""
    import torch
    from peft.utils import load_peft_weights

    a, b = _per_step(uninterrupted), _per_step(run)
    assert [r["step"] for r in b] == list(range(1, 9))
    for x, y in zip(a, b, strict=True):
        assert y["loss"] == pytest.approx(x["loss"], rel=1e-5, abs=1e-7), (x, y)
        assert y["learning_rate"] == pytest.approx(x["learning_rate"], rel=1e-9), (x, y)
    assert len({r["loss"] for r in a}) > 1  # the prompt changed from step to step
    first = json.loads((uninterrupted / "final" / "prompt_tuning.json").read_text())
    start = first["config"]
    want = load_peft_weights(str(uninterrupted / "final"))["prompt_embeddings"]
    got = load_peft_weights(str(run / "final"))["prompt_embeddings"]
    assert start == json.loads((run / "final" / "prompt_tuning.json").read_text())["config"]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


class Crash(RuntimeError):
    pass


@pytest.mark.slow
def test_a_run_killed_after_a_checkpoint_resumes_as_if_never_stopped(uninterrupted, tmp_path):
    """Killed at step 6 (an exception out of the Trainer, as a crash): the next call resumes from
    checkpoint-4, mid-epoch, with the optimizer, scheduler and data order of the uninterrupted run,
    across the next epoch boundary."""
    from transformers import TrainerCallback

    from vqa_r1.run_dir import RunDir, latest_checkpoint
    from vqa_r1.train.prompt_tuning import train_prompt

    class CrashAt(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 6:
                raise Crash("simulated kill at step 6")

    run = tmp_path / "run"
    with pytest.raises(Crash):
        train_prompt(_resumed_config(), run, progress=False, callbacks=[CrashAt()])
    assert latest_checkpoint(run / "checkpoints").name == "checkpoint-4"
    assert [r["step"] for r in _per_step(run)] == list(range(1, 6))  # step 6 never logged
    record = train_prompt(_resumed_config(), run, progress=False)
    assert record["resumed_from"] == 4 and record["global_step"] == 8 and record["complete"]
    status = RunDir(run).status()
    assert status["state"] == "TRAINED" and status["starts"] == 2
    assert status["resumed_from"].endswith("checkpoint-4")
    assert [step for step, _ in record["loss_curve"]] == list(range(1, 9))
    _assert_same_run(run, uninterrupted)


@pytest.mark.slow
def test_a_run_killed_after_its_last_checkpoint_only_writes_final(uninterrupted, tmp_path):
    """Killed between checkpoint-8 (the last step) and final/: the next start trains nothing
    (no step 9) and writes the checkpoint's prompt as final/."""
    import shutil

    from vqa_r1.train.prompt_tuning import train_prompt

    run = tmp_path / "run"
    shutil.copytree(uninterrupted, run)
    shutil.rmtree(run / "final")
    record = train_prompt(_resumed_config(), run, progress=False)
    assert record["global_step"] == 8 and record["resumed_from"] == 8 and record["complete"]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
        "checkpoint-4",
        "checkpoint-8",
    ]
    _assert_same_run(run, uninterrupted)


DRIVER = STALL_SAVE + (
    """
import json, sys
from vqa_r1.train.prompt_tuning import config_from_overrides, train_prompt

train_prompt(config_from_overrides(json.loads(sys.argv[2])), sys.argv[1], progress=False)
"""
)


@pytest.mark.slow
def test_a_checkpoint_half_written_when_killed_is_ignored_on_resume(uninterrupted, tmp_path):
    """SIGKILL while checkpoint-8 is written (its prompt saved, its optimizer state not): the
    half-written folder stays in staging, never looks complete, and the next start resumes from
    checkpoint-4 and ends as the uninterrupted run did."""
    from vqa_r1.run_dir import latest_checkpoint
    from vqa_r1.train.prompt_tuning import train_prompt

    run = tmp_path / "run"
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    argv = [sys.executable, str(driver), str(run), json.dumps(RESUMED)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    kill_while_writing(argv, env, step=8)

    half = run / "checkpoints" / ".staging" / "checkpoint-8"
    assert (half / "adapter_model.safetensors").exists() and not (half / "optimizer.pt").exists()
    assert not (run / "checkpoints" / "checkpoint-8").exists() and not (run / "final").exists()
    assert latest_checkpoint(run / "checkpoints").name == "checkpoint-4"

    record = train_prompt(_resumed_config(), run, progress=False)  # the next start
    assert record["global_step"] == 8 and record["resumed_from"] == 4
    assert not (run / "checkpoints" / ".staging").exists()
    _assert_same_run(run, uninterrupted)


@pytest.mark.slow
def test_a_slurm_job_checkpoints_at_a_step_boundary_and_requeues(
    uninterrupted, tmp_path, monkeypatch
):
    """PromptTuneTask as submitit runs it in a SLURM job: preempted (SIGTERM) during step 6, the
    requeue controller (a Trainer callback, as in TrainTask) has checkpoint-6 written at that
    boundary and the task requeues; the requeued task resumes there, ends as the uninterrupted
    run did and evaluates. submitit's USR2 handler is stood in for (it would requeue and exit)."""
    import signal

    from vqa_r1.launch import requeue
    from vqa_r1.launch.task import PromptTuneTask
    from vqa_r1.run_dir import RunDir

    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_JOB_END_TIME", str(int(time.time()) + 3600))  # SIGTERM: preemption
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    monkeypatch.setattr(requeue, "job_state", lambda: "RUNNING")  # as in its GraceTime

    class PreemptedAt6(requeue.RequeueController):
        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step + 1 == 6:  # the signal comes while step 6 computes
                os.kill(os.getpid(), signal.SIGTERM)
            return super().on_step_begin(args, state, control, **kwargs)

    monkeypatch.setattr(requeue, "RequeueController", PreemptedAt6)
    run = tmp_path / "run"
    task = PromptTuneTask(str(run), signal_delay_s=120, config=_resumed_config())
    requeued = []

    def submitit_usr2(signum, frame):  # checkpoint the task and requeue (here: record it)
        requeued.append(task.checkpoint())

    saved = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM)}
    signal.signal(signal.SIGUSR2, submitit_usr2)
    try:
        first = task()
        assert len(requeued) == 1 and requeued[0] is not None  # a DelayedSubmission
        assert first["training"]["global_step"] == 6 and not first["training"]["complete"]
        assert RunDir(run).status()["state"] == "REQUEUED"
        assert (run / "checkpoints" / "checkpoint-6" / "CHECKPOINT_COMPLETE").exists()
        assert not (run / "final").exists()

        monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
        signal.signal(signal.SIGUSR2, submitit_usr2)
        second = PromptTuneTask(str(run), signal_delay_s=120, config=_resumed_config())()
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
    assert len(requeued) == 1
    assert second["training"]["resumed_from"] == 6 and second["n"] == 4
    assert RunDir(run).status()["state"] == "COMPLETED"
    _assert_same_run(run, uninterrupted)


@pytest.mark.slow
def test_cli_reasoning_mode_generates(tmp_path):
    out = tmp_path / "r"
    argv = ["--mode", "reasoning", *SMALL, "--set", "train.max_steps=2", "--set", "eval.limit=4"]
    assert _cli(*argv, "--output-dir", str(out)) == 0
    scores = json.loads((out / "eval" / "scores.json").read_text())
    assert scores["mode"] == "reasoning" and scores["n"] == 4
    assert scores["format_rate"] is not None
    records = json.loads((out / "eval" / "generated_responses.json").read_text())
    assert all("<answer>" in r["predicted_response"] for r in records)


def test_bad_mode_is_a_clear_error(tmp_path, capsys):
    assert _cli("--mode", "direct", "--output-dir", str(tmp_path / "x")) == 2
    err = capsys.readouterr().err
    assert "mode" in err and "answer, reasoning" in err and "'direct'" in err
    assert not (tmp_path / "x").exists()


def test_unknown_key_and_unsupported_family_are_refused(monkeypatch, capsys):
    from vqa_r1.errors import UserError
    from vqa_r1.models import virtual_prompt

    assert _cli("--set", "num_virtual_token=4", "--output-dir", "/nonexistent/x") == 2
    assert "num_virtual_tokens" in capsys.readouterr().err
    monkeypatch.setattr(virtual_prompt, "SUPPORTED_FAMILIES", ("qwen2_5_vl",))
    with pytest.raises(UserError, match="'internvl' is not supported.*position ids"):
        virtual_prompt.check_family("internvl")


def test_help_lists_every_key(capsys):
    import dataclasses

    from vqa_r1.train.prompt_tuning import PromptTuneConfig
    from vqa_r1.typed_config import describe

    with pytest.raises(SystemExit):
        _cli("--help")
    out = capsys.readouterr().out
    for key, *_ in describe(PromptTuneConfig):
        assert f"  {key} (" in out
    assert "data.synthetic_train (int, default 4000)" in out
    assert {f.name for f in dataclasses.fields(PromptTuneConfig)} >= {"mode", "init", "data"}


# the keys as prompt-tune wrote them before they took the run config's names (issue 18)
OLD_NAMES = {
    "model.name": "model",
    "model.path": "model_path",
    "model.device": "device",
    "train.learning_rate": "learning_rate",
    "train.warmup_steps": "warmup_steps",
    "train.max_steps": "max_steps",
    "train.per_device_train_batch_size": "batch_size",
    "train.save_steps": "save_steps",
    "train.logging_steps": "logging_steps",
    "train.seed": "seed",
    "train.num_threads": "num_threads",
    "eval.split": "eval_split",
    "eval.limit": "eval_limit",
    "eval.batch_size": "eval_batch_size",
    "eval.max_new_tokens": "max_new_tokens",
    "eval.answer_rule": "answer_rule",
}
# the config.yaml the first prompt-tuning study run wrote under the old key names (committed in
# results/ until that run was replaced on 2026-11-29: git show 8180459:results/experiments/
# prompt-tuning-tiny-qwen2.5-vl-pretrained/runs/prompt-answer/config.yaml), kept as a record
RECORDED = "tests/fixtures/prompt-tune-old-names"


def _in_old_names(cfg) -> dict:
    """``cfg`` as prompt-tune recorded it before the renames: one flat mapping but ``data``."""
    from vqa_r1.typed_config import to_dict

    new = to_dict(cfg)
    old = {k: v for k, v in new.items() if k not in ("model", "train", "eval")}
    for section in ("model", "train", "eval"):
        old.update({OLD_NAMES[f"{section}.{k}"]: v for k, v in new[section].items()})
    return old


def test_a_config_recorded_under_the_old_key_names_loads_under_the_new_ones():
    """A study run's config.yaml from before the renames (written as ``model``, ``batch_size``,
    ``eval_split``, ...; kept as the record it is) reads as today's config."""
    from pathlib import Path

    import yaml

    from vqa_r1.claims import renamed_settings
    from vqa_r1.train.prompt_tuning import PromptTuneConfig
    from vqa_r1.typed_config import build

    repo = Path(__file__).resolve().parents[1]
    old = yaml.safe_load((repo / RECORDED / "config.yaml").read_text())
    assert {"model", "batch_size", "eval_split", "num_threads"} <= set(old)
    cfg = build(PromptTuneConfig, renamed_settings("prompt-tune", old))
    assert cfg.model.name == "tiny-qwen2.5-vl-pretrained" and cfg.model.path is None
    assert cfg.train.per_device_train_batch_size == 16 and cfg.train.max_steps == 600
    assert cfg.train.learning_rate == 0.03 and cfg.train.num_threads == 1
    assert cfg.eval.split == "test" and cfg.eval.batch_size == 32 and cfg.eval.limit is None
    assert cfg.mode == "answer" and cfg.data.synthetic_train == 4000


def test_a_run_recorded_under_the_old_key_names_resumes_and_other_settings_are_refused(
    tmp_path,
):
    """A run folder from before the renames (its marker and config.yaml in the old names)
    resumes under the same settings typed in the new names; other settings are still refused."""
    import yaml

    from vqa_r1 import claims
    from vqa_r1.errors import UserError
    from vqa_r1.run_dir import RunDir
    from vqa_r1.train.prompt_tuning import _check_same_run
    from vqa_r1.typed_config import build, to_dict

    cfg = _resumed_config()
    old = _in_old_names(cfg)
    run = tmp_path / "run"
    run.mkdir()
    (run / claims.MARKER).write_text(json.dumps({"verb": "prompt-tune", "settings": old}))
    (run / "config.yaml").write_text(yaml.safe_dump(old, sort_keys=False))
    assert claims.renamed_settings("prompt-tune", old) == to_dict(cfg)
    assert claims.check(run, "prompt-tune", to_dict(cfg)) == claims.RESUME
    _check_same_run(RunDir(run), cfg)
    threads = build(cfg, {"train": {"num_threads": 2}})
    _check_same_run(RunDir(run), threads)  # settings.py: threads may differ on a resume
    assert claims.check(run, "prompt-tune", to_dict(threads)) == claims.RESUME
    other = build(cfg, {"train": {"per_device_train_batch_size": 2}})
    with pytest.raises(claims.FolderRefused, match="train.per_device_train_batch_size"):
        claims.check(run, "prompt-tune", to_dict(other))
    with pytest.raises(UserError, match=r"other settings \(train.per_device_train_batch_size"):
        _check_same_run(RunDir(run), other)


def test_an_experiment_recorded_under_the_old_key_names_relaunches(tmp_path):
    """experiment.json's step settings and a run's config.yaml from before the renames: the
    same re-launch is not refused, another one is."""
    import yaml

    from vqa_r1.errors import UserError
    from vqa_r1.experiments import build_study, declare
    from vqa_r1.launch.request import JobOptions

    job = JobOptions(executor="local")
    root = tmp_path / "exp"
    ONE = ["experiment.seeds=1"]  # the folders of before seeds
    plan = build_study("prompt-tuning", "tiny-qwen2.5-vl", ONE, str(root), job)
    declare(plan)
    record = json.loads((root / "experiment.json").read_text())
    for step in record["steps"]:
        if "settings" in step:
            step["settings"] = {OLD_NAMES.get(k, k): v for k, v in step["settings"].items()}
    assert "batch_size" in record["steps"][0]["settings"]
    (root / "experiment.json").write_text(json.dumps(record))
    tuned = next(s for s in plan.steps if s.name == "runs/prompt-answer")
    tuned.run_dir.mkdir(parents=True, exist_ok=True)
    old = _in_old_names(tuned.request.task.config)
    (tuned.run_dir / "config.yaml").write_text(yaml.safe_dump(old, sort_keys=False))
    build_study("prompt-tuning", "tiny-qwen2.5-vl", ONE, str(root), job)  # the same: fine
    with pytest.raises(UserError, match="train.learning_rate"):
        other = [*ONE, "prompt-tune:train.learning_rate=0.5"]
        build_study("prompt-tuning", "tiny-qwen2.5-vl", other, str(root), job)
