"""Shell lines that start a vLLM server inside a job script and wait until it answers.

Two jobs start one: an open LLM judge (``vllm serve``, OpenAI-compatible; vqa_r1.judge.job) and
GRPO's generation server (vLLM's own server with TRL's settings; vqa_r1.launch.distributed). Both derive the port from
the SLURM job id and move up to the next port nothing on the node listens on, so that jobs sharing
a node do not collide, and neither may let the job go on before the server answers, nor sit out
the whole deadline once the server has died (its pid is checked while waiting).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Literal

PORT_VAR = "VQA_R1_VLLM_PORT"  # the shell variable holding the port in the job script
PORT_BASE = 20000
PORT_SPAN = 10000
# health: vLLM's OpenAI API lists its models; TRL's generation server is polled where TRL's own
# client polls it (trl/generation/vllm_client.py check_server)
HEALTH_PATHS = {"vllm": "/v1/models", "trl": "/health"}
# TRL 1.16 deprecates `trl vllm-serve` (removal planned for 2.0): it only runs `vllm serve` with
# the settings below and this variable, which opens the weight-transfer endpoints TRL's client uses
TRL_SERVER_ENV = {"VLLM_SERVER_DEV_MODE": "1"}
FREE_PORT = "vqa_r1_free_port"  # the shell function of FREE_PORT_FUNCTION
FREE_PORT_FUNCTION = [
    f"{FREE_PORT}() {{  # the first port from $1 up that nothing on this node accepts connections on",
    "  local port=$1",
    "  while (: < /dev/tcp/127.0.0.1/$port) 2>/dev/null; do port=$((port + 1)); done",
    "  echo $port",
    "}",
]


def job_port(job_id: int) -> int:
    """The default port of job ``job_id``: ``20000 + job_id % 10000``."""
    return PORT_BASE + job_id % PORT_SPAN


def port_expression(port: int | None = None, base: int = PORT_BASE) -> str:
    """``port`` when given, else ``job_port`` as shell arithmetic on ``$SLURM_JOB_ID`` (0 when
    unset, e.g. under the local executor); ``base``: another range for a second port of a job."""
    if port:
        return str(int(port))
    return f"$(({int(base)} + ${{SLURM_JOB_ID:-0}} % {PORT_SPAN}))"


def free_port_expression(base: int = PORT_BASE) -> str:
    """Shell: the job's port in the range from ``base`` (``port_expression``), moved up past ports
    in use on this node; needs the lines of ``FREE_PORT_FUNCTION`` earlier in the script."""
    return f"$({FREE_PORT} {port_expression(base=base)})"


def vllm_server_lines(
    model: str,
    *,
    port: int | None = None,
    launcher: Literal["vllm", "trl"] = "vllm",
    host: str | None = "127.0.0.1",
    served_name: str | None = None,
    extra_args: Sequence[str] = (),
    gpus: str | None = None,
    env: Mapping[str, str] | None = None,
    log_file: str = '"vllm-${SLURM_JOB_ID:-0}.log"',
    startup_timeout: int = 1200,
    label: str = "vLLM server",
) -> list[str]:
    """Shell lines: export ``$VQA_R1_VLLM_PORT``, start the server in the background, stop it when
    the script exits, and wait until it answers on 127.0.0.1 (exit 1 with the log's tail if it dies
    first, or with a message after ``startup_timeout`` seconds).

    ``launcher``: ``vllm`` runs ``vllm serve MODEL`` (OpenAI-compatible, health on /v1/models);
    ``trl`` runs TRL's generation server: ``vllm serve MODEL`` with the settings TRL's trainers
    need (``trl_server_settings``) and ``VLLM_SERVER_DEV_MODE=1``, health on /health.
    ``host``: the address bound (None: the server's default, all interfaces for TRL's).
    ``served_name``: the model name the OpenAI API exposes (``vllm`` only). ``gpus``: the
    CUDA_VISIBLE_DEVICES of the server alone. ``env``: more variables of the server alone, each
    value a shell word quoted by the caller (it may use variables). ``log_file`` is a shell word,
    quoted by the caller (it may use variables, as the default does; the lines keep it in
    ``$VQA_R1_VLLM_LOG``). Every other value is quoted here. Without ``port`` the port is
    ``free_port_expression()``: the job's, or the next one free on the node.
    """
    if launcher not in HEALTH_PATHS:
        raise ValueError(f"launcher {launcher!r}: use one of {', '.join(HEALTH_PATHS)}")
    command = ["vllm", "serve", shlex.quote(model)]
    if launcher == "trl":
        env = {**(env or {}), **TRL_SERVER_ENV}
    if host:
        command += ["--host", shlex.quote(host)]
    command += ["--port", f'"${PORT_VAR}"']
    if served_name:
        if launcher != "vllm":
            raise ValueError("served_name needs launcher='vllm'")
        command += ["--served-model-name", shlex.quote(served_name)]
    command += [shlex.quote(a) for a in extra_args]
    if launcher == "trl":
        command += [shlex.quote(a) for a in trl_server_settings()]
    assignments = [f"CUDA_VISIBLE_DEVICES={shlex.quote(gpus)}"] if gpus is not None else []
    assignments += [f"{name}={value}" for name, value in (env or {}).items()]
    command = assignments + command
    health = f"http://127.0.0.1:${PORT_VAR}{HEALTH_PATHS[launcher]}"
    timeout = int(startup_timeout)
    if port:
        port_lines = [f"export {PORT_VAR}={port_expression(port)}"]
    else:
        port_lines = [*FREE_PORT_FUNCTION, f"export {PORT_VAR}={free_port_expression()}"]
    return [
        *port_lines,
        f"VQA_R1_VLLM_LOG={log_file}",
        f'{" ".join(command)} > "$VQA_R1_VLLM_LOG" 2>&1 &',
        "VQA_R1_VLLM_PID=$!",
        "trap 'kill $VQA_R1_VLLM_PID 2>/dev/null || true' EXIT",
        f"VQA_R1_VLLM_DEADLINE=$((SECONDS + {timeout}))",
        f'until curl -sf "{health}" > /dev/null 2>&1; do',
        "  if ! kill -0 $VQA_R1_VLLM_PID 2>/dev/null; then",
        f'    echo "{label} exited during start-up; last lines of $VQA_R1_VLLM_LOG:" >&2',
        '    tail -n 40 "$VQA_R1_VLLM_LOG" >&2; exit 1',
        "  fi",
        "  if [ $SECONDS -ge $VQA_R1_VLLM_DEADLINE ]; then",
        f'    echo "{label} not healthy after {timeout}s; see $VQA_R1_VLLM_LOG" >&2; exit 1',
        "  fi",
        "  sleep 1",
        "done",
        f'echo "{label} ready on port ${PORT_VAR}" >&2',
    ]


def trl_server_settings() -> list[str]:
    """The ``vllm serve`` options TRL's trainers rely on, as the installed TRL builds them
    (``trl/scripts/vllm_serve.py`` ``build_command``: the NCCL weight-transfer engine, processed
    logprobs for the importance-sampling correction, no cap on logprobs), plus
    ``--enable-scale-out``, which registers the endpoint TRL renders image prompts with. TRL adds
    that one only when the vLLM on the machine building the command is 0.30 or newer; this
    command is built on a login node that may have no vLLM, and server mode is refused below
    0.30 (launch/distributed.py), so it is always there."""
    from trl.scripts.vllm_serve import ScriptArguments, build_command

    command = build_command(ScriptArguments(model="model"), [])
    settings = command[command.index("--weight-transfer-config") :]
    return ["--enable-scale-out", *(a for a in settings if a != "--enable-scale-out")]


def mm_limits(images_per_row: int) -> dict:
    """vLLM's ``limit_mm_per_prompt`` for rows of up to ``images_per_row`` images and no video.

    Why set it: vLLM profiles memory for the most multimodal items a prompt may hold, each at the
    largest size the processor allows; the default reserves room for items the suite never sends
    (videos), and a row with more images than the limit is refused by vLLM mid-training. The
    suite's rows are checked against ``data.images_per_row`` when a split is read, so the limit
    here is what the rows hold."""
    return {"image": int(images_per_row), "video": 0}
