"""`status`, `logs` and `cancel` for every kind of launch: a run, sweep, pipeline or experiment.

Every launch keeps one state file in its folder, `launch.json` (launch/executor.py: its kind, and per
step the run directory, dependencies, job id and state), and the launcher records every job it
submits in the step's run directory (`jobs.json`: job id, array index, submit time, executor,
command, log folder), so a folder is enough to find its jobs again days later. A folder of several
steps shows one line per step and one verdict, so a stopped graph says which step failed and which
never ran because of it.

submitit does what it offers for a job another process submitted: `submitit.SlurmJob` and
`submitit.LocalJob`, built from the log folder and job id, name the logs and scancel, and
submitit's sacct reader (the one behind `SlurmJob.state`) parses sacct's lines, pending array
ranges included. Kept here because submitit has no equivalent: one sacct query for all jobs of the
target with the fields a status line shows (`SlurmJob.state` asks only for JobID, State and
NodeList); the requeue count from `scontrol` while the controller knows the job, else from the
run's status.json; the log folder of a job given only by its id (`scontrol`'s StdOut); and the
state of local jobs, which is the run's own record (a `LocalJob` can only poll or stop a process
of the Python that started it, so `cancel` leaves them alone).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import submitit

from vqa_r1 import claims
from vqa_r1.clock import duration, now_iso
from vqa_r1.errors import UserError
from vqa_r1.io import atomic_write_json, read_jsonl
from vqa_r1.report.experiment import EXPERIMENT_FILE, read_experiment  # steps as a pipeline's
from vqa_r1.run_dir import identity_alive, process_alive

JOBS_FILE = "jobs.json"
STATE_FILE = "launch.json"
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
    "INTERRUPTED",  # status.json's own, for local runs: Ctrl-C or SIGTERM
    "DEAD",  # status.json said RUNNING, but its process is gone
    "UNHEALTHY",  # status.json's own: stopped by a run-health alarm (train/health.py)
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
    process: dict | None = None,
) -> dict:
    """Append a submitted job to `<run_dir>/jobs.json` (a run may be submitted more than once);
    ``process``: a local job's process (``run_dir.process_identity``), which `status` and
    `cancel` check before they trust a recorded state or signal a pid."""

    path = Path(run_dir) / JOBS_FILE
    jobs = read_jobs(run_dir)
    entry = {
        "job_id": str(job_id),
        "array_index": array_index,
        "submitted": now_iso(),
        "executor": executor,
        "command": command,
        "log_dir": str(Path(log_dir).resolve()),
        **({"process": process} if process else {}),
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
    """`sacct -P -n -X` lines -> {job id: {field: value}}, one key per element of an array.

    submitit's sacct reader splits a pending range such as `12_[1-3%2]` into its elements. State is
    the first word of sacct's ("CANCELLED by 0"), which Detail keeps whole.
    """
    table = submitit.SlurmJob.watcher.read_info("|".join(SACCT_FIELDS) + "\n" + text)
    return {
        job_id: {**row, "Detail": row["State"], "State": row["State"].split(" ")[0]}
        for job_id, row in table.items()
        if len(row) == len(SACCT_FIELDS)  # not a line of sacct's
    }


def lookup(rows: dict[str, dict[str, str]], job_id: str) -> dict[str, str] | None:
    """The row of one job or array element (`parse_sacct` keys each element of a range)."""
    return rows.get(job_id)


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
    except OSError as err:  # found but not runnable: not a folder of the user's to fix
        raise UserError(
            f"{command[0]} cannot be run ({err.strerror or err}): check the SLURM client on "
            "your PATH (`which " + command[0] + "`) or run this on a SLURM login node"
        ) from None
    except subprocess.TimeoutExpired:
        raise UserError(
            f"{command[0]} gave no answer in 60 s: is the SLURM controller up?"
        ) from None


def query_sacct(job_ids: list[str]) -> dict[str, dict[str, str]]:
    """One sacct call for all the jobs. Not `SlurmJob.state`: that query (submitit's own, with a
    class-wide cache) asks for JobID, State and NodeList only, not Elapsed, ExitCode or Start."""
    if not job_ids:
        return {}
    result = _run(sacct_command(job_ids))
    if result.returncode != 0:
        said = " ".join(result.stderr.split()) or f"exit status {result.returncode}"
        raise UserError(
            f"sacct failed: {said} (the accounting database answers `status` on SLURM; ask your "
            "admins whether slurmdbd is up)"
        )
    return parse_sacct(result.stdout)


def scontrol_show(job_id: str) -> str:
    """`scontrol show job` text, or "" once the controller has forgotten the job.

    submitit has no equivalent: it reads neither the restart count nor where a job's logs are.
    """
    result = _run(["scontrol", "show", "job", job_id])
    return result.stdout if result.returncode == 0 else ""


# ------------------------------------------------------------------------------- targets


@dataclass
class Entry:
    """One job to report on: a single run, a sweep element or a pipeline step."""

    label: str
    run_dir: Path | None
    job: dict | None  # a jobs.json record (job_id, executor, log_dir, ...)
    recorded_state: str | None = None  # a local launch's own record of the step
    after: list[str] = field(default_factory=list)  # the steps it waits for
    driver: dict | None = None  # the process of a local or in-process launch (launch.json)


def resolve_target(target: str) -> tuple[str, list[Entry]]:
    """A launch folder or run directory, or a job id -> (kind, entries)."""
    path = Path(target)
    if path.is_dir():
        steps = launch_steps(path)
        if steps is not None:
            kind, rows = steps
            if kind == "run":
                return "run", [_entry(path.resolve().name, path, None)]
            entries = [_entry(s["name"], Path(s["run_dir"]), s.get("job_id")) for s in rows]
            driver = launch_driver(path)
            for entry, step in zip(entries, rows, strict=True):
                entry.recorded_state = step.get("state")
                entry.driver = driver
                entry.after = [d for d in step.get("after") or [] if isinstance(d, str)]
            return kind, entries
        ours = (JOBS_FILE, "config.yaml", "status.json", claims.MARKER)  # any run of a verb
        if any((path / name).exists() for name in ours):
            return "run", [_entry(path.resolve().name, path, None)]
        raise UserError(
            f"{target}: not a launch folder or run directory (none of {STATE_FILE}, "
            f"{EXPERIMENT_FILE}, {', '.join(ours)} is there)"
        )
    if JOB_ID.match(target):
        return "job", [Entry(f"job {target}", None, job_by_id(target))]
    raise UserError(f"{target}: no such run directory, and not a job id (e.g. 1234 or 1234_0)")


def launch_steps(folder: Path) -> tuple[str, list[dict]] | None:
    """The kind and steps a launch recorded in ``folder`` (``launch.json``; an experiment folder
    from before it, its ``experiment.json``); None when neither is there."""
    path = folder / STATE_FILE
    if path.exists():
        try:
            data = json.loads(path.read_text())
            steps = data["steps"]
            kind = str(data["kind"])
        except (json.JSONDecodeError, KeyError, TypeError):
            raise UserError(f"{path}: damaged (not the state file a launch writes)") from None
        return kind, [s for s in steps if isinstance(s, dict) and "name" in s]
    if (folder / EXPERIMENT_FILE).exists():  # a damaged one is an error naming it
        return "experiment", read_experiment(folder).get("steps", [])
    return None


def launch_driver(folder: Path) -> dict | None:
    """The process that ran a local or in-process launch's steps (launch.json ``driver``)."""
    try:
        driver = json.loads((folder / STATE_FILE).read_text()).get("driver")
    except (OSError, ValueError, AttributeError):
        return None
    return driver if isinstance(driver, dict) else None


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
    """A job known only by its id: SLURM must know it; its logs are where scontrol says (a
    submitit job object needs that folder, and submitit cannot find it from the id)."""
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
    requeues: int | None = None  # SLURM's requeues (scontrol), or those the task recorded
    starts: int | None = None  # how often the run started: requeues and re-launches alike
    run_state: str | None = None  # status.json
    last_step: int | None = None
    started: bool = True
    run_dir: str | None = None
    note: str = ""
    health: list[dict] = field(default_factory=list)  # status.json's run-health alarms
    # status.json's ``progress`` (train/step_line.py): step, max_steps, seconds_per_step, left_s,
    # more_jobs, reward, reward_std, health, updated
    progress: dict = field(default_factory=dict)

    def line(self) -> str:
        parts = [f"{self.label:<12}", f"job {self.job_id or '-':<10}", f"{self.state:<11}"]
        if self.executor == "slurm":
            parts.append(f"elapsed {self.elapsed or '-'}")
            parts.append(f"node {self.node or '-'}")
            parts.append(f"exit {self.exit_code or '-'}")
        parts.append(f"requeues {self.requeues if self.requeues is not None else '-'}")
        if self.starts is not None and self.starts > 1:
            parts.append(f"starts {self.starts}")
        parts.append(f"run {self.run_state or '-'}")
        parts += self.progress_parts()
        if self.run_dir:
            parts.append(self.run_dir)
        text = "  ".join(parts)
        if self.note:
            text += f"\n{' ' * 14}{self.note}"
        for alarm in self.health:
            text += (
                f"\n{' ' * 14}health {alarm.get('code')} at step {alarm.get('step')}: "
                f"{alarm.get('evidence')}; fix: {alarm.get('fix')}"
            )
        return text

    def progress_parts(self) -> list[str]:
        """``step N/M``; while the run runs, also the time left at its measured pace (and the
        requeued jobs it still needs), its last reward and its health."""
        p = self.progress
        if self.last_step is None and not p:
            return []
        step = self.last_step if self.last_step is not None else p.get("step")
        parts = [f"step {step}" + (f"/{p['max_steps']}" if p.get("max_steps") else "")]
        if self.run_state != "RUNNING" or not p:
            return parts
        left = f"left {duration(p.get('left_s'))}"
        if p.get("more_jobs"):
            left += f" (+{p['more_jobs']} requeued job{'s' if p['more_jobs'] > 1 else ''})"
        parts.append(left)
        if p.get("reward") is not None:
            parts.append(f"reward {p['reward']:.3g}")
        parts.append(f"health {p.get('health') or 'ok'}")
        return parts


