"""Training curves of a run and accuracy plots of an experiment, as deterministic PNGs.

Why the care about bytes: reports are regenerated and committed, and a plot whose input did not
change should not show up as changed. Matplotlib's PNG writer is deterministic once the only
varying chunk, the ``Software`` tag with matplotlib's version, is dropped and the style is pinned
(``matplotlib.style`` "default" inside an ``rc_context``, so a user's matplotlibrc cannot leak in).
Figures are built with ``matplotlib.figure.Figure`` rather than pyplot: no global state, no
backend switch, nothing left open when a caller plots many runs. Images are rendered into memory
and then written with a temporary sibling and ``os.replace``, so a killed job leaves the old PNG or
the new one.

matplotlib is imported inside the functions so that ``vqa-r1 --help`` stays fast.
"""

from __future__ import annotations

import contextlib
import io
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vqa_r1.io import atomic_write_bytes, read_jsonl

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

DPI = 100
# Keys of the accuracy reward, most specific first: the project's own reward, then the names
# other recipes use for a multiple-choice or exact-match reward.
ACCURACY_KEYS = (
    "rewards/accuracy_reward/mean",
    "rewards/accuracy/mean",
    "rewards/choice_reward/mean",
)


# --------------------------------------------------------------------------- files and figures


@contextlib.contextmanager
def _pinned_style() -> Iterator[None]:
    """Matplotlib's built-in defaults, whatever the user's matplotlibrc says."""
    import matplotlib
    import matplotlib.style

    with matplotlib.rc_context():
        matplotlib.style.use("default")
        matplotlib.rcParams["svg.hashsalt"] = "vqa_r1"  # harmless for PNG; fixed for any SVG
        yield


def _new_figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI)


def _save_png(fig: Figure, png: str | Path) -> Path:
    """Render to memory with no version tag, then write atomically."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    png = Path(png)
    atomic_write_bytes(png, buf.getvalue())
    return png


def _message_png(png: str | Path, title: str, message: str) -> Path:
    """A small image that says why there is no plot: callers always get a PNG, never a crash."""
    with _pinned_style():
        fig = _new_figure(6, 2.4)
        ax = fig.add_subplot()
        ax.set_axis_off()
        ax.set_title(title)
        ax.text(0.5, 0.5, message, ha="center", va="center", wrap=True, transform=ax.transAxes)
        return _save_png(fig, png)


# --------------------------------------------------------------------------- training curves


def _number(value: Any) -> float | None:
    """A finite float, or None for missing, non-numeric, NaN or infinite values."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def load_metrics(path: str | Path) -> list[dict]:
    """The logged steps of a metrics.jsonl, one record per step, by step.

    A resumed run logs again the steps after its last checkpoint, so the last record of a step
    wins. The trainer's final summary line (``train_runtime``, ``train_loss``) is not a step and is
    dropped. A missing file or a half-written last line (a job still appending) read as fewer steps.
    """
    by_step: dict[float, dict] = {}
    for index, record in enumerate(read_jsonl(path, missing_ok=True, partial_last_line=True)):
        if "train_runtime" in record:
            continue
        by_step[_step(record, index)] = record
    return [by_step[s] for s in sorted(by_step)]


def _step(record: dict, index: int) -> float:
    """The record's step; its position (1-based) when the trainer logged none."""
    step = _number(record.get("step"))
    return step if step is not None else float(index + 1)


def _series(records: Sequence[dict], key: str) -> tuple[list[float], list[float]]:
    points = [(_step(r, i), _number(r.get(key))) for i, r in enumerate(records)]
    kept = [(x, y) for x, y in points if y is not None]
    return [x for x, _ in kept], [y for _, y in kept]


def _has(records: Sequence[dict], key: str) -> bool:
    return any(_number(r.get(key)) is not None for r in records)


def _line(ax: Axes, records: Sequence[dict], key: str, label: str, band_key: str = "") -> None:
    """One curve, with a +-band from ``band_key`` (e.g. a reward's std) where both are logged."""
    xs, ys = _series(records, key)
    (line,) = ax.plot(xs, ys, label=label, linewidth=1.2, marker="." if len(xs) < 30 else None)
    if band_key and _has(records, band_key):
        triples = [
            (_step(r, i), _number(r.get(key)), _number(r.get(band_key)))
            for i, r in enumerate(records)
        ]
        pairs = [(x, m, s) for x, m, s in triples if m is not None and s is not None]
        if pairs:
            bx, bm, bs = zip(*pairs, strict=True)
            lows = [m - s for m, s in zip(bm, bs, strict=True)]
            highs = [m + s for m, s in zip(bm, bs, strict=True)]
            ax.fill_between(bx, lows, highs, color=line.get_color(), alpha=0.18, linewidth=0)


