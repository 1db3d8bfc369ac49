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
import json
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


def _wrap(text: str, fig: Figure, fontsize: float = 12.0) -> str:
    """``text`` broken into lines that fit the figure's width (a long title was cut off at both
    edges). Width per character is taken as 0.6 em, generous for DejaVu Sans."""
    import textwrap

    width_pt = fig.get_figwidth() * 72 * 0.94
    return "\n".join(textwrap.wrap(text, max(20, int(width_pt / (0.6 * fontsize))))) or text


def _message_png(png: str | Path, title: str, message: str) -> Path:
    """A small image that says why there is no plot: callers always get a PNG, never a crash."""
    with _pinned_style():
        fig = _new_figure(6, 2.4)
        ax = fig.add_subplot()
        ax.set_axis_off()
        ax.set_title(_wrap(title, fig))
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


SHORT_CURVE = 60  # points; a curve with at most this many shows each logged point as a marker


def _marker(points: int, marker: str = ".") -> str | None:
    """A marker for a short curve: with few points the reader must see where the values are."""
    return marker if points <= SHORT_CURVE else None


def _line(ax: Axes, records: Sequence[dict], key: str, label: str, band_key: str = "") -> None:
    """One curve, with a +-band from ``band_key`` (e.g. a reward's std) where both are logged."""
    xs, ys = _series(records, key)
    (line,) = ax.plot(xs, ys, label=label, linewidth=1.2, marker=_marker(len(xs)))
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
                    ax.plot(
                        xs, ys, label=label, linewidth=0.8, linestyle="--", marker=_marker(len(xs))
                    )

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


def _health_alarms(run_dir: Path) -> list[dict]:
    """status.json's run-health alarms (train/health.py) with a numeric step; [] without any."""
    try:
        status = json.loads((run_dir / "status.json").read_text())
    except (OSError, ValueError):
        return []
    alarms = status.get("health") if isinstance(status, dict) else None
    return [
        a
        for a in alarms or []
        if isinstance(a, dict) and _number(a.get("step")) is not None and a.get("code")
    ]


HEALTH_KEYS = (
    ("frac_reward_zero_std", "groups with zero reward std"),
    ("completions/clipped_ratio", "completions cut at the limit"),
)


def _health_panel(records: Sequence[dict], alarms: Sequence[dict]) -> _Panel | None:
    """A run with health alarms: the shares its alarms read, the alarms' codes at their steps."""
    keys = [(k, label) for k, label in HEALTH_KEYS if _has(records, k)]
    if not alarms or not keys:
        return None

    def draw(ax: Axes, recs: Sequence[dict]) -> None:
        for key, label in keys:
            _line(ax, recs, key, label)
        ax.set_ylim(-0.02, 1.25)  # room above 1 for the alarms' codes
        _mark_alarms(ax, alarms, labels=True)

    return _Panel("Run health alarms (train/health.py)", "share", draw)


