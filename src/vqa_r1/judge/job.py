"""A judge run as a job: one picklable config, validated on the login node, run on any node.

``vqa-r1 judge run`` and ``python slurm/launch.py judge`` share this module so the two faces
cannot drift. The config holds only the *name* of the environment variable with the API key, never
the key: configs are pickled into job folders and printed by dry runs. With ``--vllm-model`` the
job script first starts an OpenAI-compatible vLLM server on the job's GPU and waits for it
(``server_setup_lines``), so an open judge costs nothing but GPU time.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from vqa_r1.errors import UserError
from vqa_r1.judge.batch import BatchJudge, BatchReport
from vqa_r1.judge.cache import VerdictCache, atomic_write_text, default_cache_dir
from vqa_r1.judge.client import OpenAIJudgeClient, Redactor, RetryPolicy
from vqa_r1.judge.cost import DEFAULT_OUTPUT_TOKENS, Budget, price_for
from vqa_r1.judge.heuristic import HEURISTIC_ID
from vqa_r1.judge.prompts import load_prompt
from vqa_r1.judge.responses import JudgeItem, load_items, load_questions, parse_named_files

log = logging.getLogger("vqa_r1.judge")

BACKENDS = ("openai", "heuristic")
BASE_URL_ENV = "VQA_R1_JUDGE_BASE_URL"  # exported by the vLLM set-up lines inside a job
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}


@dataclass
class JudgeJobConfig:
    """Everything a judge run needs; no secret (the key is read from the environment at run time)."""

    responses: list[tuple[str, str]]
    out: str
    judge_model: str | None = None
    backend: str = "openai"
    base_url: str | None = None
    prompt: str = "taxonomy"
    temperature: float | None = None
    concurrency: int = 8
    limit: int | None = None
    questions: str | None = None
    cache_dir: str | None = None
    use_cache: bool = True
    timeout: float = 120.0
    max_attempts: int = 6
    json_attempts: int = 3
    backoff_base: float = 1.0
    backoff_max: float = 60.0
    max_cost: float | None = None
    price_in: float | None = None
    price_out: float | None = None
    est_output_tokens: int = DEFAULT_OUTPUT_TOKENS
    max_tokens: int | None = None
    json_mode: bool = True
    dry_run: bool = False
    api_key_env: str = "OPENAI_API_KEY"
    env_file: str = ".env"
    log_file: str | None = None
    progress_every: float = 10.0
    vllm_model: str | None = None
    vllm_served_name: str | None = None
    vllm_port: int | None = None
    vllm_args: list[str] = field(default_factory=list)
    vllm_startup_timeout: int = 1200

    @property
    def model_name(self) -> str:
        if self.backend == "heuristic":
            return "heuristic"
        if self.vllm_model:
            return self.judge_model or self.vllm_served_name or self.vllm_model
        return self.judge_model or ""


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``vqa-r1 judge run`` (also part of the launcher's ``judge``)."""
    parser.add_argument("--responses", action="append", required=True, metavar="NAME=FILE",
                        help="a generated_responses.json (or JSONL) per model; repeat")  # fmt: skip
    parser.add_argument("--out", required=True, help="alignment checks JSON to write")
    parser.add_argument("--judge-model", help="judge model name at the endpoint, e.g. o4-mini")
    parser.add_argument("--backend", choices=BACKENDS, default="openai",
                        help="openai: any OpenAI-compatible endpoint; heuristic: offline rules")  # fmt: skip
    parser.add_argument("--base-url", help="OpenAI-compatible endpoint (default: OpenAI's)")
    parser.add_argument("--prompt", default="taxonomy",
                        help="taxonomy|simple (newest version), NAME_vN, or a template file")  # fmt: skip
    parser.add_argument("--temperature", type=float, default=None,
                        help="sent only when given (o-series models accept only their default)")  # fmt: skip
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight")
    parser.add_argument("--limit", type=int, default=None, help="first N items of each model")
    parser.add_argument("--questions", help="claims by index when the responses carry none "
                        "(the study's checks file, a dataset export with 'caption', a list)")  # fmt: skip
    parser.add_argument("--cache-dir", help=f"verdict cache (default {default_cache_dir()})")
    parser.add_argument("--no-cache", dest="use_cache", action="store_false")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per request")
    parser.add_argument("--max-attempts", type=int, default=6,
                        help="requests per item on 429/5xx/timeouts")  # fmt: skip
    parser.add_argument("--json-attempts", type=int, default=3,
                        help="requests per item whose reply is not a valid verdict")  # fmt: skip
    parser.add_argument("--backoff-base", type=float, default=1.0, help="first backoff, seconds")
    parser.add_argument("--backoff-max", type=float, default=60.0, help="longest backoff")
    parser.add_argument("--max-cost", type=float, default=None, help="stop requesting at USD")
    parser.add_argument("--price-in", type=float, default=None, help="USD per 1M input tokens")
    parser.add_argument("--price-out", type=float, default=None, help="USD per 1M output tokens")
    parser.add_argument("--est-output-tokens", type=int, default=DEFAULT_OUTPUT_TOKENS,
                        help="output tokens assumed per request by --dry-run and --max-cost")  # fmt: skip
    parser.add_argument("--max-tokens", type=int, default=None, help="max_completion_tokens")
    parser.add_argument("--no-json-mode", dest="json_mode", action="store_false",
                        help="do not send response_format=json_object (servers without it)")  # fmt: skip
    parser.add_argument("--dry-run", action="store_true", help="estimate tokens and cost only")
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY",
                        help="environment variable (or .env entry) holding the API key")  # fmt: skip
    parser.add_argument("--env-file", default=".env", help="dotenv file read for the key")
    parser.add_argument("--log-file", help="also log here (secrets are redacted)")


