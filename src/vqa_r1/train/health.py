"""Run health: a GRPO run that cannot learn says so while it runs, with the evidence and a fix.

The most expensive failure on a time-limited queue is a run that trains for hours and learns
nothing. TRL logs what shows it (``frac_reward_zero_std``, ``completions/clipped_ratio``,
``completions/mean_length``, ``rewards/<name>/mean``, ``kl``, ``entropy``); ``HealthDetector``
reads those logged values step by step, over a window of the latest ``window`` logged steps
(``train.health_window``), and raises alarms with stable codes:

``no_signal``        most groups have zero reward std over the whole window and the reward does
                     not rise: every completion of a prompt gets the same reward, so there is no
                     advantage and no gradient.
``truncation``       many completions are cut at ``max_completion_length`` (before ``</answer>``:
                     neither format nor accuracy reward).
``format_collapse``  the format reward stays at/near 0 over the window, or fell there after being up.
``length_collapse``  completions shrink towards nothing (a fraction of their longest window).
``kl_spike``         (beta > 0) KL jumps by a large factor against the window before it.
``reward_collapse``  a reward other than the format's fell to a fraction of what it had reached
                     and stayed there for a whole window: the run unlearns what it had (a
                     learning rate too high for an SFT start, or a hacked reward paying another
                     behaviour).

An alarm fires once per code, and again only after its condition cleared. ``RunHealth`` (the
Trainer callback, GRPO runs) logs each one as it fires (``log.warning``: code, evidence, fix),
appends it to status.json's ``health`` list (rank 0) and keeps the latest window's numbers in
``health_stats``; with ``train.health_action=stop`` it checkpoints and stops training at the step
the alarm fires, the same step on every rank (the decision is shared with ``ranks.any_rank``, as
``callbacks.StopOnInterrupt`` shares its flag), and the run ends ``UNHEALTHY`` (train/runner.py).

Entropy is computed and reported with the other numbers; it raises no alarm of its own (a low
entropy is what a converged run has too).
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from transformers import TrainerCallback

from vqa_r1 import ranks
from vqa_r1.io import read_jsonl
from vqa_r1.run_dir import RunDir

log = logging.getLogger(__name__)

ZERO_STD_KEY = "frac_reward_zero_std"
CLIPPED_KEY = "completions/clipped_ratio"
LENGTH_KEY = "completions/mean_length"
REWARD_KEY = "reward"
KL_KEY = "kl"
ENTROPY_KEY = "entropy"

NO_SIGNAL, TRUNCATION, FORMAT_COLLAPSE, LENGTH_COLLAPSE, KL_SPIKE, REWARD_COLLAPSE = (
    "no_signal",
    "truncation",
    "format_collapse",
    "length_collapse",
    "kl_spike",
    "reward_collapse",
)
CODES = (NO_SIGNAL, TRUNCATION, FORMAT_COLLAPSE, LENGTH_COLLAPSE, KL_SPIKE, REWARD_COLLAPSE)

NO_SIGNAL_ZERO_STD = 0.9
"""``no_signal`` fires when the mean share of zero-std groups over a full window is at least
this. Never one step: a run that learns has single steps at 1.0 (its easy prompts are solved
by every completion; the committed demo runs reach 1.0 at single steps and 0.6-0.9 on average,
60 % at step 5), while a run with no reward anywhere sits at 1.0 throughout."""

NO_SIGNAL_RISE = 0.05
"""...and unless the median reward of the window's second half is at least this much above its
first half's: a rising reward is learning, whatever the share of zero-std groups. Medians, not
means: a random-init model scores by chance now and then (one step at 0.25 in a tiny run), and
one lucky step is no rise."""

TRUNCATION_SHARE = 0.5
"""``truncation`` fires when at least this share of the completions hit ``max_completion_length``
on average over the latest logged steps (at least ``TRUNCATION_MIN_LOGS`` of them, at most the
window). The demo's runs cut 0-7 % of their completions (a few long ones per batch)."""

