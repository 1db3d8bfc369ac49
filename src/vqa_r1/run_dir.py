"""The run directory: everything a run leaves behind, in one place that a requeued job reopens.

Also how to find what a run left: its latest complete checkpoint and its adapter. Training writes
checkpoints atomically (train/trainer_hooks.py); readers here skip any without the marker.

RUN_DIR/config.yaml          resolved configuration (what was submitted)
RUN_DIR/checkpoints/         checkpoint-N/ with adapter, optimizer, scheduler, RNG, trainer state
RUN_DIR/metrics.jsonl        one line per logging step (trimmed to the checkpoint on resume)
RUN_DIR/completions.jsonl    sampled prompts, completions and rewards
RUN_DIR/final/               the final adapter and processor
RUN_DIR/status.json          state, steps, requeues, timings; a failure's reason and log

A run that ends other than by finishing says so in status.json (``failures_recorded``): FAILED
with the exception's one line (a full disk named as such) and the log to read, or INTERRUPTED
(Ctrl-C, SIGTERM outside SLURM). A process killed without a chance to write (SIGKILL, the OOM
killer) leaves RUNNING with its pid and host, which `launch.py status` checks on that host.

In a job with several processes the run directory is the run's, not a process's: status.json,
metrics.jsonl, completions.jsonl and final/ are written by rank 0 alone (vqa_r1.ranks); a
checkpoint by all ranks together (train/trainer_hooks.py).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import shutil
import signal
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vqa_r1 import ranks
from vqa_r1.claims import FolderRefused
from vqa_r1.clock import now_iso
from vqa_r1.errors import UserError
from vqa_r1.io import atomic_write_json, atomic_write_text, read_jsonl

log = logging.getLogger(__name__)
COMPLETE_MARKER = "CHECKPOINT_COMPLETE"
# a run stopped by its health monitor (train/health.py, train.health_action=stop): checkpointed,
# no final adapter, never requeued; the same command refuses it (``refuse_unhealthy``)
UNHEALTHY = "UNHEALTHY"
_CKPT = re.compile(r"^checkpoint-(\d+)$")


def checkpoint_step(path: Path) -> int | None:
    match = _CKPT.match(path.name)
    return int(match.group(1)) if match else None


def is_complete(path: Path) -> bool:
    return (path / COMPLETE_MARKER).exists() and (path / "trainer_state.json").exists()


def latest_checkpoint(checkpoint_dir: str | Path) -> Path | None:
    """The newest complete checkpoint; incomplete newer ones are reported and skipped."""
    root = Path(checkpoint_dir)
    if not root.exists():
        return None
    found = sorted(
        (p for p in root.iterdir() if p.is_dir() and checkpoint_step(p) is not None),
        key=lambda p: checkpoint_step(p),
        reverse=True,
    )
    for path in found:
        if is_complete(path):
            return path
        log.warning("skipping incomplete checkpoint %s (no %s marker)", path, COMPLETE_MARKER)
    return None


def resolve_adapter(path: str | Path | None) -> Path | None:
    """An adapter folder, or a run directory (its final/ adapter, else its latest checkpoint)."""
    if not path:
        return None
    path = Path(path)
    if (path / "adapter_config.json").exists():
        return path
    if (path / "final" / "adapter_config.json").exists():
        return path / "final"
    latest = latest_checkpoint(path / "checkpoints")
    if latest is not None:
        return latest
    raise UserError(
        f"{path}: no LoRA adapter (adapter_config.json), final/ or complete checkpoint here"
    )


@dataclass
class RunDir:
    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def completions(self) -> Path:
        return self.root / "completions.jsonl"

    @property
    def final(self) -> Path:
        return self.root / "final"

    @property
    def status_file(self) -> Path:
        return self.root / "status.json"

    def create(self) -> RunDir:
        self.root.mkdir(parents=True, exist_ok=True)
        self.checkpoints.mkdir(exist_ok=True)
        return self

    def status(self) -> dict:
        if self.status_file.exists():
            return json.loads(self.status_file.read_text())
        return {}

    def failure(self) -> str | None:
        """The reason a failed or interrupted run recorded (``failures_recorded``), or None."""
        try:
            status = self.status()
        except (OSError, ValueError):
            return None
        failed = ("FAILED", "INTERRUPTED", UNHEALTHY)
        return status.get("reason") if status.get("state") in failed else None

    def update_status(self, **fields: Any) -> None:
        """Merge ``fields`` into status.json. Rank 0 alone writes it (``written_by_rank`` says
        so); on another rank this is a bug in the caller: logged, and nothing is written."""
        if not ranks.is_main():
            log.warning(
                "rank %d: status.json is written by rank 0 only; not writing %s",
                ranks.rank(),
                sorted(fields),
            )
            return
        if fields.get("state") == "RUNNING":  # who runs it: `status` tells a killed run by these
            fields = {**this_process(), **fields}
        status = self.status()
        status.update(fields, updated=now_iso(), written_by_rank=ranks.rank())
        atomic_write_json(self.status_file, status)

    def trim_metrics(self, max_step: int) -> None:
        """Drop metric lines logged after ``max_step``: they are replayed after a resume."""
        if not self.metrics.exists():
            return
        kept = [
            r
            for r in read_jsonl(self.metrics, partial_last_line=True)
            if r.get("step", 0) <= max_step
        ]
        atomic_write_text(self.metrics, "".join(f"{json.dumps(r)}\n" for r in kept))


def refuse_unhealthy(root: str | Path, health_action: str) -> None:
    """A run that ended UNHEALTHY is not run again by the same command (it would stop at the same
    alarm): ``FolderRefused`` saying why and how to go on. ``health_action`` "warn" continues it
    (the health settings are not part of a run's settings)."""
    try:
        status = RunDir(Path(root)).status()
    except (OSError, ValueError):
        return
    if status.get("state") != UNHEALTHY or health_action != "stop":
        return
    alarms = status.get("health") or []
    last = alarms[-1] if alarms else {}
    what = f"{last.get('code')} at step {last.get('step')}" if last else "a health alarm"
    raise FolderRefused(
        f"{root} is an UNHEALTHY run (stopped by {what}: {last.get('evidence', '?')}); the same "
        f"command would stop there again. Fix: {last.get('fix', '-')}. Then start it with the "
        "changed settings in a new --output-dir (or --overwrite, which moves this one aside), or "
        "continue this run as it is with --set train.health_action=warn"
    )


# ------------------------------------------------------------------------------- failures


class Terminated(KeyboardInterrupt):
    """SIGTERM outside SLURM, raised where the process was, as Ctrl-C raises KeyboardInterrupt
    (``except Exception`` in library code does not swallow it)."""


# torch's checkpoint writer reports a failed write as an assertion of its own C++ file, the errno
# lost: "[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534"
_TORCH_WRITE_FAILED = ("inline_container.cc", "PytorchStreamWriter", "file write failed")
_LOW_SPACE_BYTES = 64 * 2**20


def _free_bytes(path: Path) -> int | None:
    for candidate in (path, *path.parents):
        with contextlib.suppress(OSError):
            return shutil.disk_usage(candidate).free
    return None


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _disk_full(err: BaseException) -> bool:
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return "no space left on device" in str(err).lower() or "StorageFull" in str(err)


def write_failed(err: BaseException) -> bool:
    """A full disk or quota, however the writer reported it (failure_reason's cases)."""
    return _disk_full(err) or any(marker in str(err) for marker in _TORCH_WRITE_FAILED)


def failure_reason(err: BaseException, where: str | Path) -> str:
    """One line for a run that failed with ``err`` while writing under ``where``.

    A full disk says so and where, whatever raised it (an OSError with ENOSPC or EDQUOT,
    safetensors' "No space left on device", or torch's write assertion that names only its own
    source file), with the free space measured there now."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    first = lines[0] if lines else ""
    if isinstance(err, UserError):
        line = first or type(err).__name__
    else:
        line = f"{type(err).__name__}: {first}" if first else type(err).__name__
    where = Path(where)
    full = _disk_full(err)
    torch_write = any(marker in str(err) for marker in _TORCH_WRITE_FAILED)
    if not (full or torch_write):
        return line[:500]
    target = Path(err.filename) if isinstance(err, OSError) and err.filename else where
    free = _free_bytes(target)
    free_text = f"{_size(free)} free there now" if free is not None else "free space unknown"
    if full or (free is not None and free < _LOW_SPACE_BYTES):
        return (
            f"no space left on device writing under {target} ({free_text}): free space or "
            f"choose another --output-dir, then run the same command to resume from the latest "
            f"complete checkpoint [{line[:200]}]"
        )
    return (
        f"a write under {target} failed; is the disk full or over quota? ({free_text}) "
        f"[{line[:200]}]"
    )


ENDED = (
    "COMPLETED",
    "FAILED",
    "INTERRUPTED",
    "STOPPED",
    "REQUEUED",
    "MAX_REQUEUES_REACHED",
    "UNHEALTHY",
)


@contextlib.contextmanager
def failures_recorded(
    run_dir: str | Path, log_file: str | Path | None = None, sigterm: bool = True
) -> Iterator[None]:
    """Whatever ends the work inside, status.json does not say RUNNING afterwards.

    An exception: FAILED with ``failure_reason`` and ``log_file`` (the job's log, where its
    traceback is); Ctrl-C: INTERRUPTED; ``sigterm`` (outside SLURM, where SLURM's requeue logic
    does not own the signal): SIGTERM raises ``Terminated`` here, then INTERRUPTED. A state the
    work recorded itself (COMPLETED, STOPPED, REQUEUED, ...) is left alone; so is a folder that
    was never created (a run refused before it began), and so is a folder the command was refused
    (``claims.FolderRefused``: it may hold another run). Rank 0 alone writes.
    """
    root = Path(run_dir)
    before = _state_and_time(root)  # an end state written before this attempt is replaced
    previous = None
    if sigterm and threading.current_thread() is threading.main_thread():

        def terminated(signum: int, frame: object) -> None:
            raise Terminated("SIGTERM")

        previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
        if before[0] in ("FAILED", "INTERRUPTED") and _state_and_time(root) == before:
            # work that records no state of its own (evaluate) ended well this time
            _record_end(root, {"state": "COMPLETED", "reason": None}, None, before, force=True)
    except BaseException as err:
        if isinstance(err, SystemExit) and err.code in (0, None):
            raise
        if isinstance(err, FolderRefused):  # not this command's folder: its status is not ours
            raise
        if isinstance(err, KeyboardInterrupt):
            name = "SIGTERM" if isinstance(err, Terminated) else "Ctrl-C (SIGINT)"
            fields = {"state": "INTERRUPTED", "reason": f"interrupted by {name}"}
        elif isinstance(err, SystemExit):
            fields = {"state": "FAILED", "reason": f"exited with code {err.code}"}
        else:
            fields = {"state": "FAILED", "reason": failure_reason(err, root)}
        _record_end(root, fields, log_file, before)
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _state_and_time(root: Path) -> tuple[str | None, str | None]:
    try:
        status = RunDir(root).status()
    except (OSError, ValueError):  # a torn or unreadable status.json is replaced
        return None, None
    return status.get("state"), status.get("updated")


def _record_end(
    root: Path,
    fields: dict[str, Any],
    log_file: str | Path | None,
    before: tuple,
    force: bool = False,
) -> None:
    if not ranks.is_main() or not root.is_dir():
        return
    now = _state_and_time(root)
    if (
        now[0] in ENDED and now != before and not force
    ):  # the work recorded how it ended (REQUEUED, ...)
        return
    rd = RunDir(root)
    try:
        rd.update_status(**fields, log=str(log_file) if log_file else None)
    except (
        OSError,
        ValueError,
    ) as err:  # ValueError: a torn status.json  # a full disk may refuse this too: the log still has it
        log.error("could not record %s in %s: %s", fields["state"], rd.status_file, err)


def process_started(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, ``/proc/PID/stat``), or None where
    there is no /proc. With its pid it names one process: a pid is reused by the next one."""
    stat = _proc_stat(pid)
    return stat[1] if stat else None


def _proc_stat(pid: int) -> tuple[str, int] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the name in parentheses may hold spaces
    return fields[0], int(fields[19])  # state (field 3), starttime (field 22)


def process_alive(pid: int, host: str | None, started: int | None = None) -> bool | None:
    """Whether process ``pid`` of ``host`` still runs; None when this host cannot tell. A zombie
    (ended, not yet reaped) has ended; with ``started`` (``process_started`` when it was
    recorded), a pid now used by another process is not the one recorded."""
    if host != socket.gethostname():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    stat = _proc_stat(pid)
    if stat is None:
        return True  # no /proc: the pid exists, which is all that can be known
    if stat[0] == "Z":
        return False
    return started is None or stat[1] == started


def process_identity(pid: int) -> dict[str, Any]:
    """The fields that name one process of this host: its pid, host and start time."""
    return {"pid": pid, "host": socket.gethostname(), "started": process_started(pid)}


def identity_alive(identity: dict | None) -> bool | None:
    """``process_alive`` of a recorded ``process_identity``; None when none was recorded."""
    if not isinstance(identity, dict) or not identity.get("pid"):
        return None
    return process_alive(int(identity["pid"]), identity.get("host"), identity.get("started"))


def this_process() -> dict[str, Any]:
    """The fields that let `status` tell a running run from a killed one."""
    return process_identity(os.getpid())