def run_info(run_dir: Path | None) -> dict[str, Any]:
    """What the run itself says: status.json state, last logged step, evaluation scores."""
    info: dict[str, Any] = {
        "state": None,
        "step": None,
        "requeues": None,
        "starts": None,
        "reason": None,
        "health": [],
        "progress": {},
    }
    if run_dir is None:
        return info
    status_file = run_dir / "status.json"
    status = json.loads(status_file.read_text()) if status_file.exists() else {}
    info["state"] = status.get("state")
    info["health"] = [a for a in status.get("health") or [] if isinstance(a, dict)]
    if status.get("reason"):
        info["reason"] = status["reason"] + (f"; log: {status['log']}" if status.get("log") else "")
    if info["state"] == "RUNNING" and status.get("pid"):
        if process_alive(int(status["pid"]), status.get("host"), status.get("started")) is False:
            # killed with no chance to write (SIGKILL, the OOM killer): it runs no more
            info["state"] = "DEAD"
            info["reason"] = (
                f"process {status['pid']} on {status['host']} is gone but status.json says "
                "RUNNING: killed (SIGKILL, out of memory?); the same command resumes"
            )
    info["step"] = status.get("global_step")
    if isinstance(status.get("progress"), dict):
        info["progress"] = status["progress"]
    # a requeue is what a task recorded when SLURM requeued it; a start, any start: a manual
    # re-launch of the same command is not a requeue (issue 30)
    info["requeues"] = status.get("requeues", 0 if status.get("starts") else None)
    info["starts"] = status.get("starts")
    records = read_jsonl(run_dir / "metrics.jsonl", missing_ok=True, partial_last_line=True)
    if records:  # a running job may be writing its last line
        info["step"] = records[-1].get("step", info["step"])
    if info["state"] is None and (run_dir / "scores.json").exists():
        info["state"] = "COMPLETED (scores.json)"
    elif info["state"] is None:  # work that writes no status.json while it runs: its lock
        left = claims.left_lock(run_dir)
        if left is not None:
            info["state"] = "DEAD"
            info["reason"] = (
                f"{claims.describe(left[0])} was writing here and is gone ({left[1]}) without "
                "finishing: killed (SIGKILL, out of memory?); the same command goes on from what "
                "it saved"
            )
        elif claims.lock_holder(run_dir) is not None:
            info["state"] = "RUNNING"
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
        starts=info["starts"],
        run_state=info["state"],
        last_step=info["step"],
        run_dir=str(entry.run_dir) if entry.run_dir else None,
        note=info["reason"] or "",
        health=info["health"],
        progress=info["progress"],
    )
    if executor == "local" or (not job and entry.recorded_state):
        return local_status(status, entry, info)
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
    if status.run_state == "UNHEALTHY" and status.state in ("FAILED", "COMPLETED"):
        status.state = "UNHEALTHY"  # the job failed on purpose: its run's health alarm stopped it
    restarts = parse_restarts(scontrol_show(job["job_id"])) if status.state != "PENDING" else 0
    if restarts is not None:
        status.requeues = restarts
    if status.run_state == "RUNNING" and status.state in FINAL_STATES - {"PREEMPTED"}:
        # SLURM ended it (time limit, OOM, node failure, scancel) before the run could say so
        status.run_state = "DEAD"
        status.note = status.note or (
            f"the job ended {status.state} while status.json said RUNNING; the same command "
            "resumes from the latest complete checkpoint"
        )
    return status


