"""`vqa-r1 demo`: the study's comparisons on CPU in minutes, on the embedded default.

Synthetic scenes -> a tiny model pretrained here on general skills (`vqa-r1 pretrain`, shipped) ->
four rows, as in the published study: the base model zero-shot with the reasoning prompt, SFT
(LoRA), GRPO from the base model (the study's main setting) and GRPO continuing the SFT adapter,
all evaluated on held-out test scenes -> a table, ``results.json`` and a reward curve under
``results/demo/``. Every stage is the same library code a cluster job runs; only recipes differ.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from vqa_r1.cli.common import add_set_argument
from vqa_r1.data.datasets import dataset_dir
from vqa_r1.errors import UserError
from vqa_r1.eval.evaluate import evaluate
from vqa_r1.io import atomic_write_json, read_jsonl
from vqa_r1.logging_setup import setup_logging
from vqa_r1.metrics import one_sided_binomial_p, two_proportion_p
from vqa_r1.recipes import load_config
from vqa_r1.report.experiment import EXPERIMENT_FILE, build_report

MODEL = "tiny-qwen2.5-vl-pretrained"
ROWS = ("base", "sft", "grpo", "sft+grpo")


def add_arguments(parser: argparse.ArgumentParser, verb: str = "") -> None:
    parser.add_argument(
        "--model", default=MODEL, help=f"registered model to start from (default: {MODEL})"
    )
    parser.add_argument(
        "--out", default="results/demo", help="output folder (default: results/demo)"
    )
    parser.add_argument(
        "--sft-steps", type=int, default=None, help="override the SFT recipe's max_steps"
    )
    parser.add_argument(
        "--grpo-steps", type=int, default=None, help="override the GRPO recipes' max_steps"
    )
    parser.add_argument(
        "--eval-limit", type=int, default=None, help="evaluate on the first N test items only"
    )
    parser.add_argument(
        "--rows",
        default=",".join(ROWS),
        help=f"comma-separated rows to train and evaluate (default: all of {', '.join(ROWS)})",
    )
    parser.add_argument(
        "--split",
        default="test",
        choices=("train", "validation", "test"),
        help="split the rows are evaluated on (default: test; tune on validation)",
    )
    add_set_argument(parser, "override applied to every stage, e.g. data.synthetic_train=500")
    parser.add_argument(
        "--fresh", action="store_true", help="delete earlier demo runs in --out first"
    )
    parser.add_argument(
        "--verbose", action="store_true", help="show the libraries' own logs and progress bars"
    )


def run(args: argparse.Namespace) -> int:
    import shutil

    from vqa_r1.train.progress import quiet_libraries
    from vqa_r1.train.runner import train

    wanted = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = [r for r in wanted if r not in ROWS]
    if unknown or not wanted:
        raise UserError(f"--rows: unknown {unknown}; choose from {', '.join(ROWS)}")
    setup_logging()
    if not args.verbose:
        quiet_libraries()
    out = Path(args.out).resolve()
    runs = out / "runs"
    if args.fresh and runs.exists():
        shutil.rmtree(runs)
    seconds: dict[str, float] = {}
    quiet = not args.verbose

    def steps(n: int | None) -> list[str]:
        return [f"train.max_steps={n}"] if n else []

    def config(verb: str, extra: list[str], **fields):  # the model's own (tuned) recipes
        return load_config(verb, args.model, None, args.overrides + extra, **fields)

    started = time.perf_counter()
    sft_cfg = config("sft", steps(args.sft_steps))
    data = dataset_dir(sft_cfg.data)
    seconds["data"] = time.perf_counter() - started
    print(f"data: synthetic scenes in {data} ({seconds['data']:.0f} s)", flush=True)

    def timed_train(name: str, cfg, run_dir: Path) -> dict:
        t = time.perf_counter()
        status = train(cfg, run_dir, progress=f"{name:>8}" if quiet else None)
        seconds[name] = time.perf_counter() - t
        print(f"{name}: {training_summary(run_dir)} ({seconds[name]:.0f} s)", flush=True)
        return status

    if "sft" in wanted or "sft+grpo" in wanted:
        timed_train("sft", sft_cfg, runs / "sft")
    grpo_steps = steps(args.grpo_steps)
    if "grpo" in wanted:
        timed_train("grpo", config("grpo", grpo_steps), runs / "grpo")
    if "sft+grpo" in wanted:
        sft_adapter = str(runs / "sft" / "final")
        timed_train(
            "sft+grpo",
            config("grpo", grpo_steps, init_adapter=sft_adapter),
            runs / "sft+grpo",
        )

    eval_overrides = [f"eval.split={args.split}"]
    if args.eval_limit is not None:  # 0 is refused by eval.limit, not read as "all"
        eval_overrides.append(f"eval.limit={args.eval_limit}")
    adapters = {"base": None, "sft": runs / "sft", "grpo": runs / "grpo"}
    adapters["sft+grpo"] = runs / "sft+grpo"
    rows = {}
    for name in wanted:
        adapter = adapters[name]
        t = time.perf_counter()
        cfg = config("evaluate", eval_overrides)
        rows[name] = evaluate(cfg, out / "eval" / name, adapter=adapter, progress=quiet)
        seconds[f"eval_{name}"] = time.perf_counter() - t
        s = rows[name]
        lo, hi = s["accuracy_ci_95"]
        print(
            f"evaluate {name}: accuracy {s['accuracy']:.3f} [{lo:.3f}, {hi:.3f}], "
            f"format {s['format_rate']:.3f}, n {s['n']} ({seconds[f'eval_{name}']:.0f} s)",
            flush=True,
        )

    table = results_table(rows, seconds)
    grpo_runs = {n: runs / n / "metrics.jsonl" for n in ("grpo", "sft+grpo") if n in wanted}
    if grpo_runs:
        plot_rewards(grpo_runs, out / "reward_curve.png")
    keys = (
        "accuracy",
        "accuracy_ci_95",
        "format_rate",
        "n",
        "correct",
        "f1_weighted",
        "per_relation",
    )
    summary = {
        "model": args.model,
        "split": args.split,
        "results": {k: {m: v[m] for m in keys} for k, v in rows.items()},
        "seconds": {k: round(v, 1) for k, v in seconds.items()},
        "comparisons": comparisons(rows),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "results.md").write_text(table + "\n")
    declare(out, list(rows), args.model, args.split)
    build_report(out)  # tables/ (Markdown, CSV, LaTeX), plots/, each run's training.png
    print("\n" + table)
    total = time.perf_counter() - started
    print(f"\ntotal {total / 60:.1f} min; table, results.json and reward curve in {out}")
    return 0


def declare(out: Path, names: list[str], model: str, split: str) -> None:
    """The demo's table as an experiment declaration, so `vqa-r1 tables` rebuilds it (with the
    experiments' tables) from the run directories."""
    table = {
        "name": "accuracy",
        "title": f"Demo on {model}: accuracy on the {split} split",
        "rows": [{"step": f"eval/{name}", "labels": {"model": name}} for name in names],
        "per_relation": True,
        "tests": [{"kind": "versus", "reference": {"model": "base"}}],
        "plots": [{"kind": "bars", "group": "model", "file": "accuracy.png"}],
    }
    header = {"experiment": "demo", "kind": "demo", "model": model, "steps": [], "tables": [table]}
    atomic_write_json(out / EXPERIMENT_FILE, header)