def _reward_names(records: Sequence[dict]) -> list[str]:
    """Reward components logged as ``rewards/<name>/mean``, in first-seen order."""
    names: list[str] = []
    for record in records:
        for key in record:
            if key.startswith("rewards/") and key.endswith("/mean"):
                name = key[len("rewards/") : -len("/mean")]
                if name not in names:
                    names.append(name)
    return names


@dataclass(frozen=True)
class _Panel:
    title: str
    ylabel: str
    draw: Any  # (ax, records) -> None


def _training_panels(records: Sequence[dict]) -> list[_Panel]:
    """The panels whose keys this run logged, GRPO ones first, then SFT ones."""
    panels: list[_Panel] = []
    rewards = _reward_names(records)
    is_grpo = _has(records, "reward") or bool(rewards)

    if _has(records, "reward") or rewards:

        def draw_reward(ax: Axes, recs: Sequence[dict]) -> None:
            if _has(recs, "reward"):
                _line(ax, recs, "reward", "reward (total)")
            for name in rewards:
                _line(ax, recs, f"rewards/{name}/mean", name, band_key=f"rewards/{name}/std")

        panels.append(_Panel("Reward and components (band: +-1 std)", "mean reward", draw_reward))

    accuracy_key = next((k for k in ACCURACY_KEYS if _has(records, k)), None)
    if accuracy_key is not None:

        def draw_accuracy(ax: Axes, recs: Sequence[dict]) -> None:
            _line(ax, recs, accuracy_key, accuracy_key.split("/")[1])
            ax.set_ylim(-0.02, 1.02)

        panels.append(
            _Panel("Accuracy (accuracy reward, training batches)", "accuracy", draw_accuracy)
        )

    simple = [
        ("reward_std", "Reward std within a group", "std"),
        ("kl", "KL to the reference model", "KL"),
    ]
    for key, title, ylabel in simple:
        if _has(records, key):
            panels.append(_Panel(title, ylabel, lambda ax, recs, k=key: _line(ax, recs, k, k)))

    if _has(records, "completions/mean_length"):

        def draw_length(ax: Axes, recs: Sequence[dict]) -> None:
            _line(ax, recs, "completions/mean_length", "mean")
            for key, label in (
                ("completions/min_length", "min"),
                ("completions/max_length", "max"),
            ):
                if _has(recs, key):
                    xs, ys = _series(recs, key)
                    ax.plot(xs, ys, label=label, linewidth=0.8, linestyle="--")

        panels.append(_Panel("Completion length", "tokens", draw_length))

    # GRPO's loss is the group-normalised surrogate (mean advantage ~ 0 by construction): its
    # curve says nothing about learning, so it is shown for SFT runs only.
    later = [] if is_grpo else [("loss", "Training loss", "loss")]
    later += [
        ("mean_token_accuracy", "Mean token accuracy", "accuracy"),
        ("learning_rate", "Learning rate", "learning rate"),
    ]
    for key, title, ylabel in later:
        if _has(records, key):
            panels.append(_Panel(title, ylabel, lambda ax, recs, k=key: _line(ax, recs, k, k)))
    return panels


def plot_training(run_dir: str | Path, png: str | Path) -> Path:
    """Training curves of one run from ``<run_dir>/metrics.jsonl`` into ``png``.

    GRPO runs: reward and its components (with std bands), accuracy reward, reward std, KL (logged
    only when beta > 0), completion length, learning rate. SFT runs: loss, mean token accuracy,
    learning rate. A panel appears only when its key was logged; a run with no logged steps (or no
    metrics.jsonl yet) gets an image saying so.
    """
    run_dir = Path(run_dir)
    metrics = run_dir / "metrics.jsonl"
    records = load_metrics(metrics)
    title = run_dir.name or str(run_dir)
    panels = _training_panels(records)
    if not panels:
        if not metrics.is_file():
            reason = "no metrics.jsonl (the run has not logged yet)"
        elif not records:
            reason = "no logged steps yet in metrics.jsonl"
        else:
            reason = f"{len(records)} logged steps, none with a known training metric"
        return _message_png(png, f"Run {title}", reason)
    columns = 2 if len(panels) > 1 else 1
    rows = math.ceil(len(panels) / columns)
    with _pinned_style():
        fig = _new_figure(5.2 * columns, 3.0 * rows + 0.5)
        axes = fig.subplots(rows, columns, squeeze=False).ravel()
        for ax, panel in zip(axes, panels, strict=False):
            panel.draw(ax, records)
            ax.set_title(panel.title, fontsize=10)
            ax.set_xlabel("step")
            ax.set_ylabel(panel.ylabel)
            ax.grid(True, alpha=0.3)
            if len(ax.get_lines()) > 1:
                ax.legend(fontsize=8, loc="best")
        for ax in axes[len(panels) :]:
            ax.set_axis_off()
        fig.suptitle(f"Run {title}: {len(records)} logged steps")
        fig.tight_layout()
        return _save_png(fig, png)


