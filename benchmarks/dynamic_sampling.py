"""What dynamic sampling buys on the demo: GRPO from the base model with and without it, same seeds.

``python -m benchmarks.dynamic_sampling --out results/dynamic-sampling`` trains the demo's GRPO row
(the model's own recipe: 2 prompts x 8 completions a step) once per seed and setting, evaluates the
adapter of the checkpoints at half and all of ``--steps`` on the validation split (tuning data; the test split stays
the demo's), and writes ``results.json``, ``table.md`` and ``accuracy.png``: validation accuracy
against the training seconds to that checkpoint and against the completions generated to it
(dynamic sampling generates more per step). Both settings run one after another in this process on
the same machine, so their seconds compare; each run's seconds are its own (a timing callback from
the start of training to each save), model loading excluded.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from transformers import TrainerCallback

from vqa_r1.eval.evaluate import evaluate
from vqa_r1.recipes import load_config
from vqa_r1.train.runner import train

MODEL = "tiny-qwen2.5-vl-pretrained"
SETTINGS = {"off": "train.dynamic_sampling=false", "on": "train.dynamic_sampling=true"}


class SaveClock(TrainerCallback):
    """Seconds from the start of training to each checkpoint, and completions generated so far."""

    def __init__(self) -> None:
        self.start = 0.0
        self.saves: dict[int, float] = {}

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.perf_counter()

    def on_save(self, args, state, control, **kwargs):
        self.saves[state.global_step] = round(time.perf_counter() - self.start, 1)


def generated_completions(run_dir: Path, size: int, groups_per_step: int) -> dict[int, int]:
    """Completions generated up to each logged step: dynamic sampling logs its groups per step
    (averaged over the logging interval); without it every step generates one batch."""
    total, last, out = 0.0, 0, {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "loss" not in row:
            continue
        groups = row.get("dynamic_sampling/generated_groups", groups_per_step)
        total += groups * size * (row["step"] - last)
        last = row["step"]
        out[last] = round(total)
    return out


def run(out: Path, seeds: list[int], steps: int, limit: int, rounds: int) -> list[dict]:
    rows = []
    for seed in seeds:
        for name, setting in SETTINGS.items():
            overrides = [
                setting,
                f"train.seed={seed}",
                f"train.max_steps={steps}",
                f"train.save_steps={steps // 2}",  # two points per run
                f"train.dynamic_sampling_max_rounds={rounds}",
            ]
            config = load_config("grpo", MODEL, overrides=overrides)
            if (steps // 2) % config.train.logging_steps:  # completions are read at each save
                config.train.logging_steps = 1
            run_dir = out / "runs" / f"{name}-seed{seed}"
            clock = SaveClock()
            train(config, run_dir, callbacks=[clock], progress=f"{name} seed {seed}")
            timing = run_dir / "save_seconds.json"  # a re-run finds the run complete: its clock
            if clock.saves:
                timing.write_text(json.dumps(clock.saves))
            saves = {int(k): v for k, v in json.loads(timing.read_text()).items()}
            size = config.train.num_generations
            groups = config.train.per_device_train_batch_size // size
            made = generated_completions(run_dir, size, groups)
            for step, seconds in sorted(saves.items()):
                eval_config = load_config(
                    "evaluate",
                    MODEL,
                    overrides=["eval.split=validation", f"eval.limit={limit}"],
                )
                scores = evaluate(
                    eval_config,
                    out / "eval" / f"{name}-seed{seed}-step{step}",
                    adapter=run_dir / "checkpoints" / f"checkpoint-{step}",
                    progress=False,
                )
                rows.append(
                    {
                        "dynamic_sampling": name,
                        "seed": seed,
                        "step": step,
                        "train_seconds": seconds,
                        "completions": made[step],
                        "accuracy": scores["accuracy"],
                        "n": scores["n"],
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
    return rows


def table(rows: list[dict]) -> str:
    """Per setting and checkpoint: mean over seeds of accuracy, seconds and completions."""
    lines = [
        "| dynamic sampling | step | seeds | accuracy (mean) | accuracy (min-max) | train s "
        "(mean) | completions (mean) | accuracy gain / min | accuracy gain / 1k completions |",
        "|:---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    base = rows[0].get("base_accuracy")
    keys = sorted({(r["dynamic_sampling"], r["step"]) for r in rows})
    for name, step in keys:
        group = [r for r in rows if (r["dynamic_sampling"], r["step"]) == (name, step)]
        acc = [r["accuracy"] for r in group]
        secs = statistics.mean(r["train_seconds"] for r in group)
        made = statistics.mean(r["completions"] for r in group)
        gain = statistics.mean(acc) - base if base is not None else float("nan")
        lines.append(
            f"| {name} | {step} | {len(group)} | {statistics.mean(acc):.3f} | "
            f"{min(acc):.3f}-{max(acc):.3f} | {secs:.0f} | {made:.0f} | "
            f"{gain / (secs / 60):.3f} | {gain / (made / 1000):.3f} |"
        )
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    colours = {"off": "tab:blue", "on": "tab:orange"}
    for (x, label), ax in zip(
        (("train_seconds", "training seconds"), ("completions", "completions generated")),
        axes,
        strict=True,
    ):
        for name in SETTINGS:
            for seed in sorted({r["seed"] for r in rows}):
                pts = sorted(
                    (r[x], r["accuracy"])
                    for r in rows
                    if r["dynamic_sampling"] == name and r["seed"] == seed
                )
                if rows[0].get("base_accuracy") is not None:
                    pts.insert(0, (0, rows[0]["base_accuracy"]))  # every run starts at base
                first = seed == min(r["seed"] for r in rows)
                ax.plot(
                    *zip(*pts, strict=True),
                    marker="o",
                    color=colours[name],
                    alpha=0.7,
                    label=f"dynamic sampling {name}" if first else None,
                )
        if rows[0].get("base_accuracy") is not None:
            ax.axhline(rows[0]["base_accuracy"], color="grey", ls="--", label="base model")
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("validation accuracy")
    axes[0].legend(loc="lower right")
    fig.suptitle(f"GRPO on {MODEL}, one line per seed")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dynamic_sampling")
    parser.add_argument("--out", default="results/dynamic-sampling")
    parser.add_argument("--seeds", default="1,2,3", help="comma-separated training seeds")
    parser.add_argument("--steps", type=int, default=200, help="GRPO steps per run")
    parser.add_argument("--limit", type=int, default=200, help="validation items evaluated")
    parser.add_argument(
        "--max-rounds", type=int, default=4, help="train.dynamic_sampling_max_rounds of the on runs"
    )
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",")]
    base = evaluate(
        load_config(
            "evaluate", MODEL, overrides=["eval.split=validation", f"eval.limit={args.limit}"]
        ),
        out / "eval" / "base",
        progress=False,
    )
    rows = [
        {**r, "base_accuracy": base["accuracy"]}
        for r in run(out, seeds, args.steps, args.limit, args.max_rounds)
    ]
    (out / "results.json").write_text(json.dumps(rows, indent=1) + "\n")
    (out / "table.md").write_text(table(rows))
    plot(rows, out / "accuracy.png")
    print((out / "table.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
