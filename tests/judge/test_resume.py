"""Acceptance: 500 items with 30 % injected faults, none lost; reruns and killed runs pay nothing
for what is already judged."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from judge_helpers import REPO, cli, write_responses

from benchmarks.loopback import FAULTS, LoopbackOpenAI

# a timeout well below the injected hang (3 s) and well above a loopback answer on a loaded
# machine (the suite runs beside other work: tests/README.md)
FAST = ["--timeout", "1.0", "--backoff-base", "0.01", "--backoff-max", "0.05"]


def run_args(server, responses, out, cache, *extra):
    return [
        "judge", "run", "--judge-model", "loopback-judge", "--base-url", server.base_url,
        *[a for name, path in responses for a in ("--responses", f"{name}={path}")],
        "--out", out, "--cache-dir", cache, "--concurrency", "16", *FAST, *extra,
    ]  # fmt: skip


def test_500_items_with_30_percent_faults_none_lost_and_rerun_is_free(tmp_path, no_key_env):
    responses = [
        ("base", write_responses(tmp_path / "base.json", 250, "b", misaligned_every=5)),
        ("grpo", write_responses(tmp_path / "grpo.json", 250, "g", misaligned_every=7)),
    ]
    out, cache = tmp_path / "checks.json", tmp_path / "cache"
    with LoopbackOpenAI(fault_rate=0.3, faults=FAULTS, seed=7, retry_after="0.05",
                        hang_seconds=3.0) as server:  # fmt: skip
        code = cli(*run_args(server, responses, out, cache, "--max-attempts", "4"))
        first = server.requests[:]
    records = json.loads(out.read_text())
    assert code in (0, 1)  # 1 only when some item failed
    assert len(records) == 500
    assert {(r["index"], r["model"]) for r in records} == {
        (i, m) for i in range(250) for m in ("base", "grpo")
    }
    # the study's alternation: index 0 base, index 0 grpo, index 1 base, ...
    assert [(r["index"], r["model"]) for r in records[:4]] == [
        (0, "base"),
        (0, "grpo"),
        (1, "base"),
        (1, "grpo"),
    ]
    faults = [r.fault for r in first if r.fault]
    assert 0.2 < len(faults) / len(first) < 0.4 and set(faults) == set(FAULTS)
    judged = [r for r in records if r["status"] == "judged"]
    failed = [r for r in records if r["status"] == "failed"]
    assert len(judged) + len(failed) == 500
    assert len(judged) >= 490
    for r in failed:
        assert r["error"] and r["aligns"] is None
        if r["error"].startswith("invalid verdict"):
            assert r["raw_reply"]
    for r in judged:
        assert isinstance(r["aligns"], bool) and r["why"]
        assert r["aligns"] == ("MISALIGNED" not in r["reasoning"])
        assert r["type"] == (None if r["aligns"] else "contradiction")
    # study shape first, then ours
    assert list(records[0])[:9] == ["index", "model", "question", "true_label", "reasoning",
                                    "final_ans", "aligns", "type", "why"]  # fmt: skip

    with LoopbackOpenAI() as server:  # a fault-free second run
        assert cli(*run_args(server, responses, out, cache)) == 0
        judged_claims = {r["question"] for r in judged}
        asked = server.claims()
    assert not judged_claims & set(asked), "a judged item was requested again"
    assert sorted(asked) == sorted(r["question"] for r in failed)  # only the failures, once each
    records = json.loads(out.read_text())
    assert all(r["status"] == "judged" for r in records)
    assert sum(r["cached"] for r in records) == len(judged)


def test_a_killed_run_resumes_and_pays_nothing_for_cached_items(tmp_path, no_key_env):
    responses = write_responses(tmp_path / "r.json", 120, "k")
    out, cache = tmp_path / "checks.json", tmp_path / "cache"
    with LoopbackOpenAI(latency=0.05) as server:
        args = run_args(server, [("m", responses)], out, cache, "--concurrency", "2")
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        proc = subprocess.Popen([sys.executable, "-m", "vqa_r1", *map(str, args)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        deadline = time.monotonic() + 60
        while len(list(cache.rglob("*.json"))) < 20 and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert not out.exists()  # killed before the end
        cached = len(list(cache.rglob("*.json")))
        assert 20 <= cached < 120
        before = server.count()
        assert cli(*args) == 0
        assert server.count() - before == 120 - cached
    records = json.loads(out.read_text())
    assert len(records) == 120 and sum(r["cached"] for r in records) == cached


def test_cache_key_changes_with_model_prompt_and_inputs(tmp_path, no_key_env):
    responses = write_responses(tmp_path / "r.json", 3, "c")
    out, cache = tmp_path / "checks.json", tmp_path / "cache"
    with LoopbackOpenAI() as server:
        assert cli(*run_args(server, [("m", responses)], out, cache)) == 0
        assert cli(*run_args(server, [("m", responses)], out, cache, "--overwrite")) == 0
        assert server.count() == 3
        # other settings go to another --out (the same --out is refused: claims.py)
        out2 = tmp_path / "simple.json"
        assert cli(*run_args(server, [("m", responses)], out2, cache, "--prompt", "simple")) == 0
        assert server.count() == 6
        args = run_args(server, [("m", responses)], tmp_path / "other.json", cache)
        args[args.index("loopback-judge")] = "other-judge"
        assert cli(*args) == 0
        assert server.count() == 9
        write_responses(responses, 3, "changed")
        assert cli(*run_args(server, [("m", responses)], out, cache, "--overwrite")) == 0
        assert server.count() == 12
        args = run_args(server, [("m", responses)], out, cache, "--no-cache", "--overwrite")
        assert cli(*args) == 0
        assert server.count() == 15


def test_unreadable_cache_entries_are_rejudged(tmp_path, no_key_env):
    responses = write_responses(tmp_path / "r.json", 2, "u")
    out, cache = tmp_path / "checks.json", tmp_path / "cache"
    with LoopbackOpenAI() as server:
        assert cli(*run_args(server, [("m", responses)], out, cache)) == 0
        entry = next(Path(cache).rglob("*.json"))
        entry.write_text('{"verdict": ')  # torn by an OS crash
        assert cli(*run_args(server, [("m", responses)], out, cache, "--overwrite")) == 0
        assert server.count() == 3


def test_the_failure_summary_names_the_reason(tmp_path, no_key_env, capsys):
    """A judge server that is down: the summary says "connection error", not "gave up after"."""
    import socket

    from vqa_r1.judge.batch import failure_kind

    with socket.socket() as sock:  # a port with nothing listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    responses = write_responses(tmp_path / "r.json", 2)
    args = ["judge", "run", "--judge-model", "m", "--base-url", f"http://127.0.0.1:{port}/v1",
            "--responses", f"m={responses}", "--out", tmp_path / "c.json",
            "--cache-dir", tmp_path / "cache", "--max-attempts", "2", *FAST]  # fmt: skip
    assert cli(*args) == 1
    err = capsys.readouterr().err
    assert 'failures by reason: {"connection error (after retries)": 2}' in err, err
    assert failure_kind("HTTP 400: bad request") == "HTTP 400"
    assert failure_kind("invalid verdict after 3 replies: no JSON") == "invalid verdict"
    assert failure_kind(None) == "unknown"
