"""`vqa-r1 doctor`: what would make a job fail or waste its allocation, checked in a minute.

Each check is one line, OK / WARN / FAIL, and says the fix; any FAIL makes the command exit 1.
Run on a login node it checks the installation, the model cache and the cluster's SLURM settings;
as a job (`slurm/launch.py doctor --cluster NAME`) it also checks the GPUs the job was given.
The CUDA checks are launch/cuda_check.py's, the same that stop a GPU job at start. The tested
versions are two sets (shipped inside the package by setup.py for non-editable installs):
constraints.txt, the CPU set CI runs, and constraints-gpu.txt, what `pip install ".[gpu]"` gets on
a cluster (vLLM pins another torch); the installed torch says which set this install follows.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from vqa_r1.errors import UserError
from vqa_r1.launch import cuda_check
from vqa_r1.launch.cuda_check import SmiReport, TorchCuda

OK, WARN, FAIL = "OK", "WARN", "FAIL"
# the packages a run's behaviour depends on, checked against the tested set
STACK = ("torch", "torchvision", "transformers", "trl", "peft", "accelerate", "vllm", "deepspeed")
OPTIONAL = {"vllm": "GRPO generation with vLLM", "deepspeed": "ZeRO recipes (7B)"}
CONSTRAINTS = "constraints.txt"  # the CPU set
GPU_CONSTRAINTS = "constraints-gpu.txt"  # the GPU set (vLLM, DeepSpeed, the torch vLLM pins)
MIN_FREE_GIB = 1.0  # below this nothing can be saved; a FAIL
CHECKPOINT_COPIES = 3  # free disk wanted: this many copies of the weights (merge, final/, staging)


@dataclass
class Check:
    name: str
    status: str  # OK | WARN | FAIL
    detail: str
    fix: str = ""

    def line(self) -> str:
        text = f"{self.status:<4}  {self.name}: {self.detail}"
        return f"{text}\n      fix: {self.fix}" if self.fix else text


@dataclass
class DoctorOptions:
    models: list[str] = field(default_factory=list)
    gpus: int = 0  # GPUs this process should be able to use (a GPU job: its GPUs per node)
    cluster: str | None = None  # a profile: its partition's SLURM settings and the job's Python
    run_dir: str = "."  # where runs write: free disk
    # the tested set; None: constraints_file(). A job passes the login node's (its code snapshot
    # holds the package only)
    constraints: str | None = None


def run_checks(options: DoctorOptions) -> list[Check]:
    facts = cuda_check.torch_cuda()
    smi = cuda_check.nvidia_smi()
    checks = [interpreter_check(options.cluster), *cuda_checks(facts, smi, options.gpus)]
    checks += memory_checks(facts, options.models)
    if options.constraints:
        path = Path(options.constraints)
        checks += version_checks(tested_versions(path), path.name)
    else:
        checks += version_checks()
    checks.append(flash_attn_check())
    checks += [model_check(name) for name in options.models]
    checks.append(offline_check())
    checks += slurm_checks(options.cluster)
    checks += nccl_checks()
    checks.append(disk_check(Path(options.run_dir), options.models))
    return checks


def report(checks: list[Check]) -> tuple[str, int]:
    """The lines and the exit status (1 when any check failed)."""
    failed = sum(c.status == FAIL for c in checks)
    warned = sum(c.status == WARN for c in checks)
    lines = [c.line() for c in checks]
    lines.append(f"{len(checks)} checks: {failed} failed, {warned} warnings")
    return "\n".join(lines), 1 if failed else 0


def memory_report(models: list[str], verb: str, cluster: str) -> tuple[str, int]:
    """`doctor --verb sft|grpo`: each model's memory plan for its recipe (models/memory_plan.py)
    against the profile's GPU (``gpu_mem_gb``); exit status 1 when one does not fit, as the
    submission of that recipe would be refused."""
    from vqa_r1.launch.clusters import load_cluster
    from vqa_r1.models.memory_plan import check_fits, plan, with_gpu
    from vqa_r1.recipes import load_config

    profile = load_cluster(cluster)
    card = profile.gpu_mem_gb
    lines, status = [], 0
    for name in models:
        memory = plan(load_config(verb, name))
        if memory is None:
            lines.append(
                f"memory plan: {name} has no shipped architecture (a tiny model needs none)"
            )
            continue
        if card:
            memory = with_gpu(memory, card)
        lines += memory.lines(card)
        if not card:
            lines.append(f"  cluster {profile.name} states no gpu_mem_gb: not checked")
            continue
        try:
            check_fits(memory, card, f"cluster {profile.name}")
            lines.append(f"  fits: {memory.peak_gib:.1f} of {card:g} GiB per GPU")
        except UserError as err:
            lines.append(f"  FAIL {err}")
            status = 1
    return "\n".join(lines), status


# ------------------------------------------------------------------------------------ GPUs


def cuda_checks(facts: TorchCuda, smi: SmiReport, gpus: int) -> list[Check]:
    build = f"torch {facts.version}" + (f", CUDA {facts.cuda}" if facts.cuda else ", CPU only")
    arch = f"kernels for {' '.join(facts.arch_list)}" if facts.arch_list else "no CUDA kernels"
    checks = [Check("torch build", OK, f"{build}; {arch}")]
    driver = smi.driver or "none"
    problem = cuda_check.cuda_problem(facts, smi)
    if problem is None:
        names = ", ".join(f"{g.name} (sm_{g.capability[0]}{g.capability[1]})" for g in facts.gpus)
        checks.append(
            Check("CUDA", OK, f"driver {driver}; {len(facts.gpus)} usable GPU(s): {names}")
        )
        checks.append(bf16_check(facts))
    elif gpus > 0:
        checks.append(Check("CUDA", FAIL, f"this job asked for {gpus} GPU(s)", problem))
    else:
        checks.append(
            Check(
                "CUDA",
                WARN,
                f"no usable GPU here (driver: {driver}); GPU jobs fail at start where this holds",
                problem,
            )
        )
    return checks


def bf16_check(facts: TorchCuda) -> Check:
    if facts.bf16:
        return Check("bf16", OK, "supported in hardware")
    old = [g.name for g in facts.gpus if g.capability < cuda_check.BF16_MIN_CAPABILITY]
    return Check(
        "bf16",
        WARN,
        f"no bfloat16 in hardware on {', '.join(old) or 'this GPU'} (needs sm_80 or newer)",
        "--set train.bf16=false --set model.dtype=float16 (or use an sm_80+ GPU)",
    )


def memory_checks(facts: TorchCuda, models: list[str]) -> list[Check]:
    """Each named model's weights against the smallest visible GPU (weights are a lower bound:
    training and generation need room for activations and the KV cache on top)."""
    memory = [g.memory_gib for g in facts.gpus if g.memory_gib]
    if not facts.available or not memory:
        return []
    smallest = min(memory)
    checks = []
    for name in models:
        size = weights_gib(name)
        if size is None:
            continue
        detail = f"{name}: {size:.1f} GiB of weights, {smallest:.0f} GiB per GPU"
        if size >= smallest:
            fix = "a GPU with more memory, or a ZeRO-3 recipe over several GPUs (train.deepspeed)"
            checks.append(Check("GPU memory", FAIL, detail, fix))
        elif 2 * size > smallest:
            fix = "lower per_device_train_batch_size / max_completion_length, or a larger GPU"
            checks.append(Check("GPU memory", WARN, detail + " (little left for activations)", fix))
        else:
            checks.append(Check("GPU memory", OK, detail))
    return checks


def weights_gib(name: str) -> float | None:
    """The size of a cached model's weight files (None: unknown or not cached)."""
    from vqa_r1.models.loading import cached_hub_path
    from vqa_r1.models.registry import get_spec

    spec = get_spec(name)
    path = cached_hub_path(spec.hub_id) if spec.hub_id else None
    if path is None:
        return None
    files = [*path.glob("*.safetensors"), *path.glob("*.bin")]
    return sum(f.stat().st_size for f in files) / 2**30 if files else None