def add_launch_arguments(parser: argparse.ArgumentParser) -> None:
    """``judge run``'s options plus an optional vLLM judge server started inside the job."""
    add_run_arguments(parser)
    group = parser.add_argument_group("open judge on the job's GPU (vLLM)")
    group.add_argument("--vllm-model", help="HF model id or path served by vLLM in the job")
    group.add_argument("--vllm-served-name", help="name the server exposes (default: the model)")
    group.add_argument("--vllm-port", type=int, default=None,
                       help="default: 20000 + SLURM_JOB_ID %% 10000, to avoid clashes")  # fmt: skip
    group.add_argument("--vllm-arg", dest="vllm_args", action="append", default=[],
                       help="extra argument for `vllm serve`, e.g. --vllm-arg=--max-model-len=8192")  # fmt: skip
    group.add_argument("--vllm-startup-timeout", type=int, default=1200,
                       help="seconds to wait for the server's /v1/models")  # fmt: skip


def _is_local(url: str | None) -> bool:
    return bool(url) and (urlparse(url).hostname or "") in LOCAL_HOSTS


def config_from_args(args: argparse.Namespace) -> JudgeJobConfig:
    """Build and validate a config where mistakes are cheap to fix (the login node)."""
    pairs = parse_named_files(args.responses, "--responses")
    config = JudgeJobConfig(
        responses=[(name, str(path)) for name, path in pairs],
        out=args.out,
        judge_model=args.judge_model,
        backend=args.backend,
        base_url=args.base_url,
        prompt=args.prompt,
        temperature=args.temperature,
        concurrency=args.concurrency,
        limit=args.limit,
        questions=args.questions,
        cache_dir=args.cache_dir,
        use_cache=args.use_cache,
        timeout=args.timeout,
        max_attempts=args.max_attempts,
        json_attempts=args.json_attempts,
        backoff_base=args.backoff_base,
        backoff_max=args.backoff_max,
        max_cost=args.max_cost,
        price_in=args.price_in,
        price_out=args.price_out,
        est_output_tokens=args.est_output_tokens,
        max_tokens=args.max_tokens,
        json_mode=args.json_mode,
        dry_run=args.dry_run,
        api_key_env=args.api_key_env,
        env_file=args.env_file,
        log_file=args.log_file,
        vllm_model=getattr(args, "vllm_model", None),
        vllm_served_name=getattr(args, "vllm_served_name", None),
        vllm_port=getattr(args, "vllm_port", None),
        vllm_args=list(getattr(args, "vllm_args", None) or []),
        vllm_startup_timeout=getattr(args, "vllm_startup_timeout", 1200),
    )
    validate(config)
    return config


