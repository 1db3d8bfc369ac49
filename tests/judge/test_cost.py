import json

import pytest
from judge_helpers import cli, write_responses

from benchmarks.loopback import LoopbackOpenAI
from vqa_r1.errors import UserError
from vqa_r1.judge.cost import Budget, TokenCounter, price_for


def test_prices():
    assert price_for("o4-mini", None, None) == (1.10, 4.40)
    assert price_for("o4-mini-2025-04-16", None, None) == (1.10, 4.40)
    assert price_for("Qwen/Qwen2.5-7B-Instruct", None, None) is None
    assert price_for("anything", 2.0, None) == (2.0, 0.0)


def test_budget_reserves_before_and_settles_after():
    budget = Budget(prices=(1.0, 2.0), max_cost=0.01)  # $ per million tokens
    estimate = budget.cost(1000, 1000)  # 0.003
    assert budget.reserve(estimate) and budget.reserve(estimate) and budget.reserve(estimate)
    assert not budget.reserve(estimate)  # 0.012 would exceed 0.01 while three are in flight
    assert budget.exhausted and not budget.reserve(0.0)  # closed for good
    budget.settle(estimate, 1000, 500)
    assert budget.spent == pytest.approx(0.002) and budget.reserved == pytest.approx(0.006)
    with pytest.raises(UserError, match="--price-in"):
        Budget(prices=None, max_cost=1.0)


def test_token_counter_estimates():
    counter = TokenCounter("o4-mini")
    assert counter.count("x" * 400) in range(50, 150)
    assert counter.count_messages([{"role": "user", "content": "hello"}]) > counter.count("hello")


def test_dry_run_estimates_without_a_key_or_a_request(tmp_path, no_key_env, caplog):
    responses = write_responses(tmp_path / "r.json", 10, "d")
    out = tmp_path / "out.json"
    with LoopbackOpenAI() as server:
        code = cli("judge", "run", "--judge-model", "o4-mini", "--base-url", server.base_url,
                   "--responses", f"m={responses}", "--out", out, "--cache-dir", tmp_path / "c",
                   "--dry-run")  # fmt: skip
        assert code == 0 and server.count() == 0
    assert not out.exists()
    # against api.openai.com too: a dry run needs no key
    assert cli("judge", "run", "--judge-model", "o4-mini", "--responses", f"m={responses}",
               "--out", out, "--cache-dir", tmp_path / "c", "--dry-run") == 0  # fmt: skip


def test_dry_run_counts_cached_items(tmp_path, no_key_env, capsys):
    responses = write_responses(tmp_path / "r.json", 6, "dc")
    args = ["--judge-model", "gpt-4o-mini", "--responses", f"m={responses}",
            "--out", tmp_path / "o.json", "--cache-dir", tmp_path / "c"]  # fmt: skip
    with LoopbackOpenAI() as server:
        assert cli("judge", "run", *args, "--base-url", server.base_url, "--limit", "4") == 0
        assert cli("judge", "run", *args, "--base-url", server.base_url, "--dry-run") == 0
    err = capsys.readouterr().err
    assert "6 items, 4 cached, 2 to request" in err and "$" in err


def test_max_cost_stops_requesting_and_records_skipped_items(tmp_path, no_key_env):
    responses = write_responses(tmp_path / "r.json", 40, "mc")
    out = tmp_path / "out.json"
    # prices make each request cost about $0.001 (estimate with 300 output tokens ~ $0.0014)
    with LoopbackOpenAI() as server:
        code = cli("judge", "run", "--judge-model", "priced", "--base-url", server.base_url,
                   "--responses", f"m={responses}", "--out", out, "--cache-dir", tmp_path / "c",
                   "--price-in", "2", "--price-out", "2", "--max-cost", "0.01",
                   "--concurrency", "4")  # fmt: skip
        requests = server.count()
    records = json.loads(out.read_text())
    assert code == 1
    spent = sum(r["cost_usd"] for r in records)
    assert 0 < spent <= 0.01
    skipped = [r for r in records if r["status"] == "skipped"]
    assert skipped and all("--max-cost" in r["error"] for r in skipped)
    assert requests == len(records) - len(skipped) < 40


def test_max_cost_needs_a_price(tmp_path, no_key_env, capsys):
    responses = write_responses(tmp_path / "r.json", 2)
    assert cli("judge", "run", "--judge-model", "my-open-model", "--base-url", "http://127.0.0.1:9/v1",
               "--responses", f"m={responses}", "--out", tmp_path / "o.json",
               "--max-cost", "1") == 2  # fmt: skip
    assert "--price-in" in capsys.readouterr().err
