"""Cluster profiles: where a job runs, kept apart from what it trains.

A recipe says how many GPUs, nodes and hours a run needs; a profile says how a given cluster wants
that asked for (partition, account, qos, typed GPU gres, CPUs and memory per GPU, its time limit,
how early it warns before killing a job, and which modules or environments to load). Keeping them
apart lets one recipe run on the study's 12-hour cluster, a generic GPU cluster and the local test
cluster without edits. Profiles are YAML files in `slurm/clusters/`; `--cluster NAME` picks one.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vqa_r1.domains import above, at_least
from vqa_r1.errors import UserError
from vqa_r1.paths import shipped
from vqa_r1.typed_config import build, load_mapping, option

CLUSTERS_DIR_ENV = "VQA_R1_CLUSTERS_DIR"
_UNLIMITED = {"unlimited", "infinite"}


@dataclass(frozen=True)
class ClusterProfile:
    """One cluster's submission conventions; every field maps to an sbatch option or job setup."""

    name: str = option(help="the profile's name; must equal its file name", parse=lambda r: _str(r))
    description: str = option(
        "", help="one line shown in listings", parse=lambda r: "" if r is None else str(r).strip()
    )
    partition: str | None = option(
        None, help="sbatch --partition", parse=lambda r: _optional_str(r)
    )
    account: str | None = option(None, help="sbatch --account", parse=lambda r: _optional_str(r))
    qos: str | None = option(None, help="sbatch --qos", parse=lambda r: _optional_str(r))
    gpu_type: str | None = option(
        None,
        help="GPUs are asked as --gres=gpu:TYPE:N when set (clusters that mix GPU models need "
        "it), else as --gpus-per-node=N",
        parse=lambda r: _optional_str(r),
    )
    gpus_per_node: int = option(
        0,
        help="GPUs one node has: a job asks for at most this many per node, more nodes for more "
        "(0: not stated, nothing checked)",
        parse=lambda r: _count(0)(r),
        minimum=0,
    )
    cpus_per_gpu: int = option(4, help="CPUs per GPU", parse=lambda r: _count(1)(r), minimum=1)
    gpu_mem_gb: float | None = option(
        None,
        help="memory of one GPU in GiB (an 80 GB card: 80): a recipe whose memory plan does not "
        "fit it is refused before queueing (models/memory_plan.py); none: not checked",
        parse=lambda r: _optional_gb(r),
        domain=above(0),
    )
    mem_per_gpu_gb: float | None = option(
        None, help="memory per GPU in GB", parse=lambda r: _optional_gb(r), domain=above(0)
    )
    cpus_per_task: int = option(
        1,
        help="CPUs per process of a job without GPUs (merge, CPU evaluation, the local cluster)",
        parse=lambda r: _count(1)(r),
        minimum=1,
    )
    mem_gb: float | None = option(
        None,
        help="memory per process of a job without GPUs, GB",
        parse=lambda r: _optional_gb(r),
        domain=above(0),
    )
    max_time: int | None = option(
        None,
        help="the partition's time limit (SLURM time or UNLIMITED), kept in minutes; longer runs "
        "requeue themselves",
        parse=lambda r: _max_time(r),
        domain=at_least(1, "minutes"),
    )
    signal_delay_s: int = option(
        120,
        help="SLURM warns this many seconds before the limit; the job checkpoints and requeues "
        "within it",
        parse=lambda r: _count(1)(r),
        minimum=1,
    )
    setup: tuple[str, ...] = option(
        (), help="shell lines run before the job (modules, environments)", parse=lambda r: _setup(r)
    )
    python: str | None = option(
        None,
        help="the Python that runs the job on the compute node, e.g. "
        "$HOME/venvs/vqa-r1/bin/python (shell variables expand in the job). Default: the Python "
        "that submitted it; a setup line that activates an environment does not change which "
        "Python runs the job",
        parse=lambda r: _optional_str(r),
    )
    sbatch_extra: dict[str, str] = option(
        default_factory=dict,
        help="sbatch options submitit has no name for, e.g. {constraint: a100_80gb}",
        parse=lambda r: _sbatch_extra(r),
    )
    env: dict[str, str] = option(
        default_factory=dict,
        help="variables the job exports before it starts, e.g. NCCL's: {NCCL_DEBUG: WARN, "
        "NCCL_SOCKET_IFNAME: ib0}",
        parse=lambda r: _env(r),
    )
    source: Path | None = field(default=None, init=False, compare=False)


