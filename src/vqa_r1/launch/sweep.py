"""Sweeps: `--sweep key=v1,v2 [--sweep key2=...]` becomes one SLURM job array.

One array rather than N jobs because the scheduler then sees one request (one line in squeue, one
id to cancel, `%P` to bound how many run at once), while each element still gets its own run
directory `<output-dir>/<key>=<value>[,<key>=<value>...]` with its own resolved config.yaml, so a
requeued element resumes from its own checkpoints and `status` can report each one. Every element
is checked on the login node like a single job by the one builder (launch/build.py
``sweep_graph``); the sweep is a graph of independent steps, so a re-launch skips the complete
elements and keeps the queued ones. This module holds the grid: parsing, names, the description.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from vqa_r1.errors import UserError

# ------------------------------------------------------------------------------- parsing


def parse_sweeps(items: list[str]) -> dict[str, list[str]]:
    """`["train.seed=1,2", "lora.r=8,16"]` -> {"train.seed": ["1", "2"], "lora.r": ["8", "16"]}.

    Values stay strings: the config's own coercion types them (and names the key when it cannot).
    """
    keys: dict[str, list[str]] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UserError(f"--sweep {item!r}: expected key=v1,v2,..., e.g. train.seed=1,2,3")
        values = [v.strip() for v in raw.split(",")]
        if not raw.strip() or any(not v for v in values):
            raise UserError(f"--sweep {item!r}: empty value; give values separated by commas")
        if key in keys:
            raise UserError(f"--sweep {key} is given twice; list all its values in one --sweep")
        if len(set(values)) != len(values):
            raise UserError(f"--sweep {item!r}: a value is repeated")
        keys[key] = values
    return keys


def expand(keys: dict[str, list[str]]) -> list[dict[str, str]]:
    """The cartesian product, first key slowest (the order the user wrote)."""
    if not keys:
        return []
    names = list(keys)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*keys.values())]


def element_name(point: dict[str, str]) -> str:
    """`train.seed=1,lora.r=8`: readable, unique per point, and safe as one folder name."""
    text = ",".join(f"{k}={v}" for k, v in point.items())
    return text.replace("/", "_").replace(" ", "_")


def check_conflicts(keys: dict[str, list[str]], overrides: list[str]) -> None:
    """A key both swept and `--set` is ambiguous; say so rather than let one silently win."""
    fixed = {item.partition("=")[0].strip() for item in overrides or []}
    both = sorted(fixed.intersection(keys))
    if both:
        raise UserError(f"{', '.join(both)}: given both with --sweep and --set; keep one")


def sweep_settings(spec: Any, sweeps: list[str]) -> dict:
    """What makes two sweeps the same (claims.py): verb, model, recipe, --set, --sweep."""
    return {
        "verb": spec.verb,
        "model": spec.model,
        "recipe": spec.recipe,
        "set": list(spec.overrides),
        "sweep": list(sweeps),
    }


def check_shared_request(steps: list[Any]) -> None:
    """An array is one sbatch script: every element must ask for the same resources and setup."""
    first = steps[0].request
    for step in steps[1:]:
        r = step.request
        if r.resources != first.resources or r.setup != first.setup:
            raise UserError(
                f"sweep element {step.name} needs other resources or job setup than "
                f"{steps[0].name}; one array shares one request, so sweep such keys "
                "as separate launches"
            )


def array_spec(n: int, parallelism: int | None) -> str:
    """The `--array` value submitit writes: `0-(n-1)%P`, P defaulting to all elements at once."""
    return f"0-{n - 1}%{min(n, parallelism or n)}"


# ------------------------------------------------------------------------------- description


def flatten(data: dict, prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{path}."))
        else:
            flat[path] = value
    return flat


def config_differences(configs: list[dict]) -> list[str]:
    """The keys whose values differ between elements (output_dir aside: it always does)."""
    flats = [flatten(c) for c in configs]
    keys = sorted(k for k in flats[0] if k != "output_dir")
    return [k for k in keys if len({repr(f.get(k)) for f in flats}) > 1]


def describe_sweep(
    verb: str, root: Path, keys: dict[str, list[str]], steps: list[Any], configs: list[dict]
) -> list[str]:
    differing = config_differences(configs)
    lines = [
        f"# sweep: {len(steps)} elements of {verb} "
        f"({' x '.join(f'{k}: {len(v)}' for k, v in keys.items())}) in {root}",
        f"# configs differ in: {', '.join(differing) or 'nothing (check the swept keys)'}",
    ]
    for index, (step, config) in enumerate(zip(steps, configs, strict=True)):
        values = ", ".join(f"{k}={flatten(config)[k]!r}" for k in differing)
        lines.append(f"#   [{index}] {step.run_dir}: {values}")
    return lines
