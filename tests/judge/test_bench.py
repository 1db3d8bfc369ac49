"""Acceptance: concurrency 16 gives at least 8x the throughput of concurrency 1 at 100 ms."""

import importlib.util

from judge_helpers import REPO


def _bench():
    spec = importlib.util.spec_from_file_location(
        "bench_judge", REPO / "scripts" / "bench_judge.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_concurrency_16_is_at_least_8x_concurrency_1(capsys):
    bench = _bench()
    args = ["--latency", "0.1", "--items-serial", "16", "--items-parallel", "160"]
    ratio = bench.main(args)
    if ratio < 8:  # one re-measurement: the machine is shared with other test suites
        ratio = max(ratio, bench.main(args))
    assert "ratio" in capsys.readouterr().out
    assert ratio >= 8, f"concurrency 16 only {ratio:.1f}x concurrency 1"