# ------------------------------------------------------------------------------------ time

_TIME_FORMATS = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (e.g. 00:02:00, 90, 1-12)"
_TIME_RE = re.compile(
    r"^(?:(?P<days>\d+)-(?P<dh>\d+)(?::(?P<dm>\d+)(?::(?P<ds>\d+))?)?"
    r"|(?P<a>\d+)(?::(?P<b>\d+)(?::(?P<c>\d+))?)?)$"
)


def parse_slurm_time(text: str) -> int:
    """Minutes in a SLURM time string, seconds rounded up as SLURM does.

    Sub-fields must be in range (MM:SS with SS < 60 and so on): `1:75` is more likely a typo than
    a request for 2 min 15 s, and SLURM's own leniency there would hide it.
    """
    match = _TIME_RE.match(str(text).strip())
    if match is None:
        raise UserError(f"time {text!r} is not a SLURM time; use {_TIME_FORMATS}")
    g = match.groupdict()
    if g["days"] is not None:
        days, hours = int(g["days"]), int(g["dh"])
        minutes, seconds = int(g["dm"] or 0), int(g["ds"] or 0)
        _check_range(text, hours=(hours, 24), minutes=(minutes, 60), seconds=(seconds, 60))
    elif g["c"] is not None:  # HH:MM:SS
        days, hours, minutes, seconds = 0, int(g["a"]), int(g["b"]), int(g["c"])
        _check_range(text, minutes=(minutes, 60), seconds=(seconds, 60))
    elif g["b"] is not None:  # MM:SS
        days, hours, minutes, seconds = 0, 0, int(g["a"]), int(g["b"])
        _check_range(text, seconds=(seconds, 60))
    else:  # MM
        days, hours, minutes, seconds = 0, 0, int(g["a"]), 0
    total_s = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if total_s == 0:
        raise UserError(
            f"time {text!r} is zero; SLURM reads 0 as 'no limit', give an explicit limit instead"
        )
    return math.ceil(total_s / 60)


def _check_range(text: str, **parts: tuple[int, int]) -> None:
    for unit, (value, bound) in parts.items():
        if value >= bound:
            raise UserError(f"time {text!r}: {unit} must be below {bound}, got {value}")


def format_slurm_time(minutes: int) -> str:
    """D-HH:MM:SS, the form sacct and squeue print, for messages that quote a limit back."""
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    clock = f"{hours:02d}:{mins:02d}:00"
    return f"{days}-{clock}" if days else clock


# ------------------------------------------------------------------------------------ loading


def clusters_dir() -> Path:
    """The profile directory: $VQA_R1_CLUSTERS_DIR (a user's own folder of profiles), else the
    shipped ones: the checkout's slurm/clusters, or their copy in an installed wheel."""
    override = os.environ.get(CLUSTERS_DIR_ENV)
    if override:
        return Path(override)
    return shipped("slurm/clusters", "clusters")


def list_clusters(directory: Path | None = None) -> list[str]:
    """Names accepted by `--cluster`, i.e. the profile file names without `.yaml`."""
    directory = directory or clusters_dir()
    if not directory.is_dir():
        return []
    return sorted(p.stem for p in directory.glob("*.yaml"))


def load_cluster(name_or_path: str | Path) -> ClusterProfile:
    """A profile by name (from the profile directory) or by path to a YAML file."""
    path = _resolve(name_or_path)
    data = dict(load_mapping(path, "cluster profile"))
    data.setdefault("name", path.stem)
    profile = build(ClusterProfile, data, f"{path}:")
    if profile.name != path.stem:
        raise UserError(
            f"{path}: name: {profile.name!r} differs from the file name {path.stem!r}; "
            "they must match so that --cluster finds the profile"
        )
    object.__setattr__(profile, "source", path)
    _check_signal_fits(path, profile)
    return profile


