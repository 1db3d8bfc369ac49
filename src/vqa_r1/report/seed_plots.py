"""Plots of experiments trained with several seeds: every seed is drawn, not only their mean.

Accuracy: a bar (or, against a numeric x, a line) at the mean over seeds with its 95 % interval
(report/seeds.py: bootstrap over seeds and items; a single-run row such as base keeps its Wilson
interval), and one dot per seed on it. Rewards: one panel per GRPO condition, one line per seed
and reward. The same care as plots.py (pinned style, no version tag, atomic write): same files,
same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from vqa_r1.report.plots import (
    _decorate,
    _floor_marks,
    _legend,
    _message_png,
    _new_figure,
    _number,
    _pinned_style,
    _reward_names,
    _save_png,
    _scaled_limits,
    _series,
    _unique,
    _with_ci_columns,
    load_metrics,
)

if TYPE_CHECKING:
    import pandas as pd

INTERVAL = "95 % CI (seeds: bootstrap; one run: Wilson)"
SEED_STYLES = ("-", "--", ":", "-.")


def _dots(ax, x: float, row, seeds: Sequence[str], spread: float, labelled: bool) -> bool:
    values = [_number(row.get(c)) for c in seeds]
    values = [v for v in values if v is not None]
    if not values:
        return labelled
    offsets = [spread * (i - (len(values) - 1) / 2) for i in range(len(values))]
    ax.scatter([x + o for o in offsets], values, s=14, color="black", zorder=3,
               label=None if labelled else "each seed")  # fmt: skip
    return True


def plot_seeded_bars(
    df: pd.DataFrame,
    png: str | Path,
    seeds: Sequence[str],
    *,
    label: str,
    hue: str | None = None,
    title: str = "",
    xlabel: str | None = None,
    reference: float | None = 0.5,
    reference_label: str = "chance",
    floor: str | None = None,
) -> Path:
    """Bars of the mean accuracy per ``label`` (grouped by ``hue``) with the row's interval
    and a dot per seed (the columns ``seeds``, e.g. ``seed 42``); the y axis is scaled to what
    is drawn, so that differences of a point between seeds stay visible. ``floor``: a column of
    each row's floor (a blind prior), drawn as a dashed line across its group."""
    if df.empty:
        return _message_png(png, title or "Accuracy", "no rows to plot")
    data = _with_ci_columns(df)
    data = data.assign(_label=[str(v) for v in data[label]])
    data = data.assign(_hue=[str(v) for v in data[hue]] if hue else "")
    labels, hues = _unique(list(data["_label"])), _unique(list(data["_hue"]))
    width = 0.8 / len(hues)
    drawn = [*data["accuracy"].dropna(), *data["ci_low"].dropna(), *data["ci_high"].dropna()]
    drawn += [v for c in seeds for v in data[c].dropna()] if seeds else []
    drawn += [reference] if reference is not None else []
    if floor and floor in data.columns:
        drawn += [v for v in (_number(x) for x in data[floor]) if v is not None]
    low, high = _scaled_limits(drawn) if drawn else (0.0, 1.05)
    with _pinned_style():
        # the legend sits outside, right: the axes keep about 1.2 inch per label
        fig = _new_figure(max(8.4, 1.2 * len(labels) * max(1, len(hues)) ** 0.5 + 4.2), 4.2)
        ax = fig.add_subplot()
        dotted = interval = False
        for i, hue_value in enumerate(hues):
            part = data[data["_hue"] == hue_value]
            for _, row in part.iterrows():
                x = labels.index(row["_label"]) - 0.4 + width * (i + 0.5)
                mean = _number(row["accuracy"])
                if mean is None:
                    continue
                ax.bar([x], [mean - low], bottom=low, width=width * 0.95, color=f"C{i % 10}",
                       alpha=0.6, label=hue_value if hue and row.name == part.index[0] else None)  # fmt: skip
                ci = (_number(row["ci_low"]), _number(row["ci_high"]))
                if None not in ci:
                    ax.errorbar([x], [mean], yerr=[[max(0.0, mean - ci[0])], [max(0.0, ci[1] - mean)]],
                                fmt="none", ecolor="black", capsize=3, linewidth=1,
                                label=None if interval else INTERVAL)  # fmt: skip
                    interval = True
                dotted = _dots(ax, x, row, seeds, width * 0.18, dotted)
        if floor and floor in data.columns:
            _floor_marks(ax, data, labels, floor)
        ax.set_xticks(range(len(labels)), labels, rotation=30 if len(labels) > 4 else 0,
                      ha="right" if len(labels) > 4 else "center")  # fmt: skip
        ax.set_ylim(low, high)
        ax.set_xlabel(xlabel or label)
        _decorate(ax, title, "accuracy (mean over seeds)", reference, reference_label)
        _legend(ax, hue)
        fig.tight_layout()
        return _save_png(fig, png)