RUN_ENDS = {"COMPLETED": "COMPLETED", "COMPLETED (scores.json)": "COMPLETED", "FAILED": "FAILED",
            "INTERRUPTED": "INTERRUPTED", "UNHEALTHY": "UNHEALTHY", "DEAD": "DEAD",
            "MAX_REQUEUES_REACHED": "FAILED"}  # fmt: skip


def local_status(status: JobStatus, entry: Entry, info: dict[str, Any]) -> JobStatus:
    """A step of a local or in-process launch: what was recorded, checked against its process
    (the local job's, else the launch's own). A step recorded RUNNING whose process is gone
    shows how its run ended, or DEAD with what to do; never RUNNING for good."""
    job = entry.job or {}
    status.state = entry.recorded_state or info["state"] or "UNKNOWN"
    process = job.get("process") if job.get("executor") == "local" else entry.driver
    alive = identity_alive(process)
    if status.state in ("RUNNING", "SUBMITTED", "UNKNOWN") and alive is not None:
        if alive:
            status.state = "RUNNING"
        elif info["state"] in RUN_ENDS:
            status.state = RUN_ENDS[info["state"]]  # it ended after its launch stopped watching
        else:
            status.state = "DEAD"
            what = f"local job {job['job_id']}" if job.get("executor") == "local" else "the launch"
            status.note = status.note or (
                f"{what} (pid {process['pid']} on {process.get('host')}) is gone and the run "
                "recorded no end: killed (SIGKILL, out of memory?); the same command resumes"
            )
    elif status.state == "RUNNING" and info["state"] in ("FAILED", "INTERRUPTED", "DEAD",
                                                        "UNHEALTHY"):  # fmt: skip
        status.state = info["state"]  # the chain's runner was killed with its step
    status.started = status.state not in ("NOT RUN", "UNKNOWN")
    return status


