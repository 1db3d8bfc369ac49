"""TensorBoard across a resume: one stream in the run's folder, each step once (issue 34, item 5;
train/trackers.py)."""

from __future__ import annotations

import json
import shutil

from vqa_r1.recipes import load_config
from vqa_r1.train.callbacks import StopAfter
from vqa_r1.train.runner import train


def scalars(folder, tag: str) -> list[tuple[int, float]]:
    """(step, value) of ``tag`` as TensorBoard shows it (its reader applies the purge steps)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder))
    events.Reload()
    return [(e.step, e.value) for e in events.Scalars(tag)]


def test_a_resumed_run_continues_one_tensorboard_stream_with_each_step_once(tmp_path):
    """Stopped at step 5 with checkpoints at 3 and 5, then checkpoint-5 removed (a job killed
    after logging step 5, before saving it): the resumed run goes on from step 3 into the same
    folder. TensorBoard shows one run whose steps are 1..6 once each, steps 4 and 5 with the
    values the resumed run logged (those in metrics.jsonl), not a second run from the requeue."""
    run = tmp_path / "sft"
    config = load_config("sft", "tiny-qwen2.5-vl-pretrained", overrides=[
        "train.max_steps=6", "train.save_steps=3", "train.logging_steps=1",
        "train.report_to=[tensorboard]", "data.num_samples=32",
    ])  # fmt: skip
    first = train(config, run, callbacks=[StopAfter(5)], sigterm_stops=False)
    assert first["state"] == "STOPPED" and first["global_step"] == 5
    folder = run / "tensorboard"
    assert [s for s, _ in scalars(folder, "train/loss")] == [1, 2, 3, 4, 5]
    shutil.rmtree(run / "checkpoints" / "checkpoint-5")

    second = train(config, run, sigterm_stops=False)
    assert second["state"] == "COMPLETED" and second["resumed_from"].endswith("checkpoint-3")
    assert [p.name for p in run.iterdir() if p.name in ("runs", "tensorboard")] == ["tensorboard"]
    assert len(list(folder.glob("events.out.tfevents.*"))) == 2  # one per start, one run
    shown = scalars(folder, "train/loss")
    assert [s for s, _ in shown] == [1, 2, 3, 4, 5, 6]
    logged = {r["step"]: r["loss"] for r in map(json.loads, (run / "metrics.jsonl").open())
              if "loss" in r}  # fmt: skip
    assert [round(v, 5) for _, v in shown] == [round(logged[s], 5) for s, _ in shown]