def validate(config: JudgeJobConfig) -> None:
    if config.backend not in BACKENDS:
        raise UserError(f"--backend {config.backend}: use one of {', '.join(BACKENDS)}")
    if config.backend == "openai" and not config.model_name:
        raise UserError("--judge-model is required (e.g. --judge-model o4-mini)")
    if config.concurrency < 1:
        raise UserError("--concurrency must be at least 1")
    if config.limit is not None and config.limit < 1:
        raise UserError("--limit must be at least 1")
    if config.max_attempts < 1 or config.json_attempts < 1:
        raise UserError("--max-attempts and --json-attempts must be at least 1")
    if config.max_cost is not None and config.max_cost <= 0:
        raise UserError("--max-cost must be positive")
    if config.vllm_model and config.backend != "openai":
        raise UserError("--vllm-model needs --backend openai")
    if config.vllm_model and config.base_url:
        raise UserError("--vllm-model starts its own server: drop --base-url")
    if Path(config.out).is_dir():
        raise UserError(f"--out {config.out}: is a directory; give a .json file path")
    load_prompt(config.prompt)
    load_all_items(config)  # every file parses and every item has a claim
    if config.backend == "openai":
        price = price_for(config.model_name, config.price_in, config.price_out)
        if config.max_cost is not None and price is None:
            raise UserError(
                f"--max-cost: no known price for judge model {config.model_name!r}; "
                "pass --price-in and --price-out (USD per million tokens)"
            )
        if not config.dry_run and not config.vllm_model and not _is_local(config.base_url):
            resolve_api_key(config)


def resolve_api_key(config: JudgeJobConfig) -> str:
    """From the environment, else the dotenv file; a loopback server gets a placeholder."""
    key = os.environ.get(config.api_key_env)
    if not key and config.env_file and Path(config.env_file).is_file():
        try:
            from dotenv import dotenv_values
        except ImportError:
            raise UserError(
                f"{config.env_file} exists but python-dotenv is not installed: "
                "pip install python-dotenv, or export the key"
            ) from None
        key = dotenv_values(config.env_file).get(config.api_key_env)
    if key:
        return key
    if config.vllm_model or _is_local(config.base_url):
        return "EMPTY"
    raise UserError(
        f"no API key: set {config.api_key_env} in the environment or in {config.env_file} "
        "(never on the command line)"
    )


def load_all_items(config: JudgeJobConfig) -> list[JudgeItem]:
    """Items of every model, interleaved by index (base, grpo, base, ...) like the study's files."""
    questions = load_questions(config.questions) if config.questions else None
    order = {name: i for i, (name, _) in enumerate(config.responses)}
    items: list[JudgeItem] = []
    for name, path in config.responses:
        loaded = load_items(path, name, questions)
        items.extend(loaded[: config.limit] if config.limit else loaded)
    items.sort(key=lambda it: (it.index, order[it.model]))
    return items


def _redacting_filter(redact: Redactor) -> logging.Filter:
    class _Filter(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            record.msg = redact(record.getMessage())
            record.args = ()
            return True

    return _Filter()


def _setup_logging(config: JudgeJobConfig, redact: Redactor) -> list[logging.Handler]:
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if config.log_file:
        Path(config.log_file).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(config.log_file, encoding="utf-8"))
    for handler in handlers:
        handler.setFormatter(logging.Formatter("%(asctime)s judge: %(message)s", "%H:%M:%S"))
        handler.addFilter(_redacting_filter(redact))
        log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    return handlers


def build_batch(config: JudgeJobConfig, api_key: str | None) -> BatchJudge:
    template = load_prompt(config.prompt)
    model = config.model_name
    prices = (
        None
        if config.backend == "heuristic"
        else price_for(model, config.price_in, config.price_out)
    )
    cache = None
    if config.use_cache and config.backend == "openai":
        cache = VerdictCache(Path(config.cache_dir) if config.cache_dir else default_cache_dir())
    base_url = config.base_url
    if config.vllm_model:
        base_url = os.environ.get(BASE_URL_ENV) or f"http://127.0.0.1:{config.vllm_port or 8000}/v1"
    policy = RetryPolicy(
        max_attempts=config.max_attempts,
        json_attempts=config.json_attempts,
        base_delay=config.backoff_base,
        max_delay=config.backoff_max,
    )

    def factory() -> OpenAIJudgeClient:
        return OpenAIJudgeClient(
            model,
            base_url,
            api_key or "EMPTY",
            temperature=config.temperature,
            timeout=config.timeout,
            policy=policy,
            json_mode=config.json_mode,
            max_tokens=config.max_tokens,
            redact=Redactor([api_key or ""]),
        )

    return BatchJudge(
        template=template,
        judge_model=model if config.backend == "openai" else "heuristic",
        cache=cache,
        budget=Budget(prices=prices, max_cost=config.max_cost),
        temperature=config.temperature,
        concurrency=config.concurrency,
        est_output_tokens=config.est_output_tokens,
        progress_every=config.progress_every,
        client_factory=factory if config.backend == "openai" else None,
    )


