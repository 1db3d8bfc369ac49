"""The launcher's face: a picklable config validated up front, and the vLLM start-up lines,
dry-run tested by executing them with a fake `vllm` on PATH."""

import argparse
import dataclasses
import json
import os
import pickle
import subprocess
import textwrap

import pytest
from judge_helpers import write_responses

from vqa_r1.cli.judge_options import add_launch_arguments, config_from_args, values_from_args
from vqa_r1.errors import UserError
from vqa_r1.judge.job import (
    BASE_URL_ENV,
    JudgeJobConfig,
    config_from_values,
    run_job,
    server_setup_lines,
)
from vqa_r1.judge.options import flag_of
from vqa_r1.models.serving import job_port, port_expression, vllm_server_lines


def parse(*args):
    parser = argparse.ArgumentParser()
    add_launch_arguments(parser)
    return parser.parse_args([str(a) for a in args])


def test_config_is_picklable_and_runs(tmp_path, no_key_env):
    responses = write_responses(tmp_path / "r.json", 4)
    config = config_from_args(parse("--backend", "heuristic", "--responses", f"m={responses}",
                                    "--out", tmp_path / "o.json"))  # fmt: skip
    clone = pickle.loads(pickle.dumps(config))
    assert isinstance(clone, JudgeJobConfig) and clone == config
    assert run_job(clone) == 0
    assert len(json.loads((tmp_path / "o.json").read_text())) == 4


@pytest.mark.parametrize(
    "args, message",
    [
        (["--responses", "base"], "NAME=FILE"),
        (["--responses", "base=/nonexistent/r.json"], "/nonexistent/r.json: file not found"),
        (["--responses", "m={r}", "--concurrency", "0"], "--concurrency"),
        (["--responses", "m={r}", "--limit", "0"], "--limit: must be at least 1"),
        (["--responses", "m={r}", "--json-attempts", "0"], "--json-attempts: must be at least 1"),
        (["--responses", "m={r}", "--prompt", "nope"], "--prompt nope"),
        (["--responses", "m={noclaim}"], "--questions"),
        (["--responses", "m={r}", "--judge-model", ""], "--judge-model"),
        (["--responses", "m={r}", "--vllm-model", "Qwen/Q", "--base-url", "http://x/v1"], "--base-url"),
        (["--responses", "m={r}", "--out", "{dir}"], "is a directory"),
    ],
)  # fmt: skip
def test_config_errors_name_the_file_or_field(args, message, tmp_path, no_key_env, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-dummy-for-validation")
    r = write_responses(tmp_path / "r.json", 2)
    noclaim = tmp_path / "noclaim.json"
    noclaim.write_text(
        json.dumps([{"true_response": "True", "predicted_response": "Answer: True"}])
    )
    fmt = {"r": r, "noclaim": noclaim, "dir": tmp_path}
    argv = [a.format(**fmt) for a in args]
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "o.json")]
    if "--judge-model" not in argv and "--vllm-model" not in argv:
        argv += ["--judge-model", "o4-mini"]
    with pytest.raises(UserError, match=message):
        config_from_args(parse(*argv))


def test_no_server_lines_without_vllm(tmp_path):
    assert server_setup_lines(JudgeJobConfig(responses=[], out=str(tmp_path / "o.json"))) == []


