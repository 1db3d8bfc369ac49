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
from typing import Any

from vqa_r1.config import VLLM_URL_ENV
from vqa_r1.errors import UserError
from vqa_r1.models.registry import get_spec
from vqa_r1.models.serving import PORT_VAR, vllm_server_lines

log = logging.getLogger(__name__)


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
    model = config.model.path or get_spec(config.model.name).hub_id
    last = gpus - 1
    return [
        f"# vLLM generation server for GRPO on GPU {last} of the first node; training uses GPUs 0-{last - 1}",
        *vllm_server_lines(
            model,
            launcher="trl",
            host=None,
            gpus=str(last),
            extra_args=["--gpu-memory-utilization", "0.9"],
            label="GRPO vLLM server",
        ),
        f'export {VLLM_URL_ENV}="http://$(hostname):${PORT_VAR}"',
        f"export CUDA_VISIBLE_DEVICES={','.join(str(i) for i in range(last))}",
    ]