TRUNCATION_MIN_LOGS = 3
"""Logged steps ``truncation`` waits for: cut completions show at once, no need for a whole
window, but one step of unlucky samples is not a trend."""

FORMAT_LOW = 0.05
"""``format_collapse`` fires when the format reward's mean over a full window is at most this
(stuck at 0 from the start, or fallen there); the demo's runs stay at 0.82-1.0."""

FORMAT_WAS_UP = 0.5
"""A format reward that once reached this (one logged step) and is now low has *fallen*
(another fix than one that never rose)."""

LENGTH_COLLAPSE_RATIO = 0.25
"""``length_collapse`` fires when the mean completion length over the latest full window is at
most this fraction of the longest window mean seen before it (the demo's lengths stay within
49-55 tokens)."""

LENGTH_EMPTY = 2.0
"""...or when a full window's mean completion length is at most this many tokens: (nearly)
empty completions whatever came before."""

KL_SPIKE_FACTOR = 10.0
"""``kl_spike`` (beta > 0) fires when the latest KL is at least this factor above the median KL of
the window's earlier logged steps (at least ``KL_MIN_LOGS`` of them)..."""

KL_SPIKE_FLOOR = 0.1
"""...and at least this large: early KL values are tiny (0 at the first step), so a ratio alone
would fire on noise. Healthy GRPO runs at beta 0.04 stay around 1e-3 to 5e-2."""

KL_MIN_LOGS = 3

REWARD_PEAK_LOGS = 3
"""``reward_collapse`` measures what a reward had reached as the best mean of this many
consecutive logged steps: that dilutes one lucky step (a random-init tiny run's single 0.25 counts
as 0.08, below ``REWARD_PEAK_MIN``), which is not a skill the run had."""

REWARD_PEAK_MIN = 0.15
"""...and only a reward that reached at least this has something to lose."""

REWARD_COLLAPSE_RATIO = 0.25
"""``reward_collapse`` fires when a full window's mean of a reward is at most this fraction of
its peak. Measured: the cryptogram's GRPO at 5e-4 from its SFT run, correctness 0.55 at step 5,
0.075 at step 10, then 0-0.05 (peak 0.22, windows after it 0.01): it ended at the random-guess
floor; the same run at 5e-5 held 0.3-0.9. No committed run of the demo or the experiments falls
this far (tests/test_health.py)."""

FIXES = {
    NO_SIGNAL: (
        "every completion of a prompt gets the same reward (no advantage, no gradient): start "
        "from SFT (init_adapter) or use dynamic sampling; raise train.num_generations or "
        "train.temperature for more varied completions; if the reward is at its top instead, "
        "the data is too easy"
    ),
    TRUNCATION: (
        "raise train.max_completion_length (a completion cut before </answer> gets neither "
        "format nor accuracy reward), or ask for shorter reasoning in the instruction"
    ),
    FORMAT_COLLAPSE: (
        "the completions do not follow <think>...</think><answer>...</answer>: start from SFT "
        "(init_adapter), check the instruction and train.max_completion_length"
    ),
    "format_fell": (
        "the format reward fell to 0 after being up: lower train.learning_rate, raise train.beta "
        "(the KL term keeps the model near its start) or the format reward's weight "
        "(train.reward_weights)"
    ),
    LENGTH_COLLAPSE: (
        "completions shrink towards nothing: lower train.learning_rate, raise train.beta, or "
        "check the rewards for one that pays short answers (a length penalty)"
    ),
    KL_SPIKE: (
        "the policy moves away from the reference fast: lower train.learning_rate, raise "
        "train.beta or lower train.max_grad_norm"
    ),
    REWARD_COLLAPSE: (
        "the run unlearns what it could do: lower train.learning_rate (a continued SFT adapter "
        "often needs 10x less than a run from the base model), raise train.beta to hold the "
        "policy near its start, and read completions.jsonl for a reward paying another behaviour"
    ),
}


