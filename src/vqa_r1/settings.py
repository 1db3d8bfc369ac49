"""What makes two runs the same run: one rule for every verb and every check.

A folder is resumed (or skipped as complete) only by a command with the same settings
(claims.py's marker), and an experiment's or pipeline's re-launch only plans its steps with the
settings the previous launch recorded (launch/build.py). Both compare ``comparable`` views: the
resolved config without what may change from one launch of a run to the next:

- where it writes (``output_dir``) and where it runs (``resources``: GPUs, nodes, time, memory);
- how fast the host runs it (``train.num_threads``, ``num_threads``);
- how it is watched (``train.health_window``, ``train.health_action``): an UNHEALTHY GRPO run goes
  on with ``--set train.health_action=warn`` (docs/run-health.md).

How often a job may requeue (``--max-requeues``) is a job option, never part of the settings.

A base module: imports nothing of the project.
"""

from __future__ import annotations

import json
from typing import Any

# dotted paths into a config's dict (a top-level key, or section.key)
RELAUNCH_FREE = frozenset(
    {
        "output_dir",
        "resources",
        "num_threads",
        "train.num_threads",
        "train.health_window",
        "train.health_action",
    }
)


def comparable(settings: Any) -> Any:
    """``settings`` (a nested config dict, or one flattened to ``section.key``) without the keys
    that may differ between launches of one run, as JSON would read it back (tuples as lists)."""
    if not isinstance(settings, dict):
        return settings
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if key in RELAUNCH_FREE:
            continue
        if isinstance(value, dict):
            value = {k: v for k, v in value.items() if f"{key}.{k}" not in RELAUNCH_FREE}
        out[key] = value
    return json.loads(json.dumps(out, default=str))


def flatten(settings: dict) -> dict:
    """``{"train": {"seed": 1}}`` -> ``{"train.seed": 1}`` (one level: the config's sections)."""
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    return flat


# keys added after runs began recording their settings, with the value that does what runs before
# the key did: a record without the key is the same run as a config holding that value (a folder
# made by an older version resumes; any other value is a difference as ever)
ADDED_LATER: dict[str, Any] = {
    "data.images": "real",  # blind controls (data/blind.py), 0.2.0
    "train.dynamic_sampling": False,  # DAPO's dynamic sampling, off (train/dynamic_sampling.py)
    "train.dynamic_sampling_max_rounds": 4,  # read only with dynamic sampling on
}


def differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    """``key: OLD there, NEW now`` for every key whose comparable value differs."""
    old, new = comparable(old), comparable(new)
    return _differences(old, new, prefix)


def _differences(old: Any, new: Any, prefix: str) -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        found: list[str] = []
        for key in sorted(set(old) | set(new)):
            path = f"{prefix}{key}"
            if key not in old and path in ADDED_LATER and new[key] == ADDED_LATER[path]:
                continue  # recorded before the key existed, and set to what that did
            found += _differences(old.get(key), new.get(key), f"{path}.")
        return found
    if old != new:
        return [f"{prefix.rstrip('.')}: {old!r} there, {new!r} now"]
    return []