def _resolve(name_or_path: str | Path) -> Path:
    text = str(name_or_path)
    looks_like_path = (
        isinstance(name_or_path, Path) or "/" in text or text.endswith((".yaml", ".yml"))
    )
    if looks_like_path:
        path = Path(text).expanduser()
        if not path.is_file():
            raise UserError(f"cluster profile {path} does not exist")
        return path
    directory = clusters_dir()
    path = directory / f"{text}.yaml"
    if not path.is_file():
        known = ", ".join(list_clusters(directory)) or "none"
        raise UserError(
            f"unknown cluster {text!r}; known clusters: {known} "
            f"(profiles are YAML files in {directory})"
        )
    return path


# ------------------------------------------------------------------------------------ fields


def _check_signal_fits(path: Path, profile: ClusterProfile) -> None:
    if profile.max_time is not None and profile.signal_delay_s >= profile.max_time * 60:
        raise UserError(
            f"{path}: signal_delay_s: {profile.signal_delay_s} s is not shorter than "
            f"max_time ({format_slurm_time(profile.max_time)}); the job would be warned "
            "before it starts"
        )


def _optional_str(raw: Any) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw.strip():
        raise ValueError(f"expected a non-empty string, got {raw!r}")
    return raw.strip()


def _str(raw: Any) -> str:
    value = _optional_str(raw)
    if value is None:
        raise ValueError("expected a non-empty string, got nothing")
    return value


def _count(minimum: int):
    def convert(raw: Any) -> int:
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < minimum:
            raise ValueError(f"expected a whole number >= {minimum}, got {raw!r}")
        return raw

    return convert


def _optional_gb(raw: Any) -> float | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or raw <= 0:
        raise ValueError(f"expected a positive number of GB, got {raw!r}")
    return float(raw)


def _max_time(raw: Any) -> int | None:
    if raw is None or (isinstance(raw, str) and raw.strip().lower() in _UNLIMITED):
        return None
    if isinstance(raw, bool) or not isinstance(raw, (int, str)):
        raise ValueError(f"expected a SLURM time such as '12:00:00' or UNLIMITED, got {raw!r}")
    return parse_slurm_time(str(raw))


def _setup(raw: Any) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(line, str) for line in raw):
        raise ValueError(f"expected a list of shell lines, got {raw!r}")
    return tuple(raw)


def _sbatch_extra(raw: Any) -> dict[str, str]:
    """Options submitit has no name for, e.g. `{constraint: a100_80gb, exclusive: true}`."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError(f"expected a mapping of sbatch option to value, got {raw!r}")
    extra: dict[str, Any] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or key.startswith("-"):
            raise ValueError(f"option {key!r} must be a name without leading dashes")
        if not isinstance(value, (str, int, float, bool)):
            raise ValueError(f"option {key!r}: expected a single value, got {value!r}")
        extra[key] = value
    return extra


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _env(raw: Any) -> dict[str, str]:
    """Variable name -> value, exported in the job script (values quoted there)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError(f"expected a mapping of variable name to value, got {raw!r}")
    env: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            raise ValueError(f"{key!r} is not a shell variable name")
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ValueError(f"{key}: expected a single value, got {value!r}")
        env[key] = str(value)
    return env


def env_lines(profile: ClusterProfile) -> list[str]:
    """The job script's ``export`` lines of the profile's ``env``."""
    return [f"export {key}={shlex.quote(value)}" for key, value in profile.env.items()]


# ------------------------------------------------------------------------------------ submitit