def run_job(config: JudgeJobConfig) -> int:
    """0 when every item is judged, 1 when some failed or were skipped (all are in --out)."""
    validate_paths_only = config.dry_run or config.backend == "heuristic"
    api_key = None if validate_paths_only else resolve_api_key(config)
    redact = Redactor([api_key] if api_key else [])
    handlers = _setup_logging(config, redact)
    try:
        items = load_all_items(config)
        batch = build_batch(config, api_key)
        if config.dry_run:
            if config.backend == "heuristic":
                log.info("dry run: %d items for the offline heuristic judge (free)", len(items))
            else:
                log.info(batch.estimate(items).describe(batch.judge_model))
            return 0
        if config.backend == "heuristic":
            report = batch.run_heuristic(items)
            for record in report.records:
                record["prompt"] = HEURISTIC_ID
        else:
            report = batch.run(items)
        write_records(config.out, report, redact)
        log.info("wrote %s: %s", config.out, report.summary())
        if report.failures:
            log.info("failures by reason: %s", json.dumps(report.failures))
        if report.aborted:
            raise UserError(f"judge aborted: {report.aborted} (judged items are cached)")
        return 0 if report.failed == 0 and report.skipped == 0 else 1
    finally:
        for handler in handlers:
            log.removeHandler(handler)
            handler.close()


def write_records(out: str, report: BatchReport, redact: Redactor) -> None:
    text = json.dumps(report.records, indent=2, ensure_ascii=False)
    atomic_write_text(Path(out), redact(text))


def server_setup_lines(config: JudgeJobConfig) -> list[str]:
    """Shell lines for the job script: start ``vllm serve`` in the background, stop it when the
    job ends, and wait until ``/v1/models`` answers (or fail fast if the server dies)."""
    if not config.vllm_model:
        return []
    served = config.vllm_served_name or config.judge_model or config.vllm_model
    out_dir = Path(config.out).resolve().parent
    server_log = shlex.quote(str(out_dir / "vllm_judge_server.log"))
    port = str(config.vllm_port) if config.vllm_port else "$((20000 + ${SLURM_JOB_ID:-0} % 10000))"
    extra = " ".join(shlex.quote(a) for a in config.vllm_args)
    serve = (
        f'vllm serve {shlex.quote(config.vllm_model)} --host 127.0.0.1 --port "$VQA_R1_VLLM_PORT" '
        f"--served-model-name {shlex.quote(served)}"
    )
    if extra:
        serve += f" {extra}"
    timeout = int(config.vllm_startup_timeout)
    return [
        "# open judge: an OpenAI-compatible vLLM server on this node, stopped when the job ends",
        f"mkdir -p {shlex.quote(str(out_dir))}",
        f"VQA_R1_VLLM_PORT={port}",
        f'export {BASE_URL_ENV}="http://127.0.0.1:$VQA_R1_VLLM_PORT/v1"',
        f"{serve} > {server_log} 2>&1 &",
        "VQA_R1_VLLM_PID=$!",
        "trap 'kill $VQA_R1_VLLM_PID 2>/dev/null || true' EXIT",
        f"VQA_R1_VLLM_DEADLINE=$((SECONDS + {timeout}))",
        f'until curl -sf "${BASE_URL_ENV}/models" > /dev/null 2>&1; do',
        "  if ! kill -0 $VQA_R1_VLLM_PID 2>/dev/null; then",
        f'    echo "vLLM judge server exited during start-up; last lines of {server_log}:" >&2',
        f"    tail -n 40 {server_log} >&2; exit 1",
        "  fi",
        "  if [ $SECONDS -ge $VQA_R1_VLLM_DEADLINE ]; then",
        f'    echo "vLLM judge server not healthy after {timeout}s; see {server_log}" >&2; exit 1',
        "  fi",
        "  sleep 1",
        "done",
        f'echo "vLLM judge server ready at ${BASE_URL_ENV}" >&2',
    ]