def training_summary(run_dir: Path) -> str:
    """One line from a run's metrics.jsonl: steps, and the last logged loss or rewards."""
    records = read_jsonl(run_dir / "metrics.jsonl", missing_ok=True)
    steps = max((r["step"] for r in records if "step" in r), default=0)
    logged = [r for r in records if "loss" in r or "reward" in r]
    if not logged:  # a run shorter than logging_steps logs only its closing summary
        return f"{steps} steps, nothing logged"
    parts = [f"{steps} steps"]
    tail = logged[-max(1, len(logged) // 10) :]
    for key, label in (
        ("rewards/accuracy_reward/mean", "accuracy reward"),
        ("rewards/format_reward/mean", "format reward"),
        ("loss", "loss"),
    ):
        values = [r[key] for r in tail if key in r]
        if values:
            parts.append(f"{label} {sum(values) / len(values):.3f}")
    return ", ".join(parts) + " (mean of the last 10 % of logged steps)"


def comparisons(rows: dict[str, dict]) -> dict:
    """One-sided two-proportion z-tests of each trained row against base and against chance."""

    out = {}
    base = rows.get("base")
    for name, s in rows.items():
        k, n = s["correct"], s["n"]
        entry = {"vs_chance_p": one_sided_binomial_p(k, n, 0.5)}
        if name != "base" and base is not None:
            entry["vs_base_p"] = two_proportion_p(k, n, base["correct"], base["n"])
        out[name] = entry
    return out


def results_table(rows: dict[str, dict], seconds: dict[str, float] | None = None) -> str:
    seconds = seconds or {}
    lines = [
        "| model | accuracy | 95 % CI (Wilson) | format rate | weighted F1 | n | train s | eval s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, s in rows.items():
        lo, hi = s["accuracy_ci_95"]
        train_s = f"{seconds[name]:.0f}" if name in seconds else "-"
        eval_s = f"{seconds[f'eval_{name}']:.0f}" if f"eval_{name}" in seconds else "-"
        lines.append(
            f"| {name} | {s['accuracy']:.3f} | [{lo:.3f}, {hi:.3f}] | {s['format_rate']:.3f} "
            f"| {s['f1_weighted']:.3f} | {s['n']} | {train_s} | {eval_s} |"
        )
    return "\n".join(lines)


def plot_rewards(metrics: dict[str, Path], png: Path) -> None:
    """Accuracy and format reward per GRPO step, one panel per GRPO run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 3.6), squeeze=False)
    for ax, (name, path) in zip(axes[0], metrics.items(), strict=True):
        records = [r for r in read_jsonl(path, missing_ok=True) if "reward" in r]
        for key, label in (
            ("rewards/accuracy_reward/mean", "accuracy reward"),
            ("rewards/format_reward/mean", "format reward"),
        ):
            points = [(r["step"], r[key]) for r in records if r.get(key) is not None]
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, label=label, linewidth=1)
        ax.set(title=f"GRPO: {name}", xlabel="step", ylabel="mean reward", ylim=(-0.02, 1.02))
        ax.legend(loc="lower right")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