@dataclass
class Alarm:
    """One alarm: its stable code, the step it fired at, the evidence (one line, with numbers and
    steps), the suggested fix, and the numbers themselves."""

    code: str
    step: int
    evidence: str
    fix: str
    values: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        return f"{self.code} at step {self.step}: {self.evidence}; fix: {self.fix}"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def reward_keys(logs: Mapping[str, Any]) -> list[str]:
    """The per-reward metrics (``rewards/<name>/mean``) but the format reward's."""
    return sorted(
        k for k in logs if k.startswith("rewards/") and k.endswith("/mean") and "format" not in k
    )


def format_key(logs: Mapping[str, Any]) -> str | None:
    """The format reward's metric (``rewards/<name>/mean`` of a reward named ``*format*``)."""
    keys = [k for k in logs if k.startswith("rewards/") and k.endswith("/mean") and "format" in k]
    return sorted(keys)[0] if keys else None


@dataclass
class _Log:
    step: int
    values: dict[str, float]


class HealthDetector:
    """The alarms of one run from its logged metrics, fed one logged step at a time (``observe``).

    ``window``: logged steps each windowed rule looks back over; ``beta``: the KL coefficient
    (``kl_spike`` only when > 0); ``max_completion_length``: named in ``truncation``'s evidence.
    """

    def __init__(
        self, window: int = 10, beta: float = 0.0, max_completion_length: int | None = None
    ):
        self.window = max(2, int(window))
        self.beta = beta
        self.max_completion_length = max_completion_length
        self.logs: list[_Log] = []
        self.active: set[str] = set()
        self.fired: list[Alarm] = []
        self.format_key: str | None = None
        self._format_peak: tuple[float, int] | None = None  # (value, step) of the highest
        self._length_peak: tuple[float, int, int] | None = None  # (window mean, first, last step)
        self._reward_peaks: dict[str, tuple[float, int, int]] = {}  # key -> (mean, first, last)

    # -- feeding ---------------------------------------------------------------------------
    def observe(self, step: int, logs: Mapping[str, Any]) -> list[Alarm]:
        """One logged step (a metrics.jsonl record); returns the alarms that fire at it. Logs
        without GRPO's keys (the trainer's final summary, an SFT run) are ignored."""
        if _number(logs.get(ZERO_STD_KEY)) is None and _number(logs.get(CLIPPED_KEY)) is None:
            return []
        self.format_key = self.format_key or format_key(logs)
        keys = (ZERO_STD_KEY, CLIPPED_KEY, LENGTH_KEY, REWARD_KEY, KL_KEY, ENTROPY_KEY)
        values = {k: v for k in keys if (v := _number(logs.get(k))) is not None}
        if self.format_key and (v := _number(logs.get(self.format_key))) is not None:
            values["format"] = v
        for key in reward_keys(logs):
            if (v := _number(logs.get(key))) is not None:
                values[key] = v
        # what the windowed rules compare against: the peaks *before* this step
        format_peak, length_peak = self._format_peak, self._length_peak
        reward_peaks = dict(self._reward_peaks)
        self.logs.append(_Log(int(step), values))
        now = self._check(format_peak, length_peak)
        collapse = self._reward_collapse(int(step), reward_peaks)
        if collapse is not None:
            now[collapse.code] = collapse
        for key in reward_keys(values):
            recent = self._recent(key, REWARD_PEAK_LOGS)
            if len(recent) == REWARD_PEAK_LOGS:
                mean = _mean([v for _, v in recent])
                if key not in self._reward_peaks or mean > self._reward_peaks[key][0]:
                    self._reward_peaks[key] = (mean, recent[0][0], recent[-1][0])
        if "format" in values and (
            self._format_peak is None or values["format"] > self._format_peak[0]
        ):
            self._format_peak = (values["format"], int(step))
        recent = self._recent(LENGTH_KEY, self.window)
        if len(recent) == self.window:
            mean = _mean([v for _, v in recent])
            if self._length_peak is None or mean > self._length_peak[0]:
                self._length_peak = (mean, recent[0][0], recent[-1][0])
        new = [alarm for code, alarm in now.items() if code not in self.active]
        for code in self.active - set(now):
            log.info("run health: %s cleared at step %d", code, step)
        self.active = set(now)
        self.fired += new
        return new

    def _recent(self, key: str, n: int) -> list[tuple[int, float]]:
        """The latest ``n`` logged (step, value) pairs of ``key``, oldest first."""
        found = [(entry.step, entry.values[key]) for entry in self.logs if key in entry.values]
        return found[-n:]

    # -- the rules ---------------------------------------------------------------------------
    def _check(self, format_peak, length_peak) -> dict[str, Alarm]:
        step = self.logs[-1].step
        alarms = {}
        for rule in (self._no_signal, self._truncation, self._format, self._length, self._kl):
            alarm = rule(step, format_peak, length_peak)
            if alarm is not None:
                alarms[alarm.code] = alarm
        return alarms

    def _no_signal(self, step, *_) -> Alarm | None:
        recent = self._recent(ZERO_STD_KEY, self.window)
        if len(recent) < self.window:
            return None
        shares = [v for _, v in recent]
        share = _mean(shares)
        if share < NO_SIGNAL_ZERO_STD:
            return None
        rewards = [v for _, v in self._recent(REWARD_KEY, self.window)]
        first = last = None
        if len(rewards) >= 2:
            half = len(rewards) // 2
            first = statistics.median(rewards[:half])
            last = statistics.median(rewards[half:])
            if last - first >= NO_SIGNAL_RISE:
                return None  # the reward rises: it learns
        trend = f"; median reward {first:.3f} -> {last:.3f}" if first is not None else ""
        return Alarm(
            NO_SIGNAL,
            step,
            f"{share:.0%} of groups had zero reward std over steps {recent[0][0]}-{recent[-1][0]} "
            f"({len(recent)} logged steps, from {min(shares):.0%} to {max(shares):.0%}){trend}",
            FIXES[NO_SIGNAL],
            {
                "zero_std_share": share,
                "from_step": recent[0][0],
                "reward_first_half": first,
                "reward_second_half": last,
            },  # fmt: skip
        )

    def _truncation(self, step, *_) -> Alarm | None:
        recent = self._recent(CLIPPED_KEY, self.window)
        if len(recent) < min(TRUNCATION_MIN_LOGS, self.window):
            return None
        share = _mean([v for _, v in recent])
        if share < TRUNCATION_SHARE:
            return None
        limit = f"max_completion_length={self.max_completion_length}"
        lengths = [v for _, v in self._recent(LENGTH_KEY, len(recent))]
        mean_length = f"; mean length {_mean(lengths):.1f} tokens" if lengths else ""
        return Alarm(
            TRUNCATION,
            step,
            f"{share:.0%} of completions were cut at {limit if self.max_completion_length else 'the limit'} "
            f"over steps {recent[0][0]}-{recent[-1][0]}{mean_length}",
            FIXES[TRUNCATION],
            {
                "truncated_share": share,
                "from_step": recent[0][0],
                "max_completion_length": self.max_completion_length,
            },  # fmt: skip
        )

    def _format(self, step, format_peak, _) -> Alarm | None:
        recent = self._recent("format", self.window)
        if len(recent) < self.window:
            return None
        mean = _mean([v for _, v in recent])
        if mean > FORMAT_LOW:
            return None
        name = (self.format_key or "format").split("/")[1] if self.format_key else "format"
        span = f"steps {recent[0][0]}-{recent[-1][0]}"
        if format_peak is not None and format_peak[0] >= FORMAT_WAS_UP:
            evidence = (
                f"{name} fell to {mean:.3f} over {span} after reaching {format_peak[0]:.2f} "
                f"at step {format_peak[1]}"
            )
            fix = FIXES["format_fell"]
        else:
            evidence = f"{name} stuck at {mean:.3f} over {span} (never above {FORMAT_WAS_UP})"
            fix = FIXES[FORMAT_COLLAPSE]
        return Alarm(
            FORMAT_COLLAPSE,
            step,
            evidence,
            fix,
            {
                "format_reward": mean,
                "from_step": recent[0][0],
                "peak": format_peak[0] if format_peak else None,
            },  # fmt: skip
        )

    def _length(self, step, _, length_peak) -> Alarm | None:
        recent = self._recent(LENGTH_KEY, self.window)
        if len(recent) < self.window:
            return None
        mean = _mean([v for _, v in recent])
        span = f"steps {recent[0][0]}-{recent[-1][0]}"
        if mean <= LENGTH_EMPTY:
            evidence = f"mean completion length {mean:.1f} tokens over {span}"
        elif length_peak is not None and mean <= LENGTH_COLLAPSE_RATIO * length_peak[0]:
            evidence = (
                f"mean completion length {mean:.1f} tokens over {span}, down from "
                f"{length_peak[0]:.1f} over steps {length_peak[1]}-{length_peak[2]}"
            )
        else:
            return None
        entropy = [v for _, v in self._recent(ENTROPY_KEY, self.window)]
        if entropy:
            evidence += f"; entropy {_mean(entropy):.3f}"
        return Alarm(
            LENGTH_COLLAPSE,
            step,
            evidence,
            FIXES[LENGTH_COLLAPSE],
            {
                "mean_length": mean,
                "from_step": recent[0][0],
                "peak": length_peak[0] if length_peak else None,
            },  # fmt: skip
        )

    def _kl(self, step, *_) -> Alarm | None:
        if self.beta <= 0:
            return None
        recent = self._recent(KL_KEY, self.window)
        if len(recent) < KL_MIN_LOGS + 1:
            return None
        latest = recent[-1][1]
        before = statistics.median(v for _, v in recent[:-1])
        if latest < KL_SPIKE_FLOOR or latest < KL_SPIKE_FACTOR * before:
            return None
        factor = f"{latest / before:.0f}x" if before > 0 else "from 0"
        return Alarm(
            KL_SPIKE,
            step,
            f"KL {latest:.3g} at step {step}, {factor} the median {before:.3g} of steps "
            f"{recent[0][0]}-{recent[-2][0]} (beta {self.beta})",
            FIXES[KL_SPIKE],
            {"kl": latest, "median_before": before, "from_step": recent[0][0]},
        )

    def _reward_collapse(self, step: int, peaks: dict[str, tuple[float, int, int]]) -> Alarm | None:
        for key, (peak, first, last) in sorted(peaks.items()):
            recent = self._recent(key, self.window)
            if peak < REWARD_PEAK_MIN or len(recent) < self.window or recent[0][0] <= last:
                continue  # a window wholly after the peak: fell *and stayed* down
            mean = _mean([v for _, v in recent])
            if mean > REWARD_COLLAPSE_RATIO * peak:
                continue
            name = key.split("/")[1]
            return Alarm(
                REWARD_COLLAPSE,
                step,
                f"{name} fell to {mean:.3f} over steps {recent[0][0]}-{recent[-1][0]} after "
                f"{peak:.3f} over steps {first}-{last}",
                FIXES[REWARD_COLLAPSE],
                {"reward": name, "window_mean": mean, "peak": peak, "from_step": recent[0][0]},
            )
        return None

    # -- the numbers -----------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """The latest logged step's numbers and their means over the window (status.json's
        ``health_stats``)."""
        if not self.logs:
            return {}
        names = {
            ZERO_STD_KEY: "zero_std_share",
            CLIPPED_KEY: "truncated_share",
            "format": "format_reward",
            LENGTH_KEY: "mean_length",
            KL_KEY: "kl",
            ENTROPY_KEY: "entropy",
            REWARD_KEY: "reward",
        }
        latest = self.logs[-1]
        out: dict[str, Any] = {"step": latest.step, "window": self.window}
        for key, name in names.items():
            if key == KL_KEY and self.beta <= 0:
                continue
            recent = self._recent(key, self.window)
            if recent:
                out[name] = round(recent[-1][1], 4)
                out[f"{name}_window_mean"] = round(_mean([v for _, v in recent]), 4)
        return out


def scan(
    records: Sequence[Mapping[str, Any]],
    window: int = 10,
    beta: float = 0.0,
    max_completion_length: int | None = None,
) -> list[Alarm]:
    """Every alarm a metrics.jsonl's records (``read_jsonl``) would have raised, in order."""
    detector = HealthDetector(window, beta, max_completion_length)
    for index, record in enumerate(records):
        detector.observe(int(record.get("step", index + 1)), record)
    return detector.fired


