"""One judge request with our own retry policy, over any OpenAI-compatible endpoint.

The openai client's built-in retries are switched off (``max_retries=0``) so that every retry is
ours: counted, logged, bounded, and honouring ``Retry-After``. Transport faults (429, 5xx,
timeouts, dropped or garbled bodies) back off exponentially with jitter; a reply that is not a valid
verdict is asked again a few times, then recorded as a failure with its raw text, because a wrong
verdict silently accepted would corrupt the statistics while a recorded failure only shrinks them.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from vqa_r1.errors import UserError
from vqa_r1.judge.prompts import InvalidVerdict

log = logging.getLogger("vqa_r1.judge")

RETRYABLE_STATUS = frozenset({408, 409, 425, 429})
FATAL_STATUS = frozenset({401, 403, 404})


class JudgeAborted(RuntimeError):
    """Every further request would fail the same way (bad key, unknown model, no quota)."""


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 6  # requests per item for transport faults
    json_attempts: int = 3  # requests per item whose reply is not a valid verdict
    base_delay: float = 1.0
    max_delay: float = 60.0
    max_retry_after: float = 300.0  # a server asking for longer is treated as this long


@dataclass
class Outcome:
    status: str  # "judged" | "failed" | "skipped"
    verdict: dict[str, Any] | None = None
    raw: str | None = None
    error: str | None = None
    attempts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0


class Redactor:
    """Removes secrets from any text we write; servers have been known to echo headers back."""

    def __init__(self, secrets: list[str] | None = None) -> None:
        self.secrets = [s for s in (secrets or []) if s and len(s) >= 4]

    def __call__(self, text: object) -> str:
        out = "" if text is None else str(text)
        for secret in self.secrets:
            out = out.replace(secret, "[REDACTED]")
        return out


def retry_after_seconds(headers: Any) -> float | None:
    """Seconds a server asked us to wait: ``retry-after-ms``, ``retry-after`` seconds or date."""
    if headers is None:
        return None
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            return max(0.0, float(ms) / 1000.0)
    except (TypeError, ValueError):
        pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except (TypeError, ValueError):
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - time.time())


def backoff_delay(failures: int, policy: RetryPolicy, rng: random.Random) -> float:
    """Exponential backoff with 'equal jitter': half fixed, half random, so retries spread out
    without ever collapsing to zero while a server is overloaded."""
    cap = min(policy.max_delay, policy.base_delay * (2 ** max(0, failures - 1)))
    return cap / 2 + rng.uniform(0, cap / 2)


class OpenAIJudgeClient:
    """Judges one rendered prompt at a time; safe to share across asyncio tasks."""

    def __init__(
        self,
        model: str,
        base_url: str | None,
        api_key: str,
        *,
        temperature: float | None = None,
        timeout: float = 60.0,
        policy: RetryPolicy | None = None,
        json_mode: bool = True,
        max_tokens: int | None = None,
        redact: Redactor | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        seed: int | None = None,
    ) -> None:
        openai = require_openai()
        self._openai = openai
        self.model = model
        self.temperature = temperature
        self.policy = policy or RetryPolicy()
        self.json_mode = json_mode
        self.max_tokens = max_tokens
        self.redact = redact or Redactor([api_key])
        self._sleep = sleep
        self._rng = random.Random(seed)
        self._client = openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout
        )

    async def close(self) -> None:
        await self._client.close()

    def _request_kwargs(self, messages: list[dict[str, str]]) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages}
        if self.json_mode:
            kwargs["response_format"] = {"type": "json_object"}
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        if self.max_tokens is not None:
            kwargs["max_completion_tokens"] = self.max_tokens
        return kwargs

    def _classify(self, err: Exception) -> tuple[str, float | None]:
        """('retry'|'fail'|'abort', server-requested delay) for an exception from the client."""
        openai = self._openai
        if isinstance(err, openai.APIStatusError):
            status = err.status_code
            body = err.body if isinstance(err.body, dict) else {}
            code = body.get("code") or (body.get("error") or {}).get("code") if body else None
            if status == 429 and code == "insufficient_quota":
                return "abort", None
            if status in FATAL_STATUS:
                return "abort", None
            if status in RETRYABLE_STATUS or status >= 500:
                return "retry", retry_after_seconds(err.response.headers)
            return "fail", None
        # timeouts, refused or dropped connections, truncated or unparseable bodies
        return "retry", None

    def _describe(self, err: Exception) -> str:
        openai = self._openai
        if isinstance(err, openai.APITimeoutError):
            return "timeout"
        if isinstance(err, openai.APIStatusError):
            return f"HTTP {err.status_code}: {self.redact(err.message)[:300]}"
        if isinstance(err, openai.APIConnectionError):
            cause = err.__cause__ or err.__context__
            detail = f" ({type(cause).__name__}: {cause})" if cause else ""
            return self.redact(f"connection error{detail}")[:300]
        return self.redact(f"bad response ({type(err).__name__}: {err})")[:300]

    async def judge(
        self,
        messages: list[dict[str, str]],
        validate: Callable[[str | None], dict[str, Any]],
        reserve: Callable[[], bool] = lambda: True,
        settle: Callable[[int, int], float] = lambda p, c: 0.0,
    ) -> Outcome:
        """Ask until a valid verdict, a recorded failure, or no budget; raise JudgeAborted when
        retrying cannot help (authentication, unknown model, exhausted quota)."""
        out = Outcome(status="failed")
        transport_failures = 0
        invalid_replies = 0
        kwargs = self._request_kwargs(messages)
        while True:
            if not reserve():
                out.status = "skipped"
                out.error = out.error or "not requested: --max-cost budget reached"
                return out
            out.attempts += 1
            try:
                response = await self._client.chat.completions.create(**kwargs)
            except Exception as err:  # noqa: BLE001 - classified below, nothing is swallowed
                settle(0, 0)
                action, server_delay = self._classify(err)
                out.error = self._describe(err)
                if action == "abort":
                    raise JudgeAborted(out.error) from None
                if action == "fail":
                    return out
                transport_failures += 1
                if transport_failures >= self.policy.max_attempts:
                    out.error = f"gave up after {out.attempts} attempts; last: {out.error}"
                    return out
                if server_delay is not None:
                    delay = min(server_delay, self.policy.max_retry_after)
                    delay += self._rng.uniform(0, min(1.0, self.policy.base_delay) / 4)
                else:
                    delay = backoff_delay(transport_failures, self.policy, self._rng)
                log.debug("retry in %.2fs after %s", delay, out.error)
                await self._sleep(delay)
                continue
            usage = getattr(response, "usage", None)
            prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
            completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
            out.prompt_tokens += prompt_tokens
            out.completion_tokens += completion_tokens
            out.cost += settle(prompt_tokens, completion_tokens)
            try:
                content = response.choices[0].message.content
            except (AttributeError, IndexError, TypeError):
                content = None
            try:
                out.verdict = validate(content)
            except InvalidVerdict as err:
                invalid_replies += 1
                out.raw = self.redact(content)
                out.error = f"invalid verdict: {err}"
                if invalid_replies >= self.policy.json_attempts:
                    out.error = f"invalid verdict after {invalid_replies} replies: {err}"
                    return out
                continue
            out.status = "judged"
            out.error = None
            out.raw = None
            return out


def require_openai() -> Any:
    """The openai client module, or one line saying how to install it: the judge's dependencies
    are an extra (``vqa-r1[judge]``), not needed to train or evaluate."""
    try:
        import openai
    except ImportError:
        raise UserError(
            "the judge needs the openai client, which this install lacks: "
            "pip install 'vqa-r1[judge]' (or pip install openai python-dotenv)"
        ) from None
    return openai
