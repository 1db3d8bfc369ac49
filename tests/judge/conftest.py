"""Fixtures for the judge tests: the loopback server and a clean, key-free environment."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.loopback import LoopbackOpenAI


@pytest.fixture
def server() -> Iterator[LoopbackOpenAI]:
    with LoopbackOpenAI() as srv:
        yield srv


@pytest.fixture
def no_key_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No ambient key and an empty cwd, so that nothing real can ever be used."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path
