"""`vqa-r1 demo`: the whole pipeline on CPU in minutes, on the embedded default.

Synthetic scenes -> SFT of a tiny random-init Qwen2.5-VL (LoRA) -> GRPO from the SFT adapter ->
evaluation of base, SFT and GRPO on held-out test scenes -> a table and a reward curve under
``results/demo/``. Every stage is the same library code a cluster job runs; only the recipes differ.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

MODEL = "tiny-qwen2.5-vl"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", default="results/demo", help="output folder (default: results/demo)"
    )
    parser.add_argument(
        "--sft-steps", type=int, default=None, help="override the SFT recipe's max_steps"
    )
    parser.add_argument(
        "--grpo-steps", type=int, default=None, help="override the GRPO recipe's max_steps"
    )
    parser.add_argument(
        "--eval-limit", type=int, default=None, help="evaluate on the first N test items only"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override applied to all three stages, e.g. data.synthetic_train=500",
    )
    parser.add_argument("--fresh", action="store_true", help="delete earlier demo runs first")


def run(args: argparse.Namespace) -> int:
    import shutil

    from vqa_r1.config import load_config
    from vqa_r1.eval.evaluate import evaluate
    from vqa_r1.logging_setup import setup_logging
    from vqa_r1.train.runner import train

    setup_logging()
    out = Path(args.out).resolve()
    runs = out / "runs"
    if args.fresh and runs.exists():
        shutil.rmtree(runs)
    timings: dict[str, float] = {}

    def stage(name: str):
        print(f"\n=== {name} ===", flush=True)
        return time.perf_counter()

    t = stage("data: synthetic spatial scenes")
    from vqa_r1.data.datasets import dataset_dir

    sft_cfg = load_config("sft", MODEL, "demo_sft", args.overrides + _steps(args.sft_steps))
    print(f"dataset: {dataset_dir(sft_cfg.data)}")
    timings["data"] = time.perf_counter() - t

    t = stage("SFT (TRL SFTTrainer, LoRA) from random init")
    sft_dir = runs / "sft"
    train(sft_cfg, sft_dir)
    timings["sft"] = time.perf_counter() - t

    t = stage("GRPO (TRL GRPOTrainer) from the SFT adapter")
    grpo_cfg = load_config(
        "grpo",
        MODEL,
        "demo_grpo",
        args.overrides + _steps(args.grpo_steps),
        init_adapter=str(sft_dir / "final"),
    )
    grpo_dir = runs / "grpo"
    train(grpo_cfg, grpo_dir)
    timings["grpo"] = time.perf_counter() - t

    eval_overrides = list(args.overrides)
    if args.eval_limit:
        eval_overrides.append(f"eval.limit={args.eval_limit}")
    rows = {}
    for name, adapter in (("base", None), ("sft", sft_dir), ("grpo", grpo_dir)):
        t = stage(f"evaluate {name} on the test split")
        cfg = load_config("evaluate", MODEL, "demo_evaluate", eval_overrides)
        rows[name] = evaluate(cfg, out / "eval" / name, adapter=adapter)
        timings[f"eval_{name}"] = time.perf_counter() - t

    table = results_table(rows)
    plot_rewards(grpo_dir / "metrics.jsonl", sft_dir / "metrics.jsonl", out / "reward_curve.png")
    summary = {
        "model": MODEL,
        "results": {
            k: {
                m: v[m]
                for m in (
                    "accuracy",
                    "accuracy_ci_95",
                    "format_rate",
                    "n",
                    "f1_weighted",
                    "per_relation",
                )
            }
            for k, v in rows.items()
        },
        "seconds": {k: round(v, 1) for k, v in timings.items()},
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(summary, indent=2))
    (out / "results.md").write_text(table + "\n")
    print("\n" + table)
    print(f"\ntotal {sum(timings.values()) / 60:.1f} min; results, table and reward curve in {out}")
    return 0


def _steps(n: int | None) -> list[str]:
    return [f"train.max_steps={n}"] if n else []


def results_table(rows: dict[str, dict]) -> str:
    lines = [
        "| model | accuracy | 95 % CI (Wilson) | format rate | weighted F1 | n |",
        "|---|---|---|---|---|---|",
    ]
    for name, s in rows.items():
        lo, hi = s["accuracy_ci_95"]
        lines.append(
            f"| {name} | {s['accuracy']:.3f} | [{lo:.3f}, {hi:.3f}] | {s['format_rate']:.3f} "
            f"| {s['f1_weighted']:.3f} | {s['n']} |"
        )
    return "\n".join(lines)


def plot_rewards(grpo_metrics: Path, sft_metrics: Path, png: Path) -> None:
    """GRPO mean reward (and its parts) per step, next to the SFT loss."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def read(path: Path) -> list[dict]:
        if not path.exists():
            return []
        return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]

    grpo = [r for r in read(grpo_metrics) if "reward" in r]
    sft = [r for r in read(sft_metrics) if "loss" in r]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    if sft:
        ax1.plot([r["step"] for r in sft], [r["loss"] for r in sft], color="tab:gray")
    ax1.set(title="SFT loss", xlabel="step", ylabel="loss")
    window = max(1, len(grpo) // 20)
    for key, label in (
        ("reward", "total"),
        ("rewards/accuracy_reward/mean", "accuracy"),
        ("rewards/format_reward/mean", "format"),
    ):
        points = [(r["step"], r[key]) for r in grpo if r.get(key) is not None]
        if points:
            steps, values = zip(*points, strict=True)
            smooth = [
                sum(values[max(0, i - window + 1) : i + 1])
                / len(values[max(0, i - window + 1) : i + 1])
                for i in range(len(values))
            ]
            ax2.plot(steps, smooth, label=label)
    ax2.set(
        title=f"GRPO reward (moving mean over {window} logged points)",
        xlabel="step",
        ylabel="reward",
    )
    ax2.legend()
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