class RunHealth(TrainerCallback):
    """The detector as a Trainer callback (GRPO runs): alarms logged, recorded in status.json by
    rank 0, and with ``action="stop"`` a checkpoint and the end of training at the step an alarm
    fires, the same step on every rank. ``stopped_by``: the alarm that stopped training."""

    def __init__(
        self,
        rd: RunDir,
        window: int = 10,
        action: str = "warn",
        beta: float = 0.0,
        max_completion_length: int | None = None,
    ):
        self.rd = rd
        self.action = action
        self.detector = HealthDetector(window, beta, max_completion_length)
        self.stopped_by: Alarm | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        """A resumed run (a requeue, or an UNHEALTHY run continued with warn) reads the steps it
        logged before its checkpoint first, silently: its windows go on where they were, and an
        alarm still active then does not fire again (a requeued run raises what an uninterrupted
        one would)."""
        if state.global_step <= 0:
            return
        records = read_jsonl(self.rd.metrics, missing_ok=True, partial_last_line=True)
        for record in records:
            step = record.get("step")
            if isinstance(step, int) and step <= state.global_step:
                self.detector.observe(step, record)
        self.detector.fired = []
        if self.detector.active:
            log.info("run health: still active from before the resume: %s",
                     ", ".join(sorted(self.detector.active)))  # fmt: skip

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs:
            return
        fired = self.detector.observe(state.global_step, logs)
        main = ranks.is_main()
        for alarm in fired:
            if main:
                log.warning(
                    "run health alarm %s at step %d: %s; fix: %s%s",
                    alarm.code,
                    alarm.step,
                    alarm.evidence,
                    alarm.fix,
                    " (train.health_action=stop: checkpoint, then stop)"
                    if self.action == "stop"
                    else "",
                )
        if main and self.detector.logs and _number(logs.get(ZERO_STD_KEY)) is not None:
            status = self.rd.status()
            fields: dict[str, Any] = {"health_stats": self.detector.stats()}
            if fired:
                fields["health"] = [
                    *status.get("health", []),
                    *({k: v for k, v in a.to_dict().items() if k != "values"} for a in fired),
                ]
            self.rd.update_status(**fields)
        stop = self.action == "stop" and bool(fired)
        if ranks.world_size() > 1:  # every rank logs at the same steps: a collective is safe
            stop = ranks.any_rank(stop)
        if stop and self.stopped_by is None:
            self.stopped_by = fired[0] if fired else Alarm("unknown", state.global_step,
                                                             "an alarm of another rank", "")  # fmt: skip
            log.info("stopping at step %d (run health: %s): checkpoint", state.global_step,
                     self.stopped_by.code)  # fmt: skip
            control.should_save = True
            control.should_training_stop = True
        return control
