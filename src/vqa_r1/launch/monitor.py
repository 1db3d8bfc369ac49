"""`status`, `logs` and `cancel` for submitted runs, sweeps and pipelines.

The launcher records every job it submits in the run directory (`jobs.json`: job id, array index,
submit time, executor, command, log folder), so a run directory is enough to find its jobs again
days later. The state comes from SLURM's accounting (`sacct`), which outlives the controller's
memory of a job; the requeue count from `scontrol` while the job is still known there, else from
the run's own status.json. A pipeline (`pipeline.json`) or sweep (`sweep.json`) folder shows one
line per step or element, so a stopped chain says which step failed and which never ran.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from vqa_r1.errors import UserError

JOBS_FILE = "jobs.json"
PIPELINE_FILE = "pipeline.json"
SWEEP_FILE = "sweep.json"
SACCT_FIELDS = ("JobID", "State", "Elapsed", "NodeList", "ExitCode", "Start")
FINAL_STATES = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "OUT_OF_MEMORY",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
}
JOB_ID = re.compile(r"^\d+(_\d+)?$")


# ------------------------------------------------------------------------------- recording


def record_job(
    run_dir: str | Path,
    job_id: str,
    executor: str,
    log_dir: str | Path,
    command: str,
    array_index: int | None = None,
) -> dict:
    """Append a submitted job to `<run_dir>/jobs.json` (a run may be submitted more than once)."""
    from vqa_r1.io import atomic_write_json

    path = Path(run_dir) / JOBS_FILE
    jobs = read_jobs(run_dir)
    entry = {
        "job_id": str(job_id),
        "array_index": array_index,
        "submitted": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "executor": executor,
        "command": command,
        "log_dir": str(Path(log_dir).resolve()),
    }
    jobs.append(entry)
    atomic_write_json(path, {"jobs": jobs})
    return entry


def read_jobs(run_dir: str | Path) -> list[dict]:
    path = Path(run_dir) / JOBS_FILE
    if not path.exists():
        return []
    return list(json.loads(path.read_text()).get("jobs", []))


# ------------------------------------------------------------------------------- SLURM queries


def sacct_command(job_ids: list[str]) -> list[str]:
    # array elements are asked for by their array's id: a pending array is one "12_[0-2%2]" line
    bases = sorted({job_id.split("_")[0] for job_id in job_ids})
    return ["sacct", "-j", ",".join(bases), "-P", "-n", "-X", "--format=" + ",".join(SACCT_FIELDS)]


def parse_sacct(text: str) -> dict[str, dict[str, str]]:
    """`sacct -P -n -X` lines -> {JobID: {field: value}}; "CANCELLED by 0" keeps its detail."""
    rows: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        values = line.split("|")
        if len(values) != len(SACCT_FIELDS):
            continue
        row = dict(zip(SACCT_FIELDS, values, strict=True))
        row["Detail"] = row["State"]
        row["State"] = row["State"].split()[0] if row["State"] else ""
        rows[row["JobID"]] = row
    return rows


def lookup(rows: dict[str, dict[str, str]], job_id: str) -> dict[str, str] | None:
    """The row of one job or array element, including elements still inside a pending range."""
    if job_id in rows:
        return rows[job_id]
    base, _, index = job_id.partition("_")
    for key, row in rows.items():
        match = re.fullmatch(rf"{base}_\[([^\]]+)\]", key)
        if match and index and _in_range(int(index), match.group(1)):
            return row
    return None


def _in_range(index: int, spec: str) -> bool:
    """`0-2%2`, `1,3-4`: SLURM's array index lists."""
    for part in spec.split("%")[0].split(","):
        low, _, high = part.partition("-")
        if low.isdigit() and int(low) <= index <= int(high or low):
            return True
    return False


def parse_restarts(scontrol_text: str) -> int | None:
    match = re.search(r"\bRestarts=(\d+)", scontrol_text)
    return int(match.group(1)) if match else None


def parse_scontrol_field(scontrol_text: str, name: str) -> str | None:
    match = re.search(rf"\b{name}=(\S+)", scontrol_text)
    return match.group(1) if match else None


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    except FileNotFoundError:
        raise UserError(f"{command[0]} not found: this needs a SLURM login node") from None


def query_sacct(job_ids: list[str]) -> dict[str, dict[str, str]]:
    if not job_ids:
        return {}
    result = _run(sacct_command(job_ids))
    if result.returncode != 0:
        raise UserError(f"sacct failed: {result.stderr.strip()}")
    return parse_sacct(result.stdout)


def scontrol_show(job_id: str) -> str:
    """`scontrol show job` text, or "" once the controller has forgotten the job."""
    result = _run(["scontrol", "show", "job", job_id])
    return result.stdout if result.returncode == 0 else ""


# ------------------------------------------------------------------------------- targets


@dataclass
class Entry:
    """One job to report on: a single run, a sweep element or a pipeline step."""

    label: str
    run_dir: Path | None
    job: dict | None  # a jobs.json record (job_id, executor, log_dir, ...)
    recorded_state: str | None = None  # a local pipeline's own record of the step


