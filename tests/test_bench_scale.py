"""SCALE (benchmarks/scale.py), as issue 33's acceptance types it: `python -m benchmarks --only
scale --cpu --quick` passes here; its measured columns hold measurements, its random weights are
refused anywhere else."""

from __future__ import annotations

import json
import re

import pytest

from benchmarks.__main__ import main as bench_main
from vqa_r1.errors import UserError
from vqa_r1.models.architecture import RANDOM_INIT_KEY, RANDOM_INIT_OK_ENV, refuse_random_weights


@pytest.mark.slow
def test_the_scale_benchmark_runs_on_the_cpu_and_measures_both_sides(tmp_path, monkeypatch):
    monkeypatch.delenv(RANDOM_INIT_OK_ENV, raising=False)
    out = tmp_path / "bench"
    assert bench_main(["--only", "scale", "--cpu", "--quick", "--out", str(out)]) == 0
    (result,) = json.loads((out / "results.json").read_text())["benchmarks"]
    assert result["id"] == "SCALE" and result["kind"] == "overhead"
    assert result["checks"]["same logged losses and rewards"] is True
    for side in ("ours", "baseline"):  # measured, not estimated: one timed run each, > 0 s/step
        assert result[side]["seconds"] and all(s > 0 for s in result[side]["seconds"])
    details = result["details"]
    generate = [float(x) for x in details["generate, s/step, ours / bare"].split(" / ")]
    assert all(0 < g < result["ours"]["seconds"][0] * 1.5 for g in generate)
    assert float(details["completion tokens/s, ours"]) > 0
    assert re.match(r"[\d.]+ / [\d.]+ \(process peak RSS, shared\)$",
                    details["peak memory (GiB), ours / bare"])  # fmt: skip
    assert details["memory plan of this run (GiB)"].startswith("none: the plan counts the real")
    assert "qwen2.5-vl-3b 512 / 16384" in details["image tokens, recipe / checkpoint default"]
    assert "no measured GPU number is in this report" in " ".join(result["notes"])
    assert RANDOM_INIT_OK_ENV not in __import__("os").environ  # the benchmark cleared it


def test_random_weights_are_refused_outside_a_benchmark(tmp_path, monkeypatch):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2_5_vl",
                                                    RANDOM_INIT_KEY: True}))  # fmt: skip
    monkeypatch.delenv(RANDOM_INIT_OK_ENV, raising=False)
    with pytest.raises(UserError, match=r"holds random weights .*their outputs are noise"):
        refuse_random_weights(folder)
    monkeypatch.setenv(RANDOM_INIT_OK_ENV, "1")
    refuse_random_weights(folder)  # a benchmark's own
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2_5_vl"}))
    monkeypatch.delenv(RANDOM_INIT_OK_ENV)
    refuse_random_weights(folder)  # real weights: nothing to refuse
