"""Acceptance: no API key appears in any file or log the judge writes.

The key is planted in the environment (and, separately, in a .env file), the server echoes the
Authorization header back in error bodies and one judge reply quotes the key, and then every file
under the run's directories, the log file and the captured stdout/stderr are searched.
"""

import json
import logging
import pickle

import pytest
from judge_helpers import cli, write_responses

from benchmarks.loopback import LoopbackOpenAI

KEY = "sk-planted-SECRET-7f3a9c1e5b2d4068"


class Leaky(LoopbackOpenAI):
    """Echoes the Authorization header in 500 bodies and quotes it in a bad reply."""

    def _respond(self, handler, body, user, fault):
        if fault == "leak_reply":
            auth = handler.headers.get("Authorization", "")
            self._send_json(handler, 200, self._completion(body, f"cannot comply, {auth}"))
        else:
            super()._respond(handler, body, user, fault)


def plan(n, claim):
    if claim.endswith("0 is left of the dog."):
        return "leak_reply"  # index 0 and 10: always, so they fail with the raw reply recorded
    return ["echo_auth", None][n % 2]


def _files_containing(root, needle):
    hits = []
    for path in root.rglob("*"):
        if path.is_file() and needle.encode() in path.read_bytes():
            hits.append(path)
    return hits


@pytest.mark.parametrize("source", ["environment", "dotenv"])
def test_planted_key_never_written(source, tmp_path, no_key_env, monkeypatch, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    if source == "environment":
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
    else:
        (no_key_env / ".env").write_text(f"OPENAI_API_KEY={KEY}\n")
    runs = tmp_path / "runs"
    responses = write_responses(tmp_path / "r.json", 12, "s")
    with Leaky(script=plan) as server:
        code = cli("judge", "run", "--judge-model", "loopback", "--base-url",
                   server.base_url.replace("127.0.0.1", "localhost"),
                   "--responses", f"m={responses}", "--out", runs / "checks.json",
                   "--cache-dir", runs / "cache", "--log-file", runs / "judge.log",
                   "--backoff-base", "0.01", "--json-attempts", "2")  # fmt: skip
        sent = {r.authorization for r in server.requests}
    assert sent == {f"Bearer {KEY}"}, "the planted key was not the one used"
    assert code == 1  # the leaky replies fail
    records = json.loads((runs / "checks.json").read_text())
    leaked = [r for r in records if r["status"] == "failed"]
    assert leaked and all("[REDACTED]" in r["raw_reply"] for r in leaked)
    assert (runs / "judge.log").read_text().strip()
    assert _files_containing(runs, KEY) == []
    assert _files_containing(tmp_path, KEY) == ([no_key_env / ".env"] if source == "dotenv" else [])
    captured = capsys.readouterr()
    assert KEY not in captured.out + captured.err
    assert KEY not in caplog.text


def test_missing_key_is_a_user_error_naming_the_variable(tmp_path, no_key_env, capsys):
    responses = write_responses(tmp_path / "r.json", 1)
    code = cli("judge", "run", "--judge-model", "o4-mini", "--responses", f"m={responses}",
               "--out", tmp_path / "o.json", "--api-key-env", "MY_JUDGE_KEY")  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert "MY_JUDGE_KEY" in err and ".env" in err


def test_config_holds_no_secret(tmp_path, no_key_env, monkeypatch):
    from argparse import ArgumentParser

    from vqa_r1.cli.judge_options import add_launch_arguments, config_from_args

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    responses = write_responses(tmp_path / "r.json", 1)
    parser = ArgumentParser()
    add_launch_arguments(parser)
    config = config_from_args(parser.parse_args(
        ["--judge-model", "o4-mini", "--responses", f"m={responses}", "--out", str(tmp_path / "o.json")]
    ))  # fmt: skip
    assert KEY.encode() not in pickle.dumps(config)
    assert KEY not in repr(config)