def collect_status(entries: list[Entry]) -> list[JobStatus]:
    ids = [e.job["job_id"] for e in entries if e.job and e.job.get("executor") != "local"]
    rows = query_sacct(ids)
    return [job_status(entry, rows) for entry in entries]


def explain(kind: str, entries: list[Entry], statuses: list[JobStatus]) -> str:
    """One verdict for a launch of several steps. A step that ended badly stops the steps that
    need it (directly or through others): they get a note that they never ran."""
    ended = {s.label: s.state.split()[0] for s in statuses}
    needs = {e.label: e.after for e in entries}
    bad = [k for k, v in ended.items() if v in FINAL_STATES and v != "COMPLETED"]
    # a step cancelled because what it needs failed (kill_on_invalid_dep) is not a cause
    failed = [k for k in bad if k not in dependents(needs, set(bad))]
    done = sum(v in ("COMPLETED", "DONE") for v in ended.values())
    if failed:
        first = next(s for s in statuses if s.label == failed[0])
        stopped = dependents(needs, set(failed))
        for status in statuses:
            never = not status.started or status.state in ("PENDING", "UNKNOWN", "NOT SUBMITTED")
            if status.label in stopped and never:
                cause = next(f for f in failed if status.label in dependents(needs, {f}))
                status.note = f"never ran: step {cause} ended {ended[cause]}"
        later = [s.label for s in statuses if s.label in stopped]
        more = f"; also ended badly: {', '.join(failed[1:])}" if failed[1:] else ""
        return (
            f"{kind} STOPPED: step {first.label} ended {ended[first.label]} (exit "
            f"{first.exit_code or '-'}){more}; later steps not run: {', '.join(later) or 'none'}"
            f"; {done} of {len(ended)} steps completed"
        )
    if done == len(ended):
        return f"{kind} COMPLETED: {done} of {len(ended)} steps completed"
    running = [s for s in statuses if s.state.split()[0] not in ("COMPLETED", "DONE")]
    driver = entries[0].driver if entries else None
    if identity_alive(driver) is False:  # its launch was killed: nothing starts the next step
        active = [s.label for s in statuses if s.state == "RUNNING"]
        left = [s.label for s in running if s.state != "RUNNING"]
        wait = f"step {', '.join(active)} still runs; when it ends, " if active else ""
        return (
            f"{kind} STOPPED: its launch (pid {driver['pid']} on {driver.get('host')}) is gone "
            f"(killed?); {done} of {len(ended)} steps completed; not run: "
            f"{', '.join(left) or 'none'}; {wait}run the same command to go on"
        )
    return (
        f"{kind} IN PROGRESS: {done} of {len(ended)} steps completed; "
        f"step {running[0].label} is {running[0].state}"
    )


