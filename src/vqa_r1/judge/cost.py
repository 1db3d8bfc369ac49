"""Token counting, prices and the ``--max-cost`` budget.

The budget reserves an estimate for every request before it is sent and settles it with the
server's reported usage afterwards, so that with 16 requests in flight the run still cannot
overshoot the limit by 16 requests' worth. Reasoning models (o-series) bill hidden reasoning tokens
as output, which is why the output estimate is generous by default.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from vqa_r1.errors import UserError

# USD per million tokens (input, output), public list prices when written; override with
# --price-in/--price-out. Unknown models (e.g. an open judge on vLLM) cost nothing unless priced.
PRICES_PER_MTOK: dict[str, tuple[float, float]] = {
    "o4-mini": (1.10, 4.40),
    "o3-mini": (1.10, 4.40),
    "o3": (2.00, 8.00),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4o": (2.50, 10.00),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
}
DEFAULT_OUTPUT_TOKENS = 300
_MESSAGE_OVERHEAD = 4  # role and separators per chat message, as OpenAI documents for chat models


def price_for(
    model: str, price_in: float | None, price_out: float | None
) -> tuple[float, float] | None:
    """(input, output) USD per million tokens, or None when the model has no known price."""
    if price_in is not None or price_out is not None:
        return (price_in or 0.0, price_out or 0.0)
    if model in PRICES_PER_MTOK:
        return PRICES_PER_MTOK[model]
    # dated snapshots such as "o4-mini-2025-04-16" cost what their family costs
    for name in sorted(PRICES_PER_MTOK, key=len, reverse=True):
        if model.startswith(name + "-"):
            return PRICES_PER_MTOK[name]
    return None


class TokenCounter:
    """tiktoken when installed (exact for OpenAI models), else about four characters a token."""

    def __init__(self, model: str) -> None:
        self.exact = False
        self._encode = None
        try:
            import tiktoken  # type: ignore[import-not-found]

            try:
                encoding = tiktoken.encoding_for_model(model)
            except KeyError:
                encoding = tiktoken.get_encoding("o200k_base")
            self._encode = encoding.encode
            self.exact = True
        except Exception:  # noqa: BLE001 - any failure means: estimate instead
            self._encode = None

    def count(self, text: str) -> int:
        if self._encode is not None:
            return len(self._encode(text))
        return max(1, (len(text) + 3) // 4)

    def count_messages(self, messages: list[dict[str, str]]) -> int:
        return sum(self.count(m["content"]) + _MESSAGE_OVERHEAD for m in messages) + 3


@dataclass
class Budget:
    """Spent and reserved dollars; thread-safe so threads or the event loop may share it."""

    prices: tuple[float, float] | None
    max_cost: float | None = None
    spent: float = 0.0
    reserved: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    exhausted: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.max_cost is not None and self.prices is None:
            raise UserError(
                "--max-cost needs a price for this judge model: pass --price-in and --price-out "
                "(USD per million tokens)"
            )

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        if self.prices is None:
            return 0.0
        return (prompt_tokens * self.prices[0] + completion_tokens * self.prices[1]) / 1e6

    def reserve(self, estimate: float) -> bool:
        """Claim room for one request; False (and the budget is closed) when it would not fit."""
        with self._lock:
            if self.max_cost is None:
                self.reserved += estimate
                return True
            if self.exhausted or self.spent + self.reserved + estimate > self.max_cost:
                self.exhausted = True
                return False
            self.reserved += estimate
            return True

    def settle(self, estimate: float, prompt_tokens: int, completion_tokens: int) -> float:
        actual = self.cost(prompt_tokens, completion_tokens)
        with self._lock:
            self.reserved = max(0.0, self.reserved - estimate)
            self.spent += actual
            self.prompt_tokens += prompt_tokens
            self.completion_tokens += completion_tokens
        return actual


@dataclass(frozen=True)
class Estimate:
    items: int
    cached: int
    to_request: int
    prompt_tokens: int
    output_tokens: int
    cost: float | None
    exact_tokens: bool

    def describe(self, model: str) -> str:
        price = "unknown price" if self.cost is None else f"about ${self.cost:.4f}"
        how = "tiktoken" if self.exact_tokens else "approximate, ~4 chars/token"
        return (
            f"dry run: {self.items} items, {self.cached} cached, {self.to_request} to request from "
            f"{model}; about {self.prompt_tokens} prompt tokens ({how}) and up to "
            f"{self.output_tokens} output tokens: {price}"
        )