def _mark_alarms(ax: Axes, alarms: Sequence[dict], labels: bool = False) -> None:
    """Each alarm as a red dashed line at its step; ``labels``: the codes of a step written
    along its line."""
    steps: dict[float, list[str]] = {}
    for alarm in alarms:
        steps.setdefault(float(alarm["step"]), []).append(str(alarm["code"]))
    for step, codes in steps.items():
        ax.axvline(step, color="tab:red", linestyle="--", linewidth=1.0)
        if not labels:
            continue
        ax.annotate(
            ", ".join(codes),
            xy=(step, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(2, -2),
            textcoords="offset points",
            rotation=90,
            va="top",
            ha="left",
            fontsize=7,
            color="tab:red",
            bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none", "pad": 1},
        )


def no_curves_reason(run_dir: Path, records: list[dict]) -> str:
    """Why a run has no training curves: a finished run is not waiting to log (its logging
    interval was longer than the run), a running one may be."""
    from vqa_r1.claims import is_complete

    if records:
        return f"{len(records)} logged steps, none with a known training metric"
    if is_complete(run_dir):
        return (
            "the run completed without logging a training step (train.logging_steps is larger "
            "than its number of steps)"
        )
    if not (run_dir / "metrics.jsonl").is_file():
        return "no metrics.jsonl (the run has not logged yet)"
    return "no logged steps yet in metrics.jsonl"


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
    alarms = _health_alarms(run_dir)
    health = _health_panel(records, alarms)
    if health is not None:
        panels.insert(0, health)
    if not panels:
        return _message_png(png, f"Run {title}", no_curves_reason(run_dir, records))
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
            if panel is not health:
                _mark_alarms(ax, alarms)  # after the legend: the markers are not curves
        for ax in axes[len(panels) :]:
            ax.set_axis_off()
        codes = ", ".join(f"{a['code']} (step {a['step']})" for a in alarms)
        said = f"; health alarms: {codes}" if codes else ""
        fig.suptitle(_wrap(f"Run {title}: {len(records)} logged steps{said}", fig))
        fig.tight_layout()
        return _save_png(fig, png)


def plot_reward_curves(runs: dict[str, Path], png: str | Path) -> Path:
    """Every reward component per step, one panel per GRPO run side by side (the demo's
    GRPO-from-base against SFT-then-GRPO), on one 0-1 scale so the panels compare."""
    loaded = {name: load_metrics(Path(run) / "metrics.jsonl") for name, run in runs.items()}
    if not any(_reward_names(records) for records in loaded.values()):
        return _message_png(png, "Rewards", "no GRPO step logged a reward yet")
    with _pinned_style():
        fig = _new_figure(5.0 * len(loaded), 3.6)
        axes = fig.subplots(1, len(loaded), squeeze=False)[0]
        for ax, (name, records) in zip(axes, loaded.items(), strict=True):
            for reward in _reward_names(records):
                label = reward.removesuffix("_reward").replace("_", " ") + " reward"
                _line(ax, records, f"rewards/{reward}/mean", label)
            ax.set(title=f"GRPO: {name}", xlabel="step", ylabel="mean reward", ylim=(-0.02, 1.02))
            ax.grid(True, alpha=0.3)
            if ax.get_lines():
                ax.legend(fontsize=8, loc="lower right")
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


REFERENCE_GID = "reference-line"  # chance or a base model's accuracy: listed last in legends


def _legend(ax: Axes, title: str | None = None) -> None:
    """Outside the axes, right: bars and CI bands near 1.0 or 0.5 are never hidden. ``title``
    says what the colours are (e.g. "trained on")."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        # the coloured groups first (under the title), then the interval, then reference lines
        kind = [2 if getattr(h, "get_gid", lambda: None)() == REFERENCE_GID
                else 1 if label.startswith("Wilson") else 0
                for h, label in zip(handles, labels, strict=True)]  # fmt: skip
        order = sorted(range(len(handles)), key=lambda i: kind[i])
        ax.legend(
            [handles[i] for i in order],
            [labels[i] for i in order],
            fontsize=8,
            title=title or None,
            title_fontsize=8,
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            borderaxespad=0,
        )


def _decorate(ax: Axes, title: str, ylabel: str, reference: float | None, ref_label: str) -> None:
    if reference is not None:
        ax.axhline(
            reference, color="grey", linestyle=":", linewidth=1, label=ref_label, gid=REFERENCE_GID
        )
    ax.set_ylabel(ylabel)
    if title:  # over the whole figure, wrapped to its width: never cut off
        ax.figure.suptitle(_wrap(title, ax.figure))
    ax.grid(True, axis="y", alpha=0.3)


def _counts(df: pd.DataFrame) -> list[int | None]:
    """Each row's n (the sample behind its interval), None where unknown."""
    import pandas as pd

    if "n" not in df.columns:
        return [None] * len(df)
    numbers = pd.to_numeric(df["n"], errors="coerce").astype(float)  # Int64, NA, text -> NaN
    return [None if _number(v) is None else int(v) for v in numbers]


def _ci_label(counts: Sequence[int | None]) -> tuple[str, bool]:
    """The interval's legend text, and whether each point must carry its own n (they differ)."""
    known = {n for n in counts if n is not None}
    if len(known) == 1 and None not in counts:
        return f"Wilson 95 % CI (n = {known.pop()} each)", False
    if known:
        return "Wilson 95 % CI (n at each point)", True
    return "Wilson 95 % CI", False


def plot_accuracy_bars(
    df: pd.DataFrame,
    png: str | Path,
    *,
    label: str = "condition",
    hue: str | None = None,
    title: str = "",
    xlabel: str | None = None,
    ylabel: str = "accuracy",
    reference: float | None = 0.5,
    reference_label: str = "chance",
    floor: str | None = None,
) -> Path:
    """Bars of ``accuracy`` per ``label`` value with Wilson 95 % CI error bars (``ci_low``,
    ``ci_high``); with ``hue`` (e.g. ``"method"``) bars are grouped per label and coloured per hue
    value, the legend titled with ``hue``. The x axis is labelled ``xlabel`` (default ``label``).
    The error bars are named in the legend with their n (column ``n``: "n = 400 each", or each
    bar's n written on it when they differ). Order follows the rows. Missing CIs draw no error
    bar; an empty frame gives a PNG saying so. ``reference`` draws a dotted line (chance by
    default; None for none). ``floor`` names a column holding each row's own floor (e.g. "most
    frequent answer": what answering without the skill scores on the row's set); a dashed line
    across each group's bars marks it, since a bar above base but not above its set's floor has
    learned an answer, not the task.
    """
    if df.empty:
        return _message_png(png, title or "Accuracy", "no rows to plot")
    data = _with_ci_columns(df)
    label_values = data[label] if label in data.columns else data.index.to_series()
    data = data.assign(_label=[str(v) for v in label_values])
    data = data.assign(_hue=[str(v) for v in data[hue]] if hue else "")
    labels, hues = _unique(list(data["_label"])), _unique(list(data["_hue"]))
    width = 0.8 / len(hues)
    with_ci = data[data["ci_low"].notna() & data["ci_high"].notna()]
    ci_label, each = _ci_label(_counts(with_ci))
    with _pinned_style():
        fig = _new_figure(max(6.4, 0.9 * len(labels) * max(1, len(hues)) ** 0.5 + 3), 4.2)
        ax = fig.add_subplot()
        colours = [f"C{i % 10}" for i in range(len(hues))]
        labelled = False
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
                    label=None if labelled else ci_label,  # one legend entry for all
                )
                labelled = True
            if each:  # the bars' samples differ: each says its own
                for x, n in zip(xs, _counts(part), strict=True):
                    if n is not None:
                        ax.text(x, 0.02, f"n={n}", rotation=90, ha="center", va="bottom",
                                fontsize=7, color="white")  # fmt: skip
        ax.set_xticks(
            range(len(labels)),
            labels,
            rotation=30 if len(labels) > 4 else 0,
            ha="right" if len(labels) > 4 else "center",
        )
        if floor and floor in data.columns:
            _floor_marks(ax, data, labels, floor)
        ax.set_ylim(0, 1.05)
        ax.set_xlabel(xlabel or label)
        _decorate(ax, title, ylabel, reference, reference_label)
        _legend(ax, hue)
        fig.tight_layout()
        return _save_png(fig, png)


