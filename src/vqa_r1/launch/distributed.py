"""Multi-GPU and multi-node jobs: torch.distributed from SLURM, DeepSpeed configs, a vLLM server.

The launcher asks SLURM for one task per training process (`--ntasks-per-node`): one per training
GPU, or, in a job without GPUs, `resources.processes_per_node` CPU processes (gloo; the code path
of a multi-GPU job but the device). srun starts the task on each, and each derives RANK /
WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT from SLURM's variables (submitit's
TorchDistributedEnvironment). The Trainer (accelerate) then initialises the process group from
that environment, with DeepSpeed when the recipe names a ZeRO config.

GRPO generation with vLLM runs either inside the training processes (`colocate`) or on a server
started by the job script (`server`) on the last `train.vllm_tensor_parallel_size` GPUs of the
first node; every node then runs one training process fewer per server GPU. SLURM sets
CUDA_VISIBLE_DEVICES anew for each srun step, so the script cannot hide the server's GPUs from the
training processes: it exports their ids, and each task drops them from its own
CUDA_VISIBLE_DEVICES before CUDA starts (`restrict_training_gpus`). Without that, a single
training process would see both GPUs of a `--gpus 2` job and transformers would wrap the model in
DataParallel over the GPU vLLM holds.

What is checked here on the login node, before queueing: TRL's batch rule for the requested
process count, vLLM placement against the GPUs, and the installed vLLM against TRL's range.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shlex
import sys
from collections.abc import MutableMapping
from typing import Any

from vqa_r1.config import VLLM_GROUP_PORT_ENV, VLLM_URL_ENV
from vqa_r1.errors import UserError
from vqa_r1.models.adapters import get_adapter, image_options
from vqa_r1.models.loading import cached_hub_path
from vqa_r1.models.registry import get_spec
from vqa_r1.models.serving import PORT_VAR, free_port_expression, mm_limits, vllm_server_lines

log = logging.getLogger(__name__)

# the job script exports the real (SLURM) ids of the server's GPUs here
SERVER_GPUS_ENV = "VQA_R1_VLLM_GPUS"
# set by restrict_training_gpus to the CUDA_VISIBLE_DEVICES it chose (a second call is a no-op)
_RESTRICTED_ENV = "VQA_R1_TRAINING_GPUS"
GROUP_PORT_BASE = 30000  # weight-sync ports: 30000 + job id % 10000 (server ports: 20000 + ...)
SERVER_MEMORY_DEFAULT = 0.9  # TRL's server default (trl/scripts/vllm_serve.py): its own GPU
# TRL 1.16's supported vLLM range (trl/import_utils.py is_vllm_available; the `vllm` extra of
# trl-1.16.0.dist-info/METADATA); read from the installed TRL's metadata when it has it
TRL_VLLM_RANGE = ">=0.22.0,<=0.31.0"
# server mode with images: TRL's client posts multimodal prompts to /v1/chat/completions/render,
# which vLLM registers (--enable-scale-out, models/serving.py) only from this vLLM on
# (trl/scripts/vllm_serve.py build_command; trl/generation/vllm_client.py). Every model of the
# registry is a vision-language model and every GRPO prompt carries an image.
SERVER_IMAGES_MIN_VLLM = "0.30.0"
# the vLLM whose own prompt processing tests/test_vllm_prompts.py runs on the trainer's ids (the
# pinned one): another version in TRL's range is accepted with a note
IMAGE_PROMPTS_CHECKED_VLLM = "0.31"


# ------------------------------------------------------------------------------- in the job


def export_torch_distributed() -> dict[str, str]:
    """In a multi-task SLURM job, export the torch.distributed variables; a no-op otherwise.

    First hides a GRPO vLLM server's GPUs from this process (``restrict_training_gpus``), so the
    call that sets up a training process does both, before anything starts CUDA."""
    restrict_training_gpus()
    if int(os.environ.get("SLURM_NTASKS", "1")) <= 1:
        return {}
    import submitit

    env = submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    log.info(
        "torch.distributed: rank %d of %d (local %d) via %s:%d",
        env.rank,
        env.world_size,
        env.local_rank,
        env.master_addr,
        env.master_port,
    )
    return {
        k: os.environ[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    }


def _ids(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def restrict_training_gpus(environ: MutableMapping[str, str] | None = None) -> str | None:
    """Hide the GRPO vLLM server's GPUs from this training process; call before CUDA starts.

    The job script exports the server's GPUs as SLURM's real ids (``$VQA_R1_VLLM_GPUS``). This
    step's GPUs are in ``SLURM_STEP_GPUS`` (real ids; ``SLURM_JOB_GPUS`` outside a step) and, in
    the same order, in the ``CUDA_VISIBLE_DEVICES`` SLURM set for the step (real ids, or 0..n-1
    when cgroups confine the devices). The entries of the server's GPUs are dropped from
    ``CUDA_VISIBLE_DEVICES``. Returns the new value, or None when nothing changed (no server, or
    none of its GPUs in this step, e.g. on another node). A second call is a no-op.
    """
    env = os.environ if environ is None else environ
    server = set(_ids(env.get(SERVER_GPUS_ENV)))
    if not server:
        return None
    current = env.get("CUDA_VISIBLE_DEVICES")
    if current is not None and env.get(_RESTRICTED_ENV) == current:
        return None  # done already
    real = _ids(env.get("SLURM_STEP_GPUS") or env.get("SLURM_JOB_GPUS"))
    visible = _ids(current) if current is not None else list(real)
    real = real or visible  # no SLURM ids: the visible ones are the real ones
    if len(real) != len(visible):
        log.warning(
            "cannot match SLURM's GPU ids %s to CUDA_VISIBLE_DEVICES=%s; leaving it as it is",
            real,
            current,
        )
        return None
    keep = [v for r, v in zip(real, visible, strict=True) if r not in server]
    if len(keep) == len(visible):
        return None
    if not keep:
        raise RuntimeError(
            f"every GPU of this step ({','.join(real)}) serves vLLM ({','.join(sorted(server))}); "
            "none is left for training"
        )
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        log.warning("CUDA started before the vLLM server's GPUs were hidden; they stay visible")
    value = ",".join(keep)
    env["CUDA_VISIBLE_DEVICES"] = value
    env[_RESTRICTED_ENV] = value
    log.info("training on CUDA_VISIBLE_DEVICES=%s; the vLLM server holds GPU(s) %s", value, server)
    return value


# ------------------------------------------------------------------------------- on the login node


def server_gpus(config: Any) -> int:
    """GPUs per node kept for GRPO's vLLM server (0 unless train.vllm_mode=server)."""
    t = config.train
    if config.verb == "grpo" and t.use_vllm and t.vllm_mode == "server":
        return t.vllm_tensor_parallel_size
    return 0


