"""Multi-GPU and multi-node jobs: torch.distributed from SLURM, DeepSpeed configs, a vLLM server.

The launcher asks SLURM for one task per GPU (`--ntasks-per-node`); srun starts the task on each,
and each derives RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT from SLURM's variables
(submitit's TorchDistributedEnvironment). The Trainer (accelerate) then initialises the process
group from that environment, with DeepSpeed when the recipe names a ZeRO config. GRPO generation
with vLLM runs either inside the training processes (`colocate`) or on a server started in the job
script on the node's last GPU (`server`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from vqa_r1.errors import UserError

log = logging.getLogger(__name__)
DEEPSPEED_DIR = Path(__file__).parent / "deepspeed"
VLLM_PORT_ENV = "VQA_R1_VLLM_URL"


def deepspeed_config(name: str | None) -> str | None:
    """`zero2` / `zero3` (shipped) or a path to a DeepSpeed JSON file."""
    if not name:
        return None
    shipped = DEEPSPEED_DIR / f"{name}.json"
    if shipped.exists():
        return str(shipped)
    if Path(name).exists():
        return str(Path(name).resolve())
    raise UserError(f"train.deepspeed: {name!r} is neither zero2, zero3 nor an existing JSON file")


def export_torch_distributed() -> dict[str, str]:
    """In a multi-task SLURM job, export the torch.distributed variables; a no-op otherwise."""
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


def job_setup_lines(config: Any, gpus: int, nodes: int) -> list[str]:
    """Shell lines for the job script: a vLLM generation server when GRPO uses server mode."""
    t = config.train
    if config.verb != "grpo" or not t.use_vllm or t.vllm_mode != "server":
        return []
    if gpus < 2:
        raise UserError(
            "train.vllm_mode=server needs at least 2 GPUs per node: one serves vLLM, the rest train"
        )
    from vqa_r1.models.registry import get_spec

    model = config.model.path or get_spec(config.model.name).hub_id
    last = gpus - 1
    port = "$((20000 + SLURM_JOB_ID % 10000))"
    return [
        f"# vLLM generation server for GRPO on GPU {last} of the first node; training uses GPUs 0-{last - 1}",
        f"export VQA_R1_VLLM_PORT={port}",
        f"CUDA_VISIBLE_DEVICES={last} trl vllm-serve --model {model} --port $VQA_R1_VLLM_PORT "
        f'--gpu-memory-utilization 0.9 > "vllm-$SLURM_JOB_ID.log" 2>&1 &',
        'for i in $(seq 1 180); do curl -sf "http://127.0.0.1:$VQA_R1_VLLM_PORT/health/" >/dev/null && break; sleep 5; done',
        f'export {VLLM_PORT_ENV}="http://$(hostname):$VQA_R1_VLLM_PORT"',
        f"export CUDA_VISIBLE_DEVICES={','.join(str(i) for i in range(last))}",
    ]


def grpo_vllm_args(train: Any) -> dict:
    """GRPOConfig fields for vLLM generation (server URL taken from the job script's export)."""
    if not train.use_vllm:
        return {}
    args: dict = {"use_vllm": True, "vllm_mode": train.vllm_mode}
    if train.vllm_mode == "server" and os.environ.get(VLLM_PORT_ENV):
        args["vllm_server_base_url"] = os.environ[VLLM_PORT_ENV]
    return args