def find_run_dirs(root: str | Path) -> list[Path]:
    """Run directories under ``root`` (itself included): folders holding metrics.jsonl and
    config.yaml. Hidden folders (atomic-write temporaries) are skipped; sorted for stable output."""
    root = Path(root)
    found = []
    for metrics in root.rglob("metrics.jsonl"):
        folder = metrics.parent
        relative = folder.relative_to(root).parts
        if any(part.startswith(".") for part in relative):
            continue
        if (folder / "config.yaml").is_file():
            found.append(folder)
    return sorted(found)


def plot_all_runs(root: str | Path, out_dir: str | Path | None = None) -> list[Path]:
    """``training.png`` for every run directory under ``root``; returns the PNG paths.

    By default each PNG goes beside its metrics.jsonl. With ``out_dir`` they all go there, named
    after the run's path below ``root`` (``a/runs/grpo`` -> ``a__runs__grpo.training.png``).
    """
    root = Path(root)
    written = []
    for run_dir in find_run_dirs(root):
        if out_dir is None:
            png = run_dir / "training.png"
        else:
            parts = run_dir.relative_to(root).parts or (root.resolve().name,)
            png = Path(out_dir) / ("__".join(parts) + ".training.png")
        written.append(plot_training(run_dir, png))
    return written


# --------------------------------------------------------------------------- accuracy plots


def _ci_errors(df: pd.DataFrame) -> tuple[list[float], list[float]]:
    """Error-bar lengths below and above each accuracy; 0 where the CI is missing."""
    below, above = [], []
    for acc, low, high in zip(df["accuracy"], df["ci_low"], df["ci_high"], strict=True):
        acc, low, high = _number(acc), _number(low), _number(high)
        below.append(max(0.0, acc - low) if acc is not None and low is not None else 0.0)
        above.append(max(0.0, high - acc) if acc is not None and high is not None else 0.0)
    return below, above


def _with_ci_columns(df: pd.DataFrame) -> pd.DataFrame:
    """A copy with numeric accuracy/ci_low/ci_high (missing CI columns read as NaN)."""
    import pandas as pd

    if "accuracy" not in df.columns:
        raise ValueError(
            f"accuracy plot: the frame needs an 'accuracy' column, has {list(df.columns)}"
        )
    out = df.copy()
    for column in ("accuracy", "ci_low", "ci_high"):
        values = out[column] if column in out.columns else float("nan")
        out[column] = pd.to_numeric(values, errors="coerce")
    return out


def _unique(values: Sequence[Any]) -> list[Any]:
    """Distinct values in first-seen order: the caller's row order sets the plot's order."""
    seen: list[Any] = []
    for value in values:
        if value not in seen:
            seen.append(value)
    return seen