def to_submitit_params(
    profile: ClusterProfile,
    gpus: int | None = None,
    nodes: int = 1,
    time_minutes: int | None = None,
    cpus: int | None = None,
    mem: float | None = None,
    tasks_per_node: int | None = None,
) -> dict[str, Any]:
    """Parameters for `submitit.AutoExecutor.update_parameters`.

    `gpus` is per node (the profile's default when None). `tasks_per_node`: the processes srun
    starts on each node (launch/distributed.py: one per training GPU, each deriving its
    torch.distributed rank from SLURM); None leaves it to SLURM (one). `cpus` and `mem` (GB) are
    per node and default to the profile's per-GPU amounts times `gpus`, or, without GPUs, its
    per-process amounts times the processes. The node's CPUs are split evenly among its tasks
    (`--cpus-per-task`). `time_minutes` defaults to the cluster's limit and may not exceed it: a
    longer run is several jobs, joined by requeueing, not one long job.
    """
    gpus = profile.gpus_per_node if gpus is None else gpus
    _require(gpus >= 0, f"gpus must be >= 0, got {gpus}")
    _require(nodes >= 1, f"nodes must be >= 1, got {nodes}")
    check_gpus_per_node(profile, gpus, nodes)
    minutes = _job_minutes(profile, time_minutes)
    params: dict[str, Any] = {
        "nodes": nodes,
        "timeout_min": minutes,
        "slurm_signal_delay_s": profile.signal_delay_s,
    }
    for key in ("partition", "account", "qos"):
        value = getattr(profile, key)
        if value:
            params[f"slurm_{key}"] = value
    params.update(_gpu_params(profile, gpus))
    tasks = 1 if tasks_per_node is None else tasks_per_node
    _require(tasks >= 1, f"tasks per node must be >= 1, got {tasks}")
    node_cpus = cpus if cpus is not None else _default_cpus(profile, gpus, tasks)
    _require(node_cpus >= 1, f"cpus must be >= 1, got {node_cpus}")
    _require(node_cpus >= tasks, f"{node_cpus} CPUs per node cannot give each of {tasks} tasks one")
    if tasks_per_node is not None:
        params["tasks_per_node"] = tasks_per_node
    params["cpus_per_task"] = node_cpus // tasks
    mem_gb = mem if mem is not None else _default_mem(profile, gpus, tasks)
    if mem_gb is not None:
        _require(mem_gb > 0, f"mem must be > 0 GB, got {mem_gb}")
        params["mem_gb"] = mem_gb
    if profile.setup or profile.env:  # the variables after the modules, which may set their own
        params["slurm_setup"] = [*profile.setup, *env_lines(profile)]
    if profile.sbatch_extra:
        params["slurm_additional_parameters"] = dict(profile.sbatch_extra)
    return params


def check_gpus_per_node(profile: ClusterProfile, gpus: int, nodes: int) -> None:
    """More GPUs per node than the profile's nodes have is refused here, with the ``--nodes``
    that gives the same GPUs (sbatch would refuse it after the queue's checks, or hold it pending
    for good on some clusters). A profile with ``gpus_per_node: 0`` says nothing of its nodes."""
    have = profile.gpus_per_node
    if not have or gpus <= have:
        return
    total = gpus * nodes
    need = math.ceil(total / have)
    each = math.ceil(total / need)
    fit = f"--nodes {need} --gpus {each}" + ("" if each * need == total else f" ({each * need})")
    raise UserError(
        f"--gpus {gpus}: a node of cluster {profile.name} has {have} GPUs (gpus_per_node in "
        f"{profile.source or profile.name}); for {total} GPUs use {fit}"
    )


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise UserError(message)


def _job_minutes(profile: ClusterProfile, time_minutes: int | None) -> int:
    if time_minutes is None:
        if profile.max_time is None:
            raise UserError(
                f"cluster {profile.name!r} has no max_time; give the job a time limit (--time)"
            )
        return profile.max_time
    _require(time_minutes >= 1, f"time must be at least 1 minute, got {time_minutes}")
    if profile.max_time is not None and time_minutes > profile.max_time:
        raise UserError(
            f"time {format_slurm_time(time_minutes)} exceeds the limit of cluster "
            f"{profile.name!r} ({format_slurm_time(profile.max_time)}); ask for at most the "
            "limit, the job requeues itself to run longer"
        )
    _require(
        time_minutes * 60 > profile.signal_delay_s,
        f"time {format_slurm_time(time_minutes)} is not longer than the warning signal delay of "
        f"cluster {profile.name!r} ({profile.signal_delay_s} s)",
    )
    return time_minutes


def _gpu_params(profile: ClusterProfile, gpus: int) -> dict[str, Any]:
    if gpus == 0:
        return {}
    if profile.gpu_type:
        return {"slurm_gres": f"gpu:{profile.gpu_type}:{gpus}"}
    return {"gpus_per_node": gpus}


def _default_cpus(profile: ClusterProfile, gpus: int, tasks: int = 1) -> int:
    return profile.cpus_per_gpu * gpus if gpus else profile.cpus_per_task * tasks


def _default_mem(profile: ClusterProfile, gpus: int, tasks: int = 1) -> float | None:
    if gpus:
        return profile.mem_per_gpu_gb * gpus if profile.mem_per_gpu_gb else None
    return profile.mem_gb * tasks if profile.mem_gb else None