def dependents(needs: dict[str, list[str]], roots: set[str]) -> set[str]:
    """Every step that waits, directly or not, for one of ``roots``."""
    found: set[str] = set()
    grew = True
    while grew:
        grew = False
        for name, deps in needs.items():
            if name not in found and any(d in roots or d in found for d in deps):
                found.add(name)
                grew = True
    return found


def status_report(target: str, as_json: bool = False) -> str:
    kind, entries = resolve_target(target)
    statuses = collect_status(entries)
    verdict = explain(kind, entries, statuses) if kind not in ("run", "job") else ""
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


def submitit_job(job: dict) -> submitit.Job:
    """submitit's handle on a recorded job (a folder and an id are all it needs)."""
    kind = submitit.LocalJob if job.get("executor") == "local" else submitit.SlurmJob
    return kind(folder=job.get("log_dir") or ".", job_id=str(job["job_id"]))


def log_path(job: dict, stderr: bool = False) -> Path | None:
    """The log submitit writes for task 0 of a recorded job; None without a log folder."""
    if not job or not job.get("log_dir"):
        return None
    paths = submitit_job(job).paths
    return paths.stderr if stderr else paths.stdout


def tail(path: Path, lines: int) -> str:
    # not Job.stdout(): it decodes strictly, and a job killed mid-write can end its log mid-character
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


# states of a job that may still write to its log
STILL_WRITING = {"RUNNING", "PENDING", "REQUEUED", "SUBMITTED", "CONFIGURING", "COMPLETING",
                 "SUSPENDED", "RESIZING"}  # fmt: skip