def resolve_target(target: str) -> tuple[str, list[Entry]]:
    """A run, sweep or pipeline folder, or a job id -> (kind, entries)."""
    path = Path(target)
    if path.is_dir():
        if (path / PIPELINE_FILE).exists():
            steps = json.loads((path / PIPELINE_FILE).read_text())["steps"]
            entries = [_entry(s["name"], Path(s["run_dir"]), s.get("job_id")) for s in steps]
            for entry, step in zip(entries, steps, strict=True):
                entry.recorded_state = step.get("state")
            return "pipeline", entries
        if (path / SWEEP_FILE).exists():
            elements = json.loads((path / SWEEP_FILE).read_text())["elements"]
            return "sweep", [
                _entry(e["name"], Path(e["run_dir"]), e.get("job_id")) for e in elements
            ]
        if (path / JOBS_FILE).exists() or (path / "config.yaml").exists():
            return "run", [_entry(path.resolve().name, path, None)]
        raise UserError(
            f"{target}: not a run directory, sweep or pipeline folder "
            f"(none of config.yaml, {JOBS_FILE}, {SWEEP_FILE}, {PIPELINE_FILE} is there)"
        )
    if JOB_ID.match(target):
        return "job", [Entry(f"job {target}", None, job_by_id(target))]
    raise UserError(f"{target}: no such run directory, and not a job id (e.g. 1234 or 1234_0)")


def _entry(label: str, run_dir: Path, job_id: str | None) -> Entry:
    """The run's latest recorded job (matching ``job_id`` when the folder file names one)."""
    jobs = read_jobs(run_dir)
    chosen = next((j for j in reversed(jobs) if job_id and j["job_id"] == job_id), None)
    if chosen is None:
        chosen = jobs[-1] if jobs else None
    if chosen is None and job_id:
        chosen = {"job_id": job_id, "executor": "slurm", "log_dir": None}
    return Entry(label, run_dir, chosen)


def job_by_id(job_id: str) -> dict:
    """A job known only by its id: SLURM must know it; its logs are where scontrol says."""
    rows = query_sacct([job_id])
    if lookup(rows, job_id) is None:
        raise UserError(f"unknown job id {job_id}: sacct has no record of it")
    stdout = parse_scontrol_field(scontrol_show(job_id), "StdOut")
    log_dir = str(Path(stdout).parent) if stdout else None
    return {"job_id": job_id, "executor": "slurm", "log_dir": log_dir}


# ------------------------------------------------------------------------------- status


@dataclass
class JobStatus:
    label: str
    job_id: str | None
    executor: str | None
    state: str  # SLURM's (sacct), or the run's own for local jobs
    elapsed: str = ""
    node: str = ""
    exit_code: str = ""
    requeues: int | None = None
    run_state: str | None = None  # status.json
    last_step: int | None = None
    started: bool = True
    run_dir: str | None = None
    note: str = ""

    def line(self) -> str:
        parts = [f"{self.label:<12}", f"job {self.job_id or '-':<10}", f"{self.state:<11}"]
        if self.executor == "slurm":
            parts.append(f"elapsed {self.elapsed or '-'}")
            parts.append(f"node {self.node or '-'}")
            parts.append(f"exit {self.exit_code or '-'}")
        parts.append(f"requeues {self.requeues if self.requeues is not None else '-'}")
        parts.append(f"run {self.run_state or '-'}")
        if self.last_step is not None:
            parts.append(f"step {self.last_step}")
        if self.run_dir:
            parts.append(self.run_dir)
        text = "  ".join(parts)
        return f"{text}\n{' ' * 14}{self.note}" if self.note else text


def run_info(run_dir: Path | None) -> dict[str, Any]:
    """What the run itself says: status.json state, last logged step, evaluation scores."""
    info: dict[str, Any] = {"state": None, "step": None, "requeues": None}
    if run_dir is None:
        return info
    status_file = run_dir / "status.json"
    status = json.loads(status_file.read_text()) if status_file.exists() else {}
    info["state"] = status.get("state")
    info["step"] = status.get("global_step")
    if "requeues" in status:
        info["requeues"] = status["requeues"]
    elif status.get("starts"):
        info["requeues"] = status["starts"] - 1
    metrics = run_dir / "metrics.jsonl"
    if metrics.exists():
        lines = [line for line in metrics.read_text().splitlines() if line.strip()]
        if lines:
            info["step"] = json.loads(lines[-1]).get("step", info["step"])
    if info["state"] is None and (run_dir / "scores.json").exists():
        info["state"] = "COMPLETED (scores.json)"
    return info


