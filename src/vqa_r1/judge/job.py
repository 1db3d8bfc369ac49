"""A judge run as a job: one picklable config, validated on the login node, run on any node.

``vqa-r1 judge run`` and ``python slurm/launch.py judge`` share this module so the two faces
cannot drift. The config holds only the *name* of the environment variable with the API key, never
the key: configs are pickled into job folders and printed by dry runs. With ``--vllm-model`` the
job script first starts an OpenAI-compatible vLLM server on the job's GPU and waits for it
(``server_setup_lines``), so an open judge costs nothing but GPU time.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shlex
import sys
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

from vqa_r1 import claims
from vqa_r1.domains import above, between
from vqa_r1.errors import UserError
from vqa_r1.io import atomic_write_text
from vqa_r1.judge.batch import BatchJudge, BatchReport
from vqa_r1.judge.cache import CACHE_ENV, VerdictCache, default_cache_dir
from vqa_r1.judge.client import OpenAIJudgeClient, Redactor, RetryPolicy
from vqa_r1.judge.cost import DEFAULT_OUTPUT_TOKENS, Budget, price_for
from vqa_r1.judge.heuristic import HEURISTIC_ID
from vqa_r1.judge.options import cli_option, flag_of
from vqa_r1.judge.prompts import load_prompt
from vqa_r1.judge.responses import JudgeItem, load_items, load_questions, parse_named_files
from vqa_r1.models.serving import PORT_BASE, PORT_SPAN, PORT_VAR, vllm_server_lines

log = logging.getLogger("vqa_r1.judge")

Backend = Literal["openai", "heuristic"]
BACKENDS: tuple[str, ...] = typing.get_args(Backend)
BASE_URL_ENV = "VQA_R1_JUDGE_BASE_URL"  # exported by the vLLM set-up lines inside a job
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}
VLLM_GROUP = "open judge on the job's GPU (vLLM)"


@dataclass
class JudgeJobConfig:
    """Everything a judge run needs; no secret (the key is read from the environment at run time).

    Each field is also a flag of ``vqa-r1 judge run`` (``--field-name``, or the ``flag`` given);
    the vLLM fields are flags of the launcher's ``judge`` only (the parsers:
    ``vqa_r1.cli.judge_options``).
    """

    responses: list[tuple[str, str]] = cli_option(
        help="a generated_responses.json (or JSONL) per model; repeat", metavar="NAME=FILE"
    )
    out: str = cli_option(help="alignment checks JSON to write")
    judge_model: str | None = cli_option(
        None, help="judge model name at the endpoint, e.g. o4-mini"
    )
    backend: Backend = cli_option(
        "openai", help="openai: any OpenAI-compatible endpoint; heuristic: offline rules"
    )
    base_url: str | None = cli_option(None, help="OpenAI-compatible endpoint (default: OpenAI's)")
    prompt: str = cli_option(
        "taxonomy", help="taxonomy|simple (newest version), NAME_vN, or a template file"
    )
    temperature: float | None = cli_option(
        None,
        help="sent only when given (o-series models accept only their default)",
        domain=between(0, 2, note="OpenAI's range"),
    )
    concurrency: int = cli_option(8, help="requests in flight", minimum=1)
    limit: int | None = cli_option(None, help="first N items of each model", minimum=1)
    questions: str | None = cli_option(
        None,
        help="claims by index when the responses carry none "
        "(the study's checks file, a dataset export with 'caption', a list)",
    )
    cache_dir: str | None = cli_option(
        None, help=f"verdict cache (default: ${CACHE_ENV}, else ~/.cache/vqa-r1/judge)"
    )
    use_cache: bool = cli_option(
        True, flag="--no-cache", help="neither read nor write the verdict cache"
    )
    timeout: float = cli_option(120.0, help="seconds per request", domain=above(0))
    max_attempts: int = cli_option(6, help="requests per item on 429/5xx/timeouts", minimum=1)
    json_attempts: int = cli_option(
        3, help="requests per item whose reply is not a valid verdict", minimum=1
    )
    backoff_base: float = cli_option(1.0, help="first backoff, seconds", minimum=0)
    backoff_max: float = cli_option(60.0, help="longest backoff, seconds", minimum=0)
    max_cost: float | None = cli_option(
        None, help="stop requesting at this many USD", domain=above(0)
    )
    price_in: float | None = cli_option(None, help="USD per 1M input tokens", minimum=0)
    price_out: float | None = cli_option(None, help="USD per 1M output tokens", minimum=0)
    est_output_tokens: int = cli_option(
        DEFAULT_OUTPUT_TOKENS,
        help="output tokens assumed per request by --dry-run and --max-cost",
        minimum=1,
    )
    max_tokens: int | None = cli_option(None, help="max_completion_tokens", minimum=1)
    json_mode: bool = cli_option(
        True,
        flag="--no-json-mode",
        help="do not send response_format=json_object (servers without it)",
    )
    dry_run: bool = cli_option(False, help="estimate tokens and cost only")
    overwrite: bool = cli_option(
        False,
        help="when --out exists and is not this command's finished output (another file, other "
        "settings), move it aside to <name>.old-<time>; nothing is deleted",
    )
    api_key_env: str = cli_option(
        "OPENAI_API_KEY", help="environment variable (or .env entry) holding the API key"
    )
    env_file: str = cli_option(".env", help="dotenv file read for the key")
    log_file: str | None = cli_option(None, help="also log here (secrets are redacted)")
    progress_every: float = cli_option(
        10.0, flag=False, help="seconds between progress lines", domain=above(0)
    )
    vllm_model: str | None = cli_option(
        None, group=VLLM_GROUP, help="HF model id or path served by vLLM in the job"
    )
    vllm_served_name: str | None = cli_option(
        None, group=VLLM_GROUP, help="name the server exposes (default: the model)"
    )
    vllm_port: int | None = cli_option(
        None,
        group=VLLM_GROUP,
        help=f"default: {PORT_BASE} + SLURM_JOB_ID % {PORT_SPAN}, to avoid clashes",
        domain=between(1, 65535),
    )
    vllm_args: list[str] = cli_option(
        default_factory=list,
        flag="--vllm-arg",
        group=VLLM_GROUP,
        help="extra argument for `vllm serve`, e.g. --vllm-arg=--max-model-len=8192; repeat",
    )
    vllm_startup_timeout: int = cli_option(
        1200, group=VLLM_GROUP, help="seconds to wait for the server's /v1/models", minimum=1
    )

    @property
    def model_name(self) -> str:
        if self.backend == "heuristic":
            return "heuristic"
        if self.vllm_model:
            return self.judge_model or self.vllm_served_name or self.vllm_model
        return self.judge_model or ""


# what the checks file depends on (claims.py): not where the judge is served (the cache keys
# verdicts by model, prompt and item, too), the request pacing, the cache or logging
_SETTINGS = (
    "responses", "out", "judge_model", "backend", "prompt", "temperature", "limit",
    "questions", "max_tokens", "json_mode", "vllm_model", "vllm_served_name",
)  # fmt: skip


def judge_settings(config: JudgeJobConfig) -> dict:
    """What makes two judge runs the same run: a re-run of these settings is complete or
    resumes (the verdict cache answers what was judged), anything else is refused."""
    settings = {name: getattr(config, name) for name in _SETTINGS}
    settings["responses"] = [[name, str(Path(f).resolve())] for name, f in config.responses]
    settings["out"] = str(Path(config.out).resolve())
    return settings


def _is_local(url: str | None) -> bool:
    return bool(url) and (urlparse(url).hostname or "") in LOCAL_HOSTS


def config_from_values(values: dict[str, Any]) -> JudgeJobConfig:
    """Build and validate a config where mistakes are cheap to fix (the login node).

    ``values``: keyword arguments of ``JudgeJobConfig``, ``responses`` as ``NAME=FILE`` texts."""
    values = dict(values)
    pairs = parse_named_files(values["responses"], "--responses")
    values["responses"] = [(name, str(path)) for name, path in pairs]
    config = JudgeJobConfig(**values)
    validate(config)
    return config


def validate(config: JudgeJobConfig) -> None:
    """Every check that needs no request: values, files, prompt, prices and the API key."""
    if config.backend not in BACKENDS:
        raise UserError(f"--backend {config.backend}: use one of {', '.join(BACKENDS)}")
    if config.backend == "openai" and not config.model_name:
        raise UserError("--judge-model is required (e.g. --judge-model o4-mini)")
    for field in dataclasses.fields(config):
        if field.metadata.get("domain") is not None:
            field.metadata["domain"].check(
                getattr(config, field.name), flag_of(field) or field.name
            )
    if config.vllm_model and config.backend != "openai":
        raise UserError("--vllm-model needs --backend openai")
    if config.vllm_model and config.base_url:
        raise UserError("--vllm-model starts its own server: drop --base-url")
    if Path(config.out).is_dir():
        raise UserError(f"--out {config.out}: is a directory; give a .json file path")
    if not config.dry_run and not config.overwrite:  # refused here, before anything is judged
        claims.check_file(config.out, "judge", judge_settings(config))
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
    """From the environment, else the dotenv file; a server at a loopback address (the
    job's vLLM, a local test server) gets a placeholder."""
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
        with claims.writing_file(
            config.out, "judge", judge_settings(config), config.overwrite
        ) as state:
            if state == claims.COMPLETE:
                print(f"judge: {config.out} is complete with these settings: nothing to do")
                return 0
            if config.backend == "heuristic":
                report = batch.run_heuristic(items)
                for record in report.records:
                    record["prompt"] = HEURISTIC_ID
            else:
                report = batch.run(items)
            write_records(config.out, report, redact)
            if report.failed == 0 and report.skipped == 0 and not report.aborted:
                claims.mark_file_complete(config.out)
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
    job ends, wait until ``/v1/models`` answers (or fail fast if the server dies), and export its
    URL for ``build_batch``."""
    if not config.vllm_model:
        return []
    out_dir = Path(config.out).resolve().parent
    return [
        "# open judge: an OpenAI-compatible vLLM server on this node, stopped when the job ends",
        f"mkdir -p {shlex.quote(str(out_dir))}",
        *vllm_server_lines(
            config.vllm_model,
            port=config.vllm_port,
            served_name=config.vllm_served_name or config.judge_model or config.vllm_model,
            extra_args=config.vllm_args,
            log_file=shlex.quote(str(out_dir / "vllm_judge_server.log")),
            startup_timeout=config.vllm_startup_timeout,
            label="vLLM judge server",
        ),
        f'export {BASE_URL_ENV}="http://127.0.0.1:${PORT_VAR}/v1"',
    ]