def follow_logs(
    target: str, lines: int = 40, stderr: bool = False, poll_s: float = 2.0, write=print
) -> None:
    """`logs --follow`: each job's tail, then what it writes as it writes it (whole lines), a
    later step's log as soon as it starts, until no job of the target runs (and no launch that
    starts the next step is alive); Ctrl-C stops following, not the jobs."""
    offsets: dict[Path, int] = {}
    pending: dict[Path, str] = {}
    while True:
        _, entries = resolve_target(target)
        statuses = collect_status(entries)
        going = any(s.state in STILL_WRITING for s in statuses) or any(
            identity_alive(e.driver) for e in entries
        )
        for entry in entries:
            path = log_path(entry.job or {}, stderr)
            if path is None or not path.exists():
                continue
            if path not in offsets:  # its tail first (lines=0: all of it), as `logs` shows it
                name = f"{entry.label} (job {(entry.job or {}).get('job_id', '-')})"
                data = path.read_bytes()  # one read: what it writes next is followed below
                offsets[path] = len(data)
                shown = data.decode(errors="replace").splitlines()
                shown = shown[-lines:] if lines > 0 else shown
                write("\n".join([f"==> {name}: {path} <==", *shown]))
                continue
            with path.open("rb") as fh:
                fh.seek(offsets[path])
                chunk = fh.read()
            offsets[path] += len(chunk)
            text = pending.pop(path, "") + chunk.decode(errors="replace")
            *whole, rest = text.split("\n")
            if rest:
                pending[path] = rest
            for line in whole:
                write(line)
        if not going:
            for line in pending.values():
                write(line)
            return
        time.sleep(poll_s)


# ------------------------------------------------------------------------------- cancel


def cancel(target: str) -> str:
    """Stop every job of the target that has not finished; say what was done. A SLURM job is
    scancelled. A local job whose process is still the one recorded gets Ctrl-C (SIGINT to its
    task): it checkpoints at its next step boundary and stops, and its launch stops with it; a
    finished one is left alone (its pid may belong to another process by now)."""
    from vqa_r1.launch.job_script import interrupt_local

    _, entries = resolve_target(target)
    statuses = collect_status(entries)
    lines, done, unknown, failed = [], [], [], []
    for entry, status in zip(entries, statuses, strict=True):
        job = entry.job or {}
        local = job.get("executor") == "local"
        if not job and not (entry.driver and status.state == "RUNNING"):
            continue
        if status.state in FINAL_STATES or status.state in ("NOT RUN", "DONE EARLIER"):
            what = f"local job {job['job_id']}" if local else f"job {job.get('job_id', '-')}"
            if status.state != "NOT RUN":
                done.append(f"{entry.label} ({what}, {status.state})")
            continue
        if local or not job:  # a local job, or a step the launch runs in its own process
            process = job.get("process") if local else entry.driver
            if identity_alive(process) is not True:
                unknown.append(f"{entry.label} (pid {job.get('job_id') or '-'})")
                continue
            pid = int(process["pid"])
            sent = interrupt_local(pid) if local else _interrupt(pid)
            what = f"local job {job['job_id']}" if local else f"the launch (pid {pid})"
            if sent:
                lines.append(
                    f"sent Ctrl-C to {what} ({entry.label}, was {status.state}): it checkpoints "
                    "at its next step boundary and stops; the same command resumes"
                )
            continue
        try:
            submitit_job(job).cancel(check=True)
        except (OSError, subprocess.CalledProcessError) as err:
            failed.append(f"scancel {job['job_id']} ({entry.label}) failed: {err}")
            continue
        lines.append(f"cancelled job {job['job_id']} ({entry.label}, was {status.state})")
    if not lines and not failed:
        lines.append(f"nothing to cancel in {target}")
    if done:
        lines.append("already finished, not cancelled: " + ", ".join(done))
    if unknown:
        lines.append(
            "not stopped: this host cannot tell whether the recorded process is still that "
            "job (another host, or recorded by an older version): " + ", ".join(unknown)
        )
    if failed:
        raise UserError("\n".join(lines + failed))
    return "\n".join(lines)


def _interrupt(pid: int) -> bool:
    try:
        os.kill(pid, signal.SIGINT)
    except ProcessLookupError:
        return False
    return True