def job_status(entry: Entry, rows: dict[str, dict[str, str]]) -> JobStatus:
    info = run_info(entry.run_dir)
    job = entry.job or {}
    executor = job.get("executor")
    status = JobStatus(
        label=entry.label,
        job_id=job.get("job_id"),
        executor=executor,
        state="NOT SUBMITTED" if not job else "UNKNOWN",
        requeues=info["requeues"],
        run_state=info["state"],
        last_step=info["step"],
        run_dir=str(entry.run_dir) if entry.run_dir else None,
    )
    if executor == "local" or (not job and entry.recorded_state):
        status.state = entry.recorded_state or info["state"] or "UNKNOWN"
        status.started = status.state != "NOT RUN"
        return status
    if not job:
        return status
    row = lookup(rows, job["job_id"])
    if row is None:
        status.note = "sacct has no record of this job (purged, or another cluster?)"
        return status
    status.state = row["State"]
    status.elapsed, status.node, status.exit_code = row["Elapsed"], row["NodeList"], row["ExitCode"]
    status.started = row.get("Start", "") not in ("", "Unknown", "None")
    if status.node in ("None assigned", "(null)"):
        status.node = ""
    restarts = parse_restarts(scontrol_show(job["job_id"])) if status.state != "PENDING" else 0
    if restarts is not None:
        status.requeues = restarts
    return status


def collect_status(entries: list[Entry]) -> list[JobStatus]:
    ids = [e.job["job_id"] for e in entries if e.job and e.job.get("executor") != "local"]
    rows = query_sacct(ids)
    return [job_status(entry, rows) for entry in entries]


def explain_chain(statuses: list[JobStatus]) -> str:
    """One verdict for a pipeline; later steps of a failed step get a note that they never ran."""
    for index, status in enumerate(statuses):
        state = status.state.split()[0]
        if state in FINAL_STATES and state != "COMPLETED":
            later = statuses[index + 1 :]
            for step in later:
                if not step.started or step.state in ("PENDING", "UNKNOWN", "NOT SUBMITTED"):
                    step.note = f"never ran: step {status.label} ended {state}"
            names = ", ".join(s.label for s in later) or "none"
            return (
                f"pipeline STOPPED: step {status.label} ended {state} "
                f"(exit {status.exit_code or '-'}); later steps not run: {names}"
            )
        if state != "COMPLETED":
            return f"pipeline IN PROGRESS: step {status.label} is {status.state}"
    return "pipeline COMPLETED: every step finished"


def status_report(target: str, as_json: bool = False) -> str:
    kind, entries = resolve_target(target)
    statuses = collect_status(entries)
    verdict = explain_chain(statuses) if kind == "pipeline" else ""
    if as_json:
        return json.dumps(
            {"kind": kind, "verdict": verdict, "jobs": [asdict(s) for s in statuses]}, indent=2
        )
    lines = [s.line() for s in statuses]
    if kind == "sweep":
        counts: dict[str, int] = {}
        for s in statuses:
            counts[s.state] = counts.get(s.state, 0) + 1
        lines.append("sweep: " + ", ".join(f"{n} {state}" for state, n in sorted(counts.items())))
    if verdict:
        lines.append(verdict)
    return "\n".join(lines)


# ------------------------------------------------------------------------------- logs


def log_path(job: dict, stderr: bool = False) -> Path | None:
    """submitit's log of task 0: `<id>_0_log.out` (`<array>_<index>_0_log.out` in an array)."""
    if not job or not job.get("log_dir"):
        return None
    return Path(job["log_dir"]) / f"{job['job_id']}_0_log.{'err' if stderr else 'out'}"


def tail(path: Path, lines: int) -> str:
    text = path.read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:]) if lines > 0 else "\n".join(text)


def logs_report(target: str, lines: int = 40, stderr: bool = False) -> str:
    _, entries = resolve_target(target)
    chunks = []
    for entry in entries:
        path = log_path(entry.job or {}, stderr)
        name = f"{entry.label} (job {(entry.job or {}).get('job_id', '-')})"
        if path is None:
            chunks.append(f"==> {name}: no job recorded, no log <==")
        elif not path.exists():
            chunks.append(f"==> {name}: {path} does not exist yet (not started?) <==")
        else:
            chunks.append(f"==> {name}: {path} <==\n{tail(path, lines)}")
    return "\n".join(chunks)


# ------------------------------------------------------------------------------- cancel


def cancel(target: str) -> str:
    """scancel every job of the target that has not finished; say what was cancelled."""
    _, entries = resolve_target(target)
    statuses = collect_status(entries)
    done, local, to_cancel = [], [], []
    for entry, status in zip(entries, statuses, strict=True):
        if not entry.job:
            continue
        if entry.job.get("executor") == "local":
            local.append(f"{entry.label} (local pid {entry.job['job_id']}: stop it with kill)")
        elif status.state in FINAL_STATES:
            done.append(f"{entry.label} (job {entry.job['job_id']}, {status.state})")
        else:
            to_cancel.append((entry, status))
    lines = []
    if to_cancel:
        ids = [entry.job["job_id"] for entry, _ in to_cancel]
        result = _run(["scancel", *ids])
        if result.returncode != 0:
            raise UserError(f"scancel {' '.join(ids)} failed: {result.stderr.strip()}")
        lines += [
            f"cancelled job {entry.job['job_id']} ({entry.label}, was {status.state})"
            for entry, status in to_cancel
        ]
    if done:
        lines.append("already finished, not cancelled: " + ", ".join(done))
    if local:
        lines.append("not SLURM jobs: " + ", ".join(local))
    if not to_cancel:
        lines.insert(0, f"nothing to cancel in {target}")
    return "\n".join(lines)