FAKE_VLLM = """\
#!{python}
# stands in for `vllm serve MODEL --host H --port P ...`: answers 503 to the first /v1/models (a
# server still loading its model), then the model list; every answer is logged to {polls!r}
import http.server, sys, json
args = sys.argv
assert args[1] == "serve", args
with open({record!r}, "w") as f:
    json.dump(args, f)
if {die}:
    print("CUDA out of memory", file=sys.stderr)
    sys.exit(3)
port = int(args[args.index("--port") + 1])
answered = []
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        status = 503 if not answered else 200
        answered.append(status)
        with open({polls!r}, "a") as f:
            f.write(f"{{status}}\\n")
        body = json.dumps({{"data": [{{"id": args[args.index("--served-model-name") + 1]}}]}}).encode()
        if status != 200:
            body = b""
        self.send_response(status); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def _script_with_fake_vllm(tmp_path, die, **overrides):
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    record = tmp_path / "vllm_args.json"
    polls = tmp_path / "vllm_polls.txt"
    fake = bin_dir / "vllm"
    fake.write_text(
        FAKE_VLLM.format(python=sys.executable, record=str(record), polls=str(polls), die=die)
    )
    fake.chmod(0o755)
    config = JudgeJobConfig(
        responses=[("m", "r.json")],
        out=str(tmp_path / "run" / "checks.json"),
        vllm_model="Qwen/Qwen2.5-7B-Instruct",
        vllm_served_name="judge",
        vllm_args=["--max-model-len=8192"],
        vllm_startup_timeout=20,
        **overrides,
    )
    lines = server_setup_lines(config)
    script = "\n".join(
        [
            "set -u",
            *lines,
            f'echo "URL=${BASE_URL_ENV}"',
            'curl -sf "$VQA_R1_JUDGE_BASE_URL/models"',
        ]
    )
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "4242"}
    proc = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    return proc, record, config


def test_vllm_lines_start_the_server_and_wait_for_health(tmp_path):
    proc, record, config = _script_with_fake_vllm(tmp_path, die=False)
    assert proc.returncode == 0, proc.stderr
    port = 20000 + 4242 % 10000
    assert f"URL=http://127.0.0.1:{port}/v1" in proc.stdout
    assert '"id": "judge"' in proc.stdout  # the server answered /v1/models before we went on
    args = json.loads(record.read_text())
    assert args[1:3] == ["serve", "Qwen/Qwen2.5-7B-Instruct"] and "--max-model-len=8192" in args
    assert "ready" in proc.stderr
    assert config.model_name == "judge"
    # the set-up lines polled past the "still loading" 503 before going on
    statuses = (tmp_path / "vllm_polls.txt").read_text().split()
    assert statuses[0] == "503" and statuses[1:] == ["200", "200"]  # set-up, then the script's


def test_the_library_takes_plain_values(tmp_path, no_key_env):
    """judge.job needs no parser: plain values give the config the flags give."""
    responses = write_responses(tmp_path / "r.json", 2)
    out = tmp_path / "o.json"
    config = config_from_values(
        {"responses": [f"m={responses}"], "out": str(out), "backend": "heuristic", "limit": 1}
    )
    assert config == config_from_args(parse("--responses", f"m={responses}", "--out", out,
                                            "--backend", "heuristic", "--limit", "1"))  # fmt: skip
    assert config.responses == [("m", str(responses))]
    with pytest.raises(UserError, match="--limit: must be at least 1"):
        config_from_values(
            {"responses": [f"m={responses}"], "out": str(out), "backend": "heuristic", "limit": 0}
        )


def test_vllm_lines_fail_fast_when_the_server_dies(tmp_path):
    proc, _, _ = _script_with_fake_vllm(tmp_path, die=True, vllm_port=18123)
    assert proc.returncode == 1
    assert "exited during start-up" in proc.stderr and "CUDA out of memory" in proc.stderr


def test_vllm_lines_are_shell_safe(tmp_path):
    config = JudgeJobConfig(responses=[], out=str(tmp_path / "o.json"),
                            vllm_model="model; rm -rf /", vllm_port=8001)  # fmt: skip
    text = "\n".join(server_setup_lines(config))
    assert "'model; rm -rf /'" in text
    subprocess.run(["bash", "-n", "-c", text], check=True)  # syntax check


def test_run_job_uses_the_exported_base_url(tmp_path, no_key_env, monkeypatch):
    from benchmarks.loopback import LoopbackOpenAI

    responses = write_responses(tmp_path / "r.json", 3)
    with LoopbackOpenAI() as server:
        monkeypatch.setenv(BASE_URL_ENV, server.base_url)
        config = config_from_args(parse("--vllm-model", "Qwen/Q", "--responses", f"m={responses}",
                                        "--out", tmp_path / "o.json", "--cache-dir", tmp_path / "c"))  # fmt: skip
        assert run_job(config) == 0
        assert server.count() == 3
        assert {r.authorization for r in server.requests} == {"Bearer EMPTY"}
    records = json.loads((tmp_path / "o.json").read_text())
    assert {r["judge_model"] for r in records} == {"Qwen/Q"}


def test_help_lists_launch_options():
    parser = argparse.ArgumentParser()
    add_launch_arguments(parser)
    text = parser.format_help()
    for option in ("--vllm-model", "--responses", "--max-cost", "--dry-run", "--concurrency"):
        assert option in text
    assert textwrap.dedent(text)


def test_flags_are_generated_from_the_config_fields(monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # one line per option: help texts are not wrapped
    parser = argparse.ArgumentParser()
    add_launch_arguments(parser)
    text = parser.format_help()
    defaults = JudgeJobConfig(responses=[], out="o.json")
    values = values_from_args(parse("--responses", "m=r.json", "--out", "o.json"), JudgeJobConfig)
    for field in dataclasses.fields(JudgeJobConfig):
        flag = flag_of(field)
        if flag is None:
            assert field.name == "progress_every"  # not a flag; the default is kept
        else:
            assert flag in text and field.metadata["help"] in text, field.name
        if field.name not in ("responses", "out"):
            assert values[field.name] == getattr(defaults, field.name), field.name
    switched = parse("--responses", "m=r.json", "--out", "o.json", "--no-cache", "--no-json-mode",
                     "--dry-run", "--backend", "heuristic", "--limit", "3", "--timeout", "2.5",
                     "--vllm-arg=--a=1", "--vllm-arg=--b", "--vllm-port", "9000")  # fmt: skip
    values = values_from_args(switched, JudgeJobConfig)
    assert (values["use_cache"], values["json_mode"], values["dry_run"]) == (False, False, True)
    assert (values["backend"], values["limit"], values["timeout"]) == ("heuristic", 3, 2.5)
    assert (values["vllm_args"], values["vllm_port"]) == (["--a=1", "--b"], 9000)
    with pytest.raises(SystemExit):
        parse("--responses", "m=r.json", "--out", "o.json", "--backend", "nope")


def test_run_arguments_leave_out_the_vllm_group():
    parser = argparse.ArgumentParser()
    from vqa_r1.cli.judge_options import add_run_arguments

    add_run_arguments(parser)
    text = parser.format_help()
    assert "--responses" in text and "--no-cache" in text and "--vllm" not in text


def test_port_formula_is_one_function():
    assert job_port(4242) == 24242 and job_port(123456) == 23456
    for job_id in ("4242", "123456"):
        shell = subprocess.run(
            ["bash", "-c", f"echo {port_expression()}"],
            env={**os.environ, "SLURM_JOB_ID": job_id},
            capture_output=True,
            text=True,
            check=True,
        )
        assert int(shell.stdout) == job_port(int(job_id))
    assert port_expression(8001) == "8001"


def test_trl_generation_server_lines():
    # GRPO's server mode: TRL's server on the last GPU, reachable from other nodes (no --host)
    lines = vllm_server_lines("Qwen/Qwen2.5-VL-7B-Instruct", launcher="trl", host=None, gpus="3",
                              extra_args=["--gpu-memory-utilization", "0.9"])  # fmt: skip
    text = "\n".join(lines)
    assert (
        "CUDA_VISIBLE_DEVICES=3 VLLM_SERVER_DEV_MODE=1 vllm serve Qwen/Qwen2.5-VL-7B-Instruct "
        '--port "$VQA_R1_VLLM_PORT" --gpu-memory-utilization 0.9 --enable-scale-out '
        '--weight-transfer-config \'{"backend": "nccl"}\' --logprobs-mode processed_logprobs '
        "--max-logprobs -1 >" in text
    )  # vLLM's own server with TRL's settings: `trl vllm-serve` is deprecated in TRL 1.16
    assert '$VQA_R1_VLLM_PORT/health"' in text and "--host" not in text  # where TRL's client polls
    subprocess.run(["bash", "-n", "-c", text], check=True)
    with pytest.raises(ValueError, match="served_name"):
        vllm_server_lines("m", launcher="trl", served_name="x")