# ------------------------------------------------------------------------------------ versions


def constraints_file(torch_version: str | None = None) -> Path | None:
    """The tested set this install follows: the GPU set when the installed torch is the GPU set's
    (``torch_version``, default the installed one), else the CPU set; each the checkout's file,
    else the copy shipped in the package."""
    package = Path(__file__).resolve().parents[1]

    def find(name: str) -> Path | None:
        for candidate in (package.parents[1] / name, package / name):
            if candidate.is_file():
                return candidate
        return None

    cpu, gpu = find(CONSTRAINTS), find(GPU_CONSTRAINTS)
    installed = torch_version if torch_version is not None else _installed("torch")
    if gpu is not None and installed is not None:
        tested = tested_versions(gpu).get("torch")
        if tested is not None and _same(installed, tested):
            return gpu
    return cpu


def tested_versions(path: Path | None = None) -> dict[str, str]:
    """``name==version`` pins of a constraints file, by normalised name."""
    path = path or constraints_file()
    if path is None:
        return {}
    pins = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*==\s*([^\s;#]+)", line)
        if match:
            pins[_normalise(match.group(1))] = match.group(2)
    return pins


def version_checks(pins: dict[str, str] | None = None, source: str | None = None) -> list[Check]:
    """The installed STACK against ``pins`` (default: the tested set this install follows,
    constraints_file()); ``source`` names the pins' file in the messages."""
    if pins is None:
        path = constraints_file()
        pins, source = tested_versions(path), path.name if path else None
    if not pins:
        return [
            Check(
                "versions",
                WARN,
                "no constraints.txt found (neither in a checkout nor in the package)",
                "reinstall vqa-r1 from its repository",
            )
        ]
    checks = []
    source = source or CONSTRAINTS
    for name in STACK:
        installed = _installed(name)
        tested = pins.get(_normalise(name))
        if installed is None:
            if tested and name not in OPTIONAL:
                fix = f"pip install -c {source} {name}=={tested}"
                checks.append(Check(name, FAIL, f"not installed (tested: {tested})", fix))
            elif name in OPTIONAL:
                what = f"tested: {tested}" if tested else "not in the tested set"
                detail = f"not installed; optional, for {OPTIONAL[name]} ({what})"
                checks.append(Check(name, OK, detail))
            continue
        if tested is None:
            checks.append(Check(name, WARN, f"{installed} is not in the tested set ({source})"))
        elif _same(installed, tested):
            checks.append(Check(name, OK, f"{installed} (tested, {source})"))
        else:
            fix = f"pip install -c {source} '{name}=={tested}'"
            checks.append(Check(name, WARN, f"{installed} installed, {tested} tested", fix))
    return checks


def flash_attn_check() -> Check:
    installed = _installed("flash-attn")
    if installed is None:
        return Check("flash-attn", OK, "not installed; optional (the recipes use sdpa)")
    try:
        import flash_attn  # noqa: F401
    except Exception as err:  # typically built against another torch: an undefined symbol
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        return Check(
            "flash-attn",
            WARN,
            f"{installed} installed but does not import: {first}",
            "pip uninstall flash-attn, or rebuild it for this torch: "
            "pip install flash-attn --no-build-isolation",
        )
    return Check("flash-attn", OK, f"{installed} imports")


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _same(installed: str, tested: str) -> bool:
    """torch 2.14.1+cu130 is the tested 2.14.1 (a local build tag names the CUDA variant)."""
    return installed == tested or installed.split("+")[0] == tested.split("+")[0]


# ------------------------------------------------------------------------------------ cache


def model_check(name: str) -> Check:
    from vqa_r1.errors import UserError
    from vqa_r1.models.loading import cached_snapshot, download_command, incomplete_message
    from vqa_r1.models.registry import get_spec

    try:
        spec = get_spec(name)
    except UserError as err:
        return Check(f"model {name}", FAIL, str(err))
    if spec.tiny:
        return Check(f"model {name}", OK, f"{spec.source}; nothing to download")
    path, missing = cached_snapshot(spec.hub_id)
    if path is None:
        fix = f"on a login node: {download_command(spec.hub_id)}"
        return Check(f"model {name}", FAIL, f"{spec.hub_id} is not in the cache", fix)
    if missing:
        text = incomplete_message(spec.hub_id, path, missing)
        return Check(
            f"model {name}", FAIL, text.split(" Finish it")[0], download_command(spec.hub_id)
        )
    return Check(f"model {name}", OK, f"complete in the cache ({path})")


def offline_check() -> Check:
    value = os.environ.get("HF_HUB_OFFLINE", "")
    on = value not in ("", "0", "false", "False")
    cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HF_HOME") or "~/.cache/huggingface"
    in_job = "SLURM_JOB_ID" in os.environ
    if on:
        return Check("offline", OK, f"HF_HUB_OFFLINE={value}; models come from {cache}")
    if in_job:
        return Check(
            "offline",
            WARN,
            "HF_HUB_OFFLINE is not set in this job: a missing file is retried online",
            "jobs submitted by slurm/launch.py export HF_HUB_OFFLINE=1; export it in your own",
        )
    return Check(
        "offline",
        OK,
        f"HF_HUB_OFFLINE unset here (downloads allowed); jobs export HF_HUB_OFFLINE=1 and read "
        f"{cache}, which compute nodes must see at the same path",
    )


# ------------------------------------------------------------------------------------ SLURM


def scontrol(*args: str) -> str | None:
    exe = shutil.which("scontrol")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def parse_settings(text: str) -> dict[str, str]:
    """``Key = Value`` lines (show config) and ``Key=Value`` words (show partition)."""
    settings = {}
    for line in text.splitlines():
        if " = " in line:
            key, _, value = line.partition(" = ")
            settings[key.strip()] = value.strip()
            continue
        for word in line.split():
            key, sep, value = word.partition("=")
            if sep:
                settings[key] = value
    return settings


def slurm_checks(cluster: str | None) -> list[Check]:
    """What requeueing relies on: JobRequeue (or --requeue), the warning signal reaching the
    job's tasks in time, and PreemptMode/GraceTime where the partition preempts."""
    profile = _profile(cluster)
    if isinstance(profile, Check):
        return [profile]
    config_text = scontrol("show", "config")
    if config_text is None:
        if profile is None and "SLURM_JOB_ID" not in os.environ:
            return []  # no SLURM here and none asked for
        return [Check("SLURM", WARN, "scontrol is not on PATH: SLURM settings not checked")]
    config = parse_settings(config_text)
    checks = []
    extra = dict(profile.sbatch_extra) if profile else {}
    requeue = config.get("JobRequeue", "").strip()
    asks = str(extra.get("requeue", "")).lower() in ("true", "1", "yes")
    if requeue == "1" or asks:
        checks.append(Check("JobRequeue", OK, f"JobRequeue={requeue or '?'}; jobs can requeue"))
    else:
        checks.append(
            Check(
                "JobRequeue",
                FAIL,
                f"JobRequeue={requeue or 'unknown'}: jobs are not requeueable unless they ask, "
                "and submitit does not ask (no --requeue)",
                "add `requeue: true` to sbatch_extra in the cluster profile",
            )
        )
    if profile is not None:
        checks.append(signal_check(profile))
    checks += preemption_checks(config, profile.partition if profile else None)
    return checks


def signal_check(profile) -> Check:
    signal = str(profile.sbatch_extra.get("signal", ""))
    if signal.upper().startswith("B:"):
        return Check(
            "warning signal",
            FAIL,
            f"sbatch_extra signal={signal} signals the batch shell only, not the job's tasks",
            "remove `signal` from sbatch_extra (submitit asks for USR2 to the tasks)",
        )
    delay = profile.signal_delay_s
    # slurmctld looks at time limits every 30 s, so the signal can come that much later
    if delay <= 30:
        return Check(
            "warning signal",
            WARN,
            f"USR2 {delay} s before the limit; slurmctld checks limits every 30 s, so a job "
            "may get the signal too late to save a checkpoint",
            f"signal_delay_s: 120 or more in {profile.source or 'the profile'}",
        )
    return Check("warning signal", OK, f"USR2 to every task {delay} s before the time limit")


def preemption_checks(config: dict[str, str], partition: str | None) -> list[Check]:
    preempt_type = config.get("PreemptType", "preempt/none")
    if preempt_type.endswith("none"):
        return [Check("preemption", OK, f"PreemptType={preempt_type}: jobs are not preempted")]
    part = parse_settings(scontrol("show", "partition", partition) or "") if partition else {}
    mode = part.get("PreemptMode") or config.get("PreemptMode", "OFF")
    grace = part.get("GraceTime", "0")
    where = f"partition {partition}" if partition else "the cluster"
    if "CANCEL" in mode.upper() or mode.upper() == "OFF":
        return [
            Check(
                "preemption",
                WARN,
                f"{where}: PreemptMode={mode}; a preempted job is not requeued",
                "ask the admins for PreemptMode=REQUEUE, or use a partition that is not preempted",
            )
        ]
    if "REQUEUE" in mode.upper() and _seconds(grace) == 0:
        return [
            Check(
                "preemption",
                WARN,
                f"{where}: PreemptMode={mode}, GraceTime=0: a preempted job is killed at once and "
                "loses the steps since its last periodic checkpoint",
                "ask for a GraceTime long enough to save a checkpoint (e.g. 120 s), or lower "
                "train.save_steps",
            )
        ]
    return [Check("preemption", OK, f"{where}: PreemptMode={mode}, GraceTime={grace}")]


def _profile(cluster: str | None):
    if cluster is None:
        return None
    from vqa_r1.errors import UserError
    from vqa_r1.launch.clusters import load_cluster

    try:
        return load_cluster(cluster)
    except UserError as err:
        return Check("cluster profile", FAIL, str(err))


def _seconds(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return -1  # a non-number is some time, not none


def nccl_checks() -> list[Check]:
    """Hints for the first multi-node run (only inside an allocation of several nodes)."""
    nodes = int(os.environ.get("SLURM_JOB_NUM_NODES", os.environ.get("SLURM_NNODES", "1")) or 1)
    if nodes <= 1:
        return []
    settings = {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
    shown = ", ".join(f"{k}={v}" for k, v in sorted(settings.items())) or "no NCCL_* variables"
    if settings.get("NCCL_IB_DISABLE") == "1":
        return [
            Check(
                "NCCL",
                WARN,
                f"{nodes} nodes with NCCL_IB_DISABLE=1: traffic between nodes goes over TCP",
                "unset NCCL_IB_DISABLE where the nodes have InfiniBand",
            )
        ]
    hint = "set NCCL_DEBUG=INFO for the first run (its log names the transport and interface)"
    if "NCCL_SOCKET_IFNAME" not in settings:
        hint += "; set NCCL_SOCKET_IFNAME if the nodes have several networks"
    return [Check("NCCL", OK, f"{nodes} nodes; {shown}", hint)]


# ------------------------------------------------------------------------------------ disk


def disk_check(run_dir: Path, models: list[str]) -> Check:
    target = run_dir.resolve()
    while not target.exists() and target != target.parent:
        target = target.parent
    free = shutil.disk_usage(target).free / 2**30
    sizes = [s for s in (weights_gib(m) for m in models) if s]
    wanted = CHECKPOINT_COPIES * max(sizes) if sizes else 0.0
    detail = f"{free:.1f} GiB free at {target}"
    if free < MIN_FREE_GIB:
        return Check("disk", FAIL, detail, "free space or choose another --output-dir")
    if free < wanted:
        return Check(
            "disk",
            WARN,
            f"{detail}; a merged model and its checkpoints need about {wanted:.0f} GiB",
            "free space or choose another --output-dir",
        )
    return Check("disk", OK, detail)


def interpreter_check(cluster: str | None) -> Check:
    """Which Python runs the jobs: the profile's ``python``, else the one that submits them."""
    here = f"{sys.executable} (Python {sys.version.split()[0]})"
    profile = _profile(cluster)
    if profile is None or isinstance(profile, Check):
        return Check("python", OK, here)
    if profile.python:
        return Check("python", OK, f"{here}; {profile.name} jobs run {profile.python}")
    activates = [line for line in profile.setup if "activate" in line]
    if activates:
        return Check(
            "python",
            WARN,
            f"{profile.name} jobs run {sys.executable} (the submitting Python); its setup line "
            f"{activates[0]!r} does not change that",
            f"python: <env>/bin/python in {profile.source}",
        )
    return Check("python", OK, f"{here}; {profile.name} jobs run it too")