def _floor_marks(ax: Axes, data: pd.DataFrame, labels: list[str], floor: str) -> None:
    """A dashed line across each group at its rows' ``floor`` (the highest, where they differ);
    one legend entry, sorted with the reference lines."""
    labelled = False
    for x, value in enumerate(labels):
        values = [_number(v) for v in data.loc[data["_label"] == value, floor]]
        known = [v for v in values if v is not None]
        if not known:
            continue
        ax.hlines(max(known), x - 0.42, x + 0.42, colors="black", linestyles="--", linewidth=1.2,
                  label=None if labelled else floor, gid=REFERENCE_GID)  # fmt: skip
        labelled = True


def _scaled_limits(values: Sequence[float]) -> tuple[float, float]:
    """A y range around ``values`` (the points, their intervals, the reference line) with a
    margin, inside [0, 1]: differences of a few points stay visible instead of a flat line at
    the top of a 0-1 axis."""
    low, high = min(values), max(values)
    pad = max(0.02, 0.12 * (high - low))
    return max(0.0, low - pad), min(1.0, high + pad) + (0.01 if high + pad >= 1.0 else 0.0)


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
    chance: float | None = None,
) -> Path:
    """Accuracy with its Wilson 95 % CI band against a numeric ``x`` (e.g. ``bias_level``), one
    line per ``hue`` value (e.g. ``"method"``; the legend titled with it). Rows whose ``x`` is
    missing or not a number cannot be placed; they are left out and counted in a note on the
    figure. Missing CIs draw no band; the band is named in the legend with its n.

    The y axis is scaled to the points, their bands and ``reference`` (e.g. the base model's
    accuracy), not 0-1. ``chance``, when given besides the reference, is a second line, or a
    note on the figure when it lies outside that range.
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
    banded = data[data["ci_low"].notna() & data["ci_high"].notna()]
    ci_label, each = _ci_label(_counts(banded))
    with _pinned_style():
        fig = _new_figure(7.4, 4.2)
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
            if each:
                for x, y, n in zip(part["_x"], part["accuracy"], _counts(part), strict=True):
                    if n is not None and _number(y) is not None:
                        ax.annotate(f"n={n}", (x, y), textcoords="offset points", xytext=(4, 4),
                                    fontsize=7, color=colour)  # fmt: skip
        if len(banded):  # the bands' legend entry, in grey: one for every colour
            ax.fill_between([], [], [], color="grey", alpha=0.3, linewidth=0, label=ci_label)
        lines = [v for v in (reference, chance) if v is not None]
        spread = [*data["accuracy"].dropna(), *banded["ci_low"], *banded["ci_high"]]
        spread += [reference] if reference is not None else []
        low, high = _scaled_limits(spread) if spread else (0.0, 1.05)
        if chance is not None and chance not in lines[:1]:
            if low <= chance <= high:
                ax.axhline(chance, color="black", linestyle="--", linewidth=0.8, label="chance",
                           gid=REFERENCE_GID)  # fmt: skip
            else:
                ax.text(0.99, 0.01, f"chance ({chance:g}) {'below' if chance < low else 'above'}"
                        " the axis", transform=ax.transAxes, ha="right", va="bottom", fontsize=8,
                        color="dimgrey")  # fmt: skip
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
        ax.set_ylim(low, high)
        _decorate(ax, title, ylabel, reference, reference_label)
        _legend(ax, hue)
        fig.tight_layout()
        return _save_png(fig, png)