def processes_per_node(config: Any, gpus: int, requested: int | None = None) -> int:
    """Training processes per node: one per training GPU (the GPUs less the vLLM server's), or,
    without GPUs, ``requested`` (default 1)."""
    serving = server_gpus(config)
    if serving and gpus <= serving:
        raise UserError(
            f"train.vllm_mode=server needs more than {serving} GPU(s) per node: "
            f"train.vllm_tensor_parallel_size={serving} serve vLLM and the others train "
            f"(asked: --gpus {gpus})"
        )
    if not gpus:
        return requested or 1
    training = gpus - serving
    if requested is not None and requested != training:
        raise UserError(
            f"resources.processes_per_node={requested} with {gpus} GPUs per node: a GPU job runs "
            f"one process per training GPU ({training}); leave it unset, or ask for --gpus "
            f"{requested + serving}"
        )
    return training


def check_grpo_batch(config: Any, processes: int) -> None:
    """TRL's rule, checked for the requested job before it waits in the queue.

    GRPOConfig.__post_init__ (trl 1.16, trl/trainer/grpo_config.py) sets generation_batch_size =
    per_device_train_batch_size x processes x gradient_accumulation_steps (steps_per_generation
    defaults to the accumulation steps) and requires it to be divisible by num_generations. Set
    through TRL's own keys (trl_options.py), ``generation_batch_size`` or ``steps_per_generation``
    replace that product or the accumulation steps in it."""
    if config.verb != "grpo":
        return
    t = config.train
    extra = getattr(t, "trl", None) or {}
    if extra.get("generation_batch_size") or extra.get("steps_per_generation"):
        if extra.get("generation_batch_size"):
            size, what = int(extra["generation_batch_size"]), "train.generation_batch_size"
        else:
            steps = int(extra["steps_per_generation"])
            size = t.per_device_train_batch_size * processes * steps
            what = (
                f"train.per_device_train_batch_size ({t.per_device_train_batch_size}) x "
                f"{processes} training process{'es' if processes != 1 else ''} x "
                f"train.steps_per_generation ({steps})"
            )
        if size % t.num_generations:
            raise UserError(
                "GRPO needs whole groups of completions in each generation batch (TRL's "
                f"GRPOConfig): {what} = {size}, not divisible by train.num_generations "
                f"({t.num_generations})"
            )
        return
    per_device, accumulation, groups = (
        t.per_device_train_batch_size,
        t.gradient_accumulation_steps,
        t.num_generations,
    )
    total = per_device * processes * accumulation
    if total % groups == 0:
        return

    def next_fit(current: int, step: int) -> int:  # smallest multiple of step >= current
        return step * math.ceil(current / step)

    fit_accumulation = next_fit(accumulation, groups // math.gcd(groups, per_device * processes))
    fit_per_device = next_fit(per_device, groups // math.gcd(groups, processes * accumulation))
    raise UserError(
        "GRPO needs whole groups of completions in each generation batch (TRL's GRPOConfig): "
        f"train.per_device_train_batch_size ({per_device}) x {processes} training process"
        f"{'es' if processes != 1 else ''} x train.gradient_accumulation_steps ({accumulation}) "
        f"= {total}, not divisible by train.num_generations ({groups}). Use e.g. "
        f"--set train.gradient_accumulation_steps={fit_accumulation} or "
        f"--set train.per_device_train_batch_size={fit_per_device}, or another process count"
    )


def supported_vllm_range() -> str:
    """The vLLM versions the installed TRL supports (its `vllm` extra), e.g. >=0.22.0,<=0.31.0."""
    from importlib import metadata

    from packaging.requirements import Requirement

    try:
        requirements = metadata.requires("trl") or []
    except metadata.PackageNotFoundError:
        return TRL_VLLM_RANGE
    for text in requirements:
        req = Requirement(text)
        if req.name == "vllm" and req.marker is not None and req.marker.evaluate({"extra": "vllm"}):
            bounds = sorted((str(s) for s in req.specifier), reverse=True)  # lower bound first
            return ",".join(bounds) or TRL_VLLM_RANGE
    return TRL_VLLM_RANGE


def check_vllm(config: Any, gpus: int, processes: int) -> list[str]:
    """vLLM placement against the request and the installed vLLM against TRL's range.

    The image prompts vLLM gets are the config check's (recipes.check: a family and mode whose
    images vLLM would not turn into the trainer's tokens is refused there; colocate hands vLLM
    unexpanded prompts, train/vllm_prompts.py). Returns notes for the user (vLLM not installed
    on this login node); raises UserError for a request that cannot run."""
    if config.verb != "grpo" or not config.train.use_vllm:
        return []
    return _check_vllm_install(config, gpus, processes)


def _check_vllm_install(config: Any, gpus: int, processes: int) -> list[str]:
    t = config.train
    if gpus < 1:
        raise UserError("train.use_vllm needs GPUs (--gpus); vLLM does not generate on CPU")
    tp = t.vllm_tensor_parallel_size
    if t.vllm_mode == "colocate" and processes % tp:
        # trl/generation/vllm_generation.py: tensor_parallel_size must divide the world size
        raise UserError(
            f"train.vllm_tensor_parallel_size={tp} must divide the {processes} training "
            "processes in colocate mode (each group of that many processes shares one engine)"
        )
    from importlib import metadata

    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    trl_range = supported_vllm_range()
    wanted, why = trl_range, "the range TRL supports"
    if t.vllm_mode == "server":
        specs = list(SpecifierSet(trl_range))
        weaker = [
            s for s in specs if s.operator in (">=", ">") and s.contains(SERVER_IMAGES_MIN_VLLM)
        ]
        kept = [str(s) for s in specs if s not in weaker]
        if not any(s.startswith(">") for s in kept):
            kept.append(f">={SERVER_IMAGES_MIN_VLLM}")
        wanted = ",".join(sorted(kept, reverse=True))  # lower bound first
        why = (
            f"TRL's range, and from {SERVER_IMAGES_MIN_VLLM} for images in server mode: TRL sends "
            "them to /v1/chat/completions/render, which vLLM's server registers only from there"
        )
        upper = [s for s in SpecifierSet(trl_range) if s.operator in ("<", "<=")]
        if any(not s.contains(SERVER_IMAGES_MIN_VLLM) for s in upper):
            raise UserError(
                f"train.vllm_mode=server needs vllm>={SERVER_IMAGES_MIN_VLLM} for image prompts, "
                f"but the installed TRL supports vllm{trl_range} only: use "
                "--set train.vllm_mode=colocate, or a TRL whose range reaches it"
            )
    try:
        installed = metadata.version("vllm")
    except metadata.PackageNotFoundError:
        return [
            f"vllm is not installed here, so its version was not checked; the job's environment "
            f"needs vllm{wanted} ({why}; pip install -e '.[gpu]' pins it)"
        ]
    base = Version(Version(installed).base_version)
    if SpecifierSet(wanted).contains(base, True):
        if f"{base.major}.{base.minor}" == IMAGE_PROMPTS_CHECKED_VLLM:
            return []
        return [
            f"vllm {installed}: the image prompts vLLM is handed were checked against vLLM "
            f"{IMAGE_PROMPTS_CHECKED_VLLM}'s own processing only (tests/test_vllm_prompts.py); "
            "pip install -e '.[gpu]' pins that one"
        ]
    if t.vllm_mode == "server":
        raise UserError(
            f"vllm {installed} is installed, but train.vllm_mode=server needs vllm{wanted} ({why}): "
            f"pip install 'vllm{wanted}', or use --set train.vllm_mode=colocate"
        )
    raise UserError(
        f"vllm {installed} is installed, but TRL supports vllm{wanted}: "
        f"pip install 'vllm{wanted}' (or pip install -e '.[gpu]')"
    )


def server_model(config: Any) -> tuple[str, bool]:
    """What the server loads, and whether it may stay offline: ``model.path``, else the hub
    model's folder in the local cache (checked at submission), else its hub id (a dry run of an
    uncached model)."""
    if config.model.path:
        return config.model.path, True
    spec = get_spec(config.model.name)
    if spec.tiny:
        raise UserError(
            f"train.vllm_mode=server: {spec.name} is built by the job itself and vLLM cannot "
            "serve it; use a hub model or model.path"
        )
    cached = cached_hub_path(spec.hub_id)
    return (str(cached), True) if cached is not None else (spec.hub_id, False)


def job_setup_lines(config: Any, gpus: int, nodes: int) -> list[str]:
    """Shell lines for the job script: a vLLM generation server when GRPO uses server mode.

    The server takes the last ``train.vllm_tensor_parallel_size`` GPUs of the first node (the
    batch step's CUDA_VISIBLE_DEVICES; their real ids from SLURM_JOB_GPUS are exported for
    ``restrict_training_gpus``), loads the cached model offline, and listens on the job's port;
    the weight-sync group gets a port of its own. The job fails at once when the server dies
    before it answers."""
    serving = server_gpus(config)
    if not serving:
        return []
    t = config.train
    training = processes_per_node(config, gpus)  # checks that some GPUs are left to train
    model, offline = server_model(config)
    all_gpus = ",".join(str(i) for i in range(gpus))
    args = [
        "--gpu-memory-utilization",
        str(t.vllm_gpu_memory_utilization or SERVER_MEMORY_DEFAULT),
        "--tensor-parallel-size",
        str(serving),
    ]
    if t.vllm_max_model_length:
        args += ["--max-model-len", str(t.vllm_max_model_length)]
    # the trainer's image limits (Qwen's pixel budget), not the checkpoint's defaults: vLLM must
    # turn an image into as many tokens as the prompt ids hold (train/runner.py also resizes the
    # images to the limits before training, so both see the same pixels)
    mm = get_adapter(get_spec(config.model.name).family).processor_kwargs(
        **image_options(config.model)
    )
    if mm:
        args += ["--mm-processor-kwargs", json.dumps(mm, sort_keys=True)]
    # images per prompt as the rows hold them (data.images_per_row), no video: vLLM's memory
    # profile reserves room for these alone (models/serving.py mm_limits)
    limits = mm_limits(config.data.images_per_row)
    args += ["--limit-mm-per-prompt", json.dumps(limits, sort_keys=True)]
    env = {"CUDA_VISIBLE_DEVICES": '"$VQA_R1_SERVER_CUDA"'}
    if offline:
        env["HF_HUB_OFFLINE"] = "1"  # a compute node may have no internet; the model is local
    log_file = (
        shlex.quote(f"{config.output_dir}/vllm-server-") + '"${SLURM_JOB_ID:-0}.log"'
        if config.output_dir
        else '"vllm-server-${SLURM_JOB_ID:-0}.log"'
    )
    return [
        f"# GRPO vLLM generation server (train.vllm_mode=server) on the last {serving} GPU(s) of "
        f"this node; {training} training process(es) per node use the others",
        "# (SLURM sets CUDA_VISIBLE_DEVICES again in each srun step: the training processes drop "
        f"${SERVER_GPUS_ENV} from theirs, launch/distributed.py restrict_training_gpus)",
        f'IFS=, read -ra VQA_R1_GPUS <<< "${{CUDA_VISIBLE_DEVICES:-{all_gpus}}}"',
        f'IFS=, read -ra VQA_R1_GPU_IDS <<< "${{SLURM_JOB_GPUS:-${{CUDA_VISIBLE_DEVICES:-{all_gpus}}}}}"',
        f"if [ ${{#VQA_R1_GPUS[@]}} -le {serving} ]; then",
        f'  echo "vLLM server: {serving} of ${{#VQA_R1_GPUS[@]}} GPU(s) would leave none to train" >&2; exit 1',
        "fi",
        f'VQA_R1_SERVER_CUDA="$(IFS=,; echo "${{VQA_R1_GPUS[*]: -{serving}}}")"',
        f'export {SERVER_GPUS_ENV}="$(IFS=,; echo "${{VQA_R1_GPU_IDS[*]: -{serving}}}")"',
        *vllm_server_lines(
            model,
            launcher="trl",
            host=None,
            env=env,
            extra_args=args,
            log_file=log_file,
            label="GRPO vLLM server",
        ),
        f'export {VLLM_URL_ENV}="http://$(hostname):${PORT_VAR}"',
        f"export {VLLM_GROUP_PORT_ENV}={free_port_expression(GROUP_PORT_BASE)}"
        "  # TRL's weight-sync group (vllm_group_port)",
    ]