def _legend(ax: Axes) -> None:
    """Outside the axes, right: bars and CI bands near 1.0 or 0.5 are never hidden."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)


def _decorate(ax: Axes, title: str, ylabel: str, reference: float | None, ref_label: str) -> None:
    if reference is not None:
        ax.axhline(reference, color="grey", linestyle=":", linewidth=1, label=ref_label)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)


def plot_accuracy_bars(
    df: pd.DataFrame,
    png: str | Path,
    *,
    label: str = "condition",
    hue: str | None = None,
    title: str = "",
    ylabel: str = "accuracy",
    reference: float | None = 0.5,
    reference_label: str = "chance",
) -> Path:
    """Bars of ``accuracy`` per ``label`` value with Wilson 95 % CI error bars (``ci_low``,
    ``ci_high``); with ``hue`` (e.g. ``"method"``) bars are grouped per label and coloured per hue
    value. Order follows the rows. Missing CIs draw no error bar; an empty frame gives a PNG
    saying so. ``reference`` draws a dotted line (chance by default; None for none).
    """
    if df.empty:
        return _message_png(png, title or "Accuracy", "no rows to plot")
    data = _with_ci_columns(df)
    label_values = data[label] if label in data.columns else data.index.to_series()
    data = data.assign(_label=[str(v) for v in label_values])
    data = data.assign(_hue=[str(v) for v in data[hue]] if hue else "")
    labels, hues = _unique(list(data["_label"])), _unique(list(data["_hue"]))
    width = 0.8 / len(hues)
    with _pinned_style():
        fig = _new_figure(max(5.0, 0.9 * len(labels) * max(1, len(hues)) ** 0.5 + 2), 4.2)
        ax = fig.add_subplot()
        colours = [f"C{i % 10}" for i in range(len(hues))]
        for i, (hue_value, colour) in enumerate(zip(hues, colours, strict=True)):
            part = data[data["_hue"] == hue_value]
            xs = [labels.index(v) - 0.4 + width * (i + 0.5) for v in part["_label"]]
            heights = [0.0 if _number(a) is None else float(a) for a in part["accuracy"]]
            ax.bar(xs, heights, width=width * 0.95, color=colour, label=hue_value or None)
            has_ci = (part["ci_low"].notna() & part["ci_high"].notna()).tolist()
            if any(has_ci):
                below, above = _ci_errors(part[has_ci])
                ax.errorbar(
                    [x for x, ok in zip(xs, has_ci, strict=True) if ok],
                    [h for h, ok in zip(heights, has_ci, strict=True) if ok],
                    yerr=[below, above],
                    fmt="none",
                    ecolor="black",
                    capsize=3,
                    linewidth=1,
                )
        ax.set_xticks(
            range(len(labels)),
            labels,
            rotation=30 if len(labels) > 4 else 0,
            ha="right" if len(labels) > 4 else "center",
        )
        ax.set_ylim(0, 1.05)
        _decorate(ax, title, ylabel, reference, reference_label)
        _legend(ax)
        fig.tight_layout()
        return _save_png(fig, png)


def plot_accuracy_trend(
    df: pd.DataFrame,
    x: str,
    png: str | Path,
    *,
    hue: str | None = None,
    title: str = "",
    xlabel: str | None = None,
    ylabel: str = "accuracy",
    reference: float | None = 0.5,
    reference_label: str = "chance",
) -> Path:
    """Accuracy with its Wilson 95 % CI band against a numeric ``x`` (e.g. ``bias_level``), one
    line per ``hue`` value (e.g. ``"method"``). Rows whose ``x`` is missing or not a number cannot
    be placed; they are left out and counted in a note on the figure. Missing CIs draw no band.
    """
    import pandas as pd

    if df.empty or x not in df.columns:
        why = "no rows to plot" if df.empty else f"no column {x!r}"
        return _message_png(png, title or "Accuracy", why)
    data = _with_ci_columns(df)
    data = data.assign(_x=pd.to_numeric(data[x], errors="coerce"))
    data = data.assign(_hue=[str(v) for v in data[hue]] if hue else "")
    dropped = int(data["_x"].isna().sum())
    data = data[data["_x"].notna()]
    with _pinned_style():
        fig = _new_figure(6.4, 4.2)
        ax = fig.add_subplot()
        for i, hue_value in enumerate(_unique(list(data["_hue"]))):
            part = data[data["_hue"] == hue_value].sort_values("_x", kind="mergesort")
            colour = f"C{i % 10}"
            ax.plot(part["_x"], part["accuracy"], marker="o", color=colour, label=hue_value or None)
            band = part[part["ci_low"].notna() & part["ci_high"].notna()]
            if len(band):
                ax.fill_between(
                    band["_x"],
                    band["ci_low"],
                    band["ci_high"],
                    color=colour,
                    alpha=0.18,
                    linewidth=0,
                )
        if dropped:
            ax.text(
                0.01,
                0.01,
                f"{dropped} row(s) without a numeric {x} not shown",
                transform=ax.transAxes,
                fontsize=8,
                va="bottom",
            )
        ax.set_xlabel(xlabel or x)
        ax.set_ylim(0, 1.05)
        _decorate(ax, title, ylabel, reference, reference_label)
        _legend(ax)
        fig.tight_layout()
        return _save_png(fig, png)
