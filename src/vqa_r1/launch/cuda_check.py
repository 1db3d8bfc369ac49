"""Can this process use the GPUs its job asked for? Checked at job start and by `vqa-r1 doctor`.

A torch wheel built for CUDA 13 needs an NVIDIA driver >= 580, and each wheel carries kernels for
a list of GPU architectures (torch 2.14.1+cu130: sm_75 and newer, so no V100). With an older driver
``torch.cuda.is_available()`` is simply False and everything runs on the CPU: a GPU job would
train for its whole allocation at CPU speed, then requeue and do it again. So a job that asked for
GPUs and cannot use them fails at once with one message naming the driver, the torch build and
what to install (``require_usable_cuda``). The facts come from torch and from ``nvidia-smi``
(which works without torch's CUDA runtime, so it can say which driver is there when torch cannot).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field

from vqa_r1.errors import UserError

# The oldest Linux driver each CUDA major version runs on (CUDA's minor version compatibility:
# any 12.x build runs on a 12.0 driver). From NVIDIA's CUDA toolkit release notes, table 3.
MIN_DRIVER = {11: 450, 12: 525, 13: 580}
# What to install for a driver of each CUDA major version (PyTorch's wheel indexes). cu126 is the
# newest CUDA 12 index whose wheels still carry sm_50 to sm_70 kernels (V100 and older).
WHEEL_INDEX = {
    11: "https://download.pytorch.org/whl/cu118",
    12: "https://download.pytorch.org/whl/cu126",
    13: "https://download.pytorch.org/whl/cu130",
}
BF16_MIN_CAPABILITY = (8, 0)  # Ampere: bfloat16 in hardware (older GPUs emulate it slowly)


@dataclass
class Gpu:
    name: str
    capability: tuple[int, int]
    memory_gib: float | None = None


@dataclass
class SmiReport:
    """What ``nvidia-smi`` says: the driver and the GPUs, or why it could not be asked."""

    driver: str | None = None
    gpus: list[Gpu] = field(default_factory=list)
    error: str | None = None


@dataclass
class TorchCuda:
    """What the installed torch says about CUDA."""

    version: str
    cuda: str | None  # torch.version.cuda; None: a CPU-only build
    arch_list: list[str]
    available: bool
    gpus: list[Gpu] = field(default_factory=list)
    bf16: bool = False


def nvidia_smi(timeout_s: float = 30.0) -> SmiReport:
    """The driver version and the GPUs, from ``nvidia-smi`` on PATH."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return SmiReport(error="nvidia-smi is not on PATH (no NVIDIA driver on this machine)")
    query = "--query-gpu=driver_version,name,compute_cap,memory.total"
    try:
        out = subprocess.run(
            [exe, query, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return SmiReport(error=f"nvidia-smi failed: {err}")
    if out.returncode != 0:
        said = (out.stdout + out.stderr).strip().splitlines()
        return SmiReport(error=f"nvidia-smi failed: {said[0] if said else out.returncode}")
    report = SmiReport()
    for line in out.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4:
            continue
        report.driver = parts[0]
        report.gpus.append(Gpu(parts[1], _capability(parts[2]), _mib_to_gib(parts[3])))
    if report.driver is None:
        report.error = "nvidia-smi listed no GPU"
    return report


def torch_cuda() -> TorchCuda:
    """torch's build, its architectures, and the GPUs it can use."""
    import torch

    available = bool(torch.cuda.is_available())
    facts = TorchCuda(
        version=torch.__version__,
        cuda=torch.version.cuda,
        arch_list=list(torch.cuda.get_arch_list()) if torch.version.cuda else [],
        available=available,
    )
    if available:
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            facts.gpus.append(
                Gpu(
                    torch.cuda.get_device_name(index),
                    tuple(torch.cuda.get_device_capability(index)),
                    props.total_memory / 2**30,
                )
            )
        facts.bf16 = bool(torch.cuda.is_bf16_supported(including_emulation=False))
    return facts


def arch_supported(capability: tuple[int, int], arch_list: list[str]) -> bool:
    """CUDA's binary compatibility: a cubin for sm_XY runs on X.Y and later GPUs of major X; PTX
    (compute_XY) is compiled for any GPU of capability X.Y or newer when the program starts."""
    major, minor = capability
    for arch in arch_list:
        kind, _, number = arch.partition("_")
        digits = re.sub(r"[a-z]+$", "", number)
        if not digits.isdigit():
            continue
        code = int(digits)
        code_major, code_minor = divmod(code, 10)
        if kind == "sm" and code_major == major and code_minor <= minor:
            return True
        if kind == "compute" and (code_major, code_minor) <= (major, minor):
            return True
    return False


def cuda_major(torch_build_cuda: str | None) -> int | None:
    if not torch_build_cuda:
        return None
    head = torch_build_cuda.split(".")[0]
    return int(head) if head.isdigit() else None


def driver_major(driver: str | None) -> int | None:
    head = (driver or "").split(".")[0]
    return int(head) if head.isdigit() else None


def driver_cuda_major(driver: str | None) -> int | None:
    """The newest CUDA major version a driver runs (None: unknown or too old for any we know)."""
    major = driver_major(driver)
    if major is None:
        return None
    fits = [cuda for cuda, minimum in MIN_DRIVER.items() if major >= minimum]
    return max(fits) if fits else None


def install_hint(facts: TorchCuda, driver: str | None) -> str:
    """What to install so that torch runs on this driver (the same torch version, another index)."""
    base = facts.version.split("+")[0]
    cuda = driver_cuda_major(driver)
    index = WHEEL_INDEX.get(cuda) if cuda else None
    if index is None:
        return (
            f"update the NVIDIA driver to >= {MIN_DRIVER[max(MIN_DRIVER)]}, or install the torch "
            "build for your driver's CUDA version (https://pytorch.org/get-started/locally/)"
        )
    return (
        f"install torch built for CUDA {cuda}: pip install 'torch=={base}' torchvision "
        f"--index-url {index} (or update the NVIDIA driver)"
    )


def cuda_problem(facts: TorchCuda, smi: SmiReport) -> str | None:
    """Why this process cannot use a GPU, as one message with the fix; None when it can."""
    build = f"torch {facts.version}"
    if facts.cuda is None:
        return (
            f"{build} is a CPU-only build, so this GPU job cannot use its GPU; install a CUDA "
            f"build: {install_hint(facts, smi.driver)}"
        )
    needs = MIN_DRIVER.get(cuda_major(facts.cuda) or 0)
    needs_text = f" (CUDA {facts.cuda} needs driver >= {needs})" if needs else ""
    if not facts.available:
        if smi.driver is None:
            return (
                f"no usable CUDA device: {smi.error or 'nvidia-smi found no GPU'}; {build}"
                f"{needs_text}. Run the job on a GPU node (the cluster profile's partition, "
                "--gpus) or ask for no GPUs (--gpus 0)"
            )
        major = driver_major(smi.driver)
        if needs and major is not None and major < needs:
            return (
                f"no usable CUDA device: NVIDIA driver {smi.driver} is too old for {build}"
                f"{needs_text}; {install_hint(facts, smi.driver)}"
            )
        return (
            f"no usable CUDA device: torch cannot initialise CUDA with NVIDIA driver {smi.driver} "
            f"({build}); check CUDA_VISIBLE_DEVICES and that the job was given a GPU"
        )
    for gpu in facts.gpus:
        if facts.arch_list and not arch_supported(gpu.capability, facts.arch_list):
            cap = f"sm_{gpu.capability[0]}{gpu.capability[1]}"
            return (
                f"GPU {gpu.name} ({cap}) is not supported by {build}, which has kernels for "
                f"{' '.join(facts.arch_list)}; install a torch build with {cap} kernels: "
                f"pip install 'torch=={facts.version.split('+')[0]}' torchvision --index-url "
                f"{WHEEL_INDEX[12]} (check with python -c "
                "'import torch; print(torch.cuda.get_arch_list())')"
            )
    return None


def require_usable_cuda(gpus: int) -> None:
    """Fail at once, with the fix, when a job that asked for ``gpus`` GPUs cannot use them.

    Never lets a GPU job train or evaluate on the CPU."""
    if gpus <= 0:
        return
    facts = torch_cuda()
    # (a training process may see fewer GPUs than the job has: a vLLM server holds the others)
    problem = cuda_problem(facts, nvidia_smi() if not facts.available else SmiReport())
    if problem:
        raise UserError(problem)


def _capability(text: str) -> tuple[int, int]:
    major, _, minor = text.partition(".")
    try:
        return int(major), int(minor or 0)
    except ValueError:
        return (0, 0)


def _mib_to_gib(text: str) -> float | None:
    try:
        return float(text) / 1024
    except ValueError:
        return None
