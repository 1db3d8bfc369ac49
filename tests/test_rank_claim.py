"""Other ranks create nothing in a run folder before rank 0 has claimed it (claims.py).

Found with the two-process ZeRO-3 test (tests/test_deepspeed_cpu.py) under load: rank 1 passed its
read-only check of the empty folder and made ``checkpoints/`` before rank 0 checked, and rank 0
refused the folder ("holds files this suite did not write (checkpoints)")."""

from __future__ import annotations

import threading
import time

import pytest

from vqa_r1 import claims
from vqa_r1.io import atomic_write_json


@pytest.fixture
def rank1(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")


def test_another_rank_waits_for_rank_zeros_marker(tmp_path, rank1):
    root = tmp_path / "run"
    with claims.writing(root, "grpo", {}) as state:  # rank 1's check: read-only
        assert state == claims.NEW and not root.exists()
        claimed_at = []

        def rank0_claims():
            time.sleep(0.5)
            root.mkdir()
            atomic_write_json(root / claims.MARKER, {"verb": "grpo", "settings": {}})
            claimed_at.append(time.monotonic())

        thread = threading.Thread(target=rank0_claims)
        thread.start()
        claims.wait_for_claim(root, timeout_s=10)
        returned_at = time.monotonic()
        thread.join()
    assert claimed_at and returned_at >= claimed_at[0]


def test_another_rank_gives_up_when_nothing_claims_the_folder(tmp_path, rank1):
    with pytest.raises(TimeoutError, match="claim of"):
        claims.wait_for_claim(tmp_path / "run", timeout_s=0.3)


def test_rank_zero_and_a_folder_already_ours_do_not_wait(tmp_path, monkeypatch):
    claims.wait_for_claim(tmp_path / "new", timeout_s=0)  # no RANK: rank 0
    claims.claim(tmp_path / "ours", "grpo", {})
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    claims.wait_for_claim(tmp_path / "ours", timeout_s=0)