def plot_seeded_trend(
    df: pd.DataFrame,
    x: str,
    png: str | Path,
    seeds: Sequence[str],
    *,
    hue: str | None = None,
    title: str = "",
    reference: float | None = 0.5,
    reference_label: str = "chance",
) -> Path:
    """Mean accuracy against a numeric ``x`` (one line per ``hue``), its interval as error bars
    and a dot per seed."""
    import pandas as pd

    if df.empty or x not in df.columns:
        return _message_png(png, title or "Accuracy", "no rows to plot")
    data = _with_ci_columns(df)
    data = data.assign(_x=pd.to_numeric(data[x], errors="coerce"))
    data = data[data["_x"].notna()]
    data = data.assign(_hue=[str(v) for v in data[hue]] if hue else "")
    drawn = [*data["accuracy"].dropna(), *data["ci_low"].dropna(), *data["ci_high"].dropna()]
    drawn += [v for c in seeds for v in data[c].dropna()] if seeds else []
    drawn += [reference] if reference is not None else []
    low, high = _scaled_limits(drawn) if drawn else (0.0, 1.05)
    with _pinned_style():
        fig = _new_figure(7.4, 4.2)
        ax = fig.add_subplot()
        dotted = False
        for i, hue_value in enumerate(_unique(list(data["_hue"]))):
            part = data[data["_hue"] == hue_value].sort_values("_x", kind="mergesort")
            ax.plot(part["_x"], part["accuracy"], marker="o", color=f"C{i % 10}",
                    label=hue_value or None)  # fmt: skip
            for _, row in part.iterrows():
                dotted = _dots(ax, float(row["_x"]), row, seeds, 0.0, dotted)
        ax.set_xlabel(x)
        ax.set_ylim(low, high)
        _decorate(ax, title, "accuracy (mean over seeds)", reference, reference_label)
        _legend(ax, hue)
        fig.tight_layout()
        return _save_png(fig, png)


def plot_seeded_reward_curves(groups: dict[str, dict[str, Path]], png: str | Path) -> Path:
    """One panel per GRPO condition (``groups``: condition -> seed label -> run folder), one
    colour per reward, one line style per seed."""
    loaded = {
        name: {seed: load_metrics(Path(run) / "metrics.jsonl") for seed, run in runs.items()}
        for name, runs in groups.items()
    }
    if not any(_reward_names(r) for runs in loaded.values() for r in runs.values()):
        return _message_png(png, "Rewards", "no GRPO step logged a reward yet")
    with _pinned_style():
        fig = _new_figure(5.0 * len(loaded), 3.8)
        axes = fig.subplots(1, len(loaded), squeeze=False)[0]
        for ax, (name, runs) in zip(axes, loaded.items(), strict=True):
            rewards = _unique([r for records in runs.values() for r in _reward_names(records)])
            for j, (seed, records) in enumerate(runs.items()):
                for k, reward in enumerate(rewards):
                    xs, ys = _series(records, f"rewards/{reward}/mean")
                    text = reward.removesuffix("_reward").replace("_", " ")
                    ax.plot(xs, ys, color=f"C{k % 10}", linestyle=SEED_STYLES[j % 4],
                            linewidth=1.1, label=f"{text}, {seed}")  # fmt: skip
            ax.set(title=f"GRPO: {name}", xlabel="step", ylabel="mean reward", ylim=(-0.02, 1.02))
            ax.grid(True, alpha=0.3)
            if ax.get_lines():
                ax.legend(fontsize=7, loc="lower right", ncol=2)
        fig.tight_layout()
        return _save_png(fig, png)
