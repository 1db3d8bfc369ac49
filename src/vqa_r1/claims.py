"""One rule for every output folder, and one writer per folder.

The rule (every verb: sft, grpo, evaluate, merge, pretrain, prompt-tune, judge, data generate,
data bias, experiment, pipeline and sweep roots). A folder is

- new or empty: the command claims it (``MARKER`` records the verb and its resolved settings);
- a folder this suite claimed for the same verb with the same settings: the command resumes it,
  or, when it is complete, says so and does nothing (no extra step, ``final/`` untouched);
- anything else (files the suite did not write, a run of another verb, the same verb with other
  settings): the command refuses before it writes anything, in one line saying what is there and
  which flag to use (``--overwrite``, or a new ``--output-dir``/``--out``).

``--overwrite`` never deletes: the old folder is renamed to a dated sibling (``DIR.old-<time>``)
and the command says so. Folders made before the marker existed are recognised by the files their
verb writes (``LEGACY``), so an old run still resumes. Settings recorded under keys that have
since been renamed (``RENAMED``) are read under their new names, so such a run resumes too.

One writer (``FolderLock``): ``LOCK`` is created with ``O_EXCL`` before anything is written and
removed at exit; it holds the pid, host, SLURM job and start time, and its mtime is the heartbeat
(touched every ``HEARTBEAT_S``). A second writer is refused, naming the holder. A lock is stale, and
taken over with a note, when its process is dead (same host), when it belongs to an earlier run of
this same SLURM job (a requeue: a lower SLURM_RESTART_COUNT, or another node), or when its heartbeat is older than ``stale_after_s()`` (another
host: ``VQA_R1_LOCK_STALE_S``, default 600 s). In a job with several processes rank 0 alone takes
the lock and writes the marker; the other ranks only check the folder.

A base module: imports nothing of the project but other base modules (settings.py: what makes two
runs the same).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vqa_r1 import ranks
from vqa_r1.clock import now_iso
from vqa_r1.errors import UserError
from vqa_r1.io import atomic_write_json, current_umask
from vqa_r1.settings import differences

MARKER = ".vqa_r1-run.json"
LOCK = ".vqa_r1.lock"
HEARTBEAT_S = 60.0
STALE_AFTER_S = 600.0
NEW, RESUME, COMPLETE = "new", "resume", "complete"
# folders written before the marker existed: a file that only this verb writes
LEGACY = (
    ("experiment.json", "experiment"),
    ("pipeline.json", "pipeline"),
    ("sweep.json", "sweep"),
    ("bias_card.json", "data bias"),
    ("pretrain.json", "pretrain"),
    ("work/config.json", "pretrain"),
    ("final/prompt_tuning.json", "prompt-tune"),
)
_OURS = {MARKER, LOCK}
# keys renamed since runs recorded them (issue 18: one vocabulary, the run config's and TRL's
# names): a verb's old top-level key -> its name now (``section.key``: moved into a section).
# Folders, run configs and records written before the renames hold the old names; they are read
# with ``renamed_settings`` so that a run still resumes and a shipped record still loads.
_PROMPT_TUNE_RENAMED = {
    "model": "model.name",  # first: "model" was the name, now it is the section
    "model_path": "model.path",
    "device": "model.device",
    "learning_rate": "train.learning_rate",
    "warmup_steps": "train.warmup_steps",
    "max_steps": "train.max_steps",
    "batch_size": "train.per_device_train_batch_size",
    "save_steps": "train.save_steps",
    "logging_steps": "train.logging_steps",
    "seed": "train.seed",
    "num_threads": "train.num_threads",
    "eval_split": "eval.split",
    "eval_limit": "eval.limit",
    "eval_batch_size": "eval.batch_size",
    "max_new_tokens": "eval.max_new_tokens",
    "answer_rule": "eval.answer_rule",
}
RENAMED: dict[str, dict[str, str]] = {
    "pretrain": {"steps": "max_steps", "batch_size": "per_device_train_batch_size"},
    "prompt-tune": _PROMPT_TUNE_RENAMED,
    "prompt-tune --base": _PROMPT_TUNE_RENAMED,
}


def renamed_settings(verb: str, settings: Any) -> Any:
    """``settings`` recorded by ``verb`` with the keys renamed since (``RENAMED``) under their
    names now; settings already in the new names come back equal. Also reads a record flattened
    one level (``data.dataset`` as one key): the old keys are all top-level."""
    renames = RENAMED.get(verb)
    if not renames or not isinstance(settings, dict):
        return settings
    out = dict(settings)
    for old, new in renames.items():
        if old not in out or isinstance(out[old], dict):
            continue  # absent, or already the section of that name
        value = out.pop(old)
        *sections, key = new.split(".")
        node = out
        for section in sections:
            child = node.get(section)
            node[section] = dict(child) if isinstance(child, dict) else {}
            node = node[section]
        node[key] = value
    return out


class FolderRefused(UserError):
    """The folder is not this command's to write: nothing was written (``failures_recorded``
    leaves such a folder's status.json alone: it may be another run's)."""


def stale_after_s() -> float:
    try:
        return float(os.environ.get("VQA_R1_LOCK_STALE_S", STALE_AFTER_S))
    except ValueError:
        return STALE_AFTER_S


# ------------------------------------------------------------------------------- the marker


def read_marker(root: Path) -> dict | None:
    """What the suite recorded in ``root`` (``verb``, ``settings``, ``completed``), or what a
    folder from before the marker shows (``settings`` None); None for a folder not ours."""
    try:
        marker = json.loads((root / MARKER).read_text())
        if isinstance(marker, dict) and marker.get("verb"):
            return marker
    except (OSError, ValueError):
        pass
    config = root / "config.yaml"
    if config.is_file():
        verb = _yaml_verb(config)
        if verb:
            return {"verb": verb, "settings": None}
    for name, verb in LEGACY:
        if (root / name).exists():
            return {"verb": verb, "settings": None}
    if (root / "hf" / "dataset_dict.json").exists() and (root / "dataset_info.json").exists():
        return {"verb": "data generate", "settings": None}
    try:  # prompt-tune --base writes its scores alone, with the prompt-tuning mode in them
        if "mode" in json.loads((root / "scores.json").read_text()):
            return {"verb": "prompt-tune --base", "settings": None}
    except (OSError, ValueError, TypeError):
        pass
    return None


def _yaml_verb(path: Path) -> str | None:
    try:
        import yaml

        data = yaml.safe_load(path.read_text())
    except Exception:  # a damaged or foreign config.yaml: not a run of ours
        return None
    if not isinstance(data, dict):
        return None
    if isinstance(data.get("verb"), str):
        return data["verb"]
    if "mode" in data and "num_virtual_tokens" in data:
        return "prompt-tune"
    return None


def is_complete(root: Path, marker: dict | None = None) -> bool:
    """The one rule for "complete", wherever a folder is judged (a verb's own start, a launch's
    skip of a step, a re-launch during building): marked complete by its verb (``mark_complete``)
    with every output it named then still there (a deleted ``scores.json`` is an evaluation to
    redo), or, for a run from before the marker recorded it, a status.json saying COMPLETED."""
    root = Path(root)
    marker = marker if marker is not None else read_marker(root)
    if marker and marker.get("completed"):
        return all((root / name).exists() for name in marker.get("outputs") or [])
    try:
        return json.loads((root / "status.json").read_text()).get("state") == "COMPLETED"
    except (OSError, ValueError, AttributeError):
        return False


def completed_at(root: Path) -> str | None:
    """When the folder's verb finished (``YYYY-MM-DDTHH:MM:SS``, local time), by the rule of
    ``is_complete``: the marker's ``completed`` (its outputs there), or for a run from before the
    marker recorded it the time status.json said COMPLETED; None while neither says so."""
    marker = read_marker(root) or {}
    if marker.get("completed"):
        return str(marker["completed"]) if is_complete(Path(root), marker) else None
    try:
        status = json.loads((root / "status.json").read_text())
    except (OSError, ValueError):
        return None
    if isinstance(status, dict) and status.get("state") == "COMPLETED" and status.get("updated"):
        return str(status["updated"])
    return None


def mark_complete(root: str | Path, outputs: tuple[str, ...] = (), **fields: Any) -> None:
    """Record in the marker that the verb finished (rank 0 only): a re-run does nothing while
    ``outputs`` (paths under ``root``: what the verb's result is) are all there."""
    root = Path(root)
    if not ranks.is_main():
        return
    marker = _own_marker(root) or {}
    marker.update(fields, outputs=list(outputs), completed=now_iso())
    atomic_write_json(root / MARKER, marker)


def _own_marker(root: Path) -> dict | None:
    try:
        marker = json.loads((root / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def _normal(settings: Any) -> Any:
    """Settings as they read back from JSON (tuples become lists)."""
    return json.loads(json.dumps(settings, default=str))


def _ours(name: str) -> bool:
    """The marker, the lock, or one of them being written (``atomic_write_*``'s temporary
    ``.NAME.XXXXXXXX`` beside it)."""
    return name in _OURS or any(name.startswith(f".{ours}.") for ours in _OURS)


def _entries(root: Path) -> list[str]:
    try:
        return sorted(p.name for p in root.iterdir())
    except FileNotFoundError:
        return []


def _a(verb: str) -> str:
    return f"an {verb}" if verb[:1] in "aeiou" else f"a {verb}"


def _fix(flag: str, root: Path) -> str:
    return f"use --overwrite (moves it to {root.name}.old-<time>) or a new {flag}"


def check(
    root: str | Path, verb: str, settings: Any, flag: str = "--output-dir", lock: bool = True
) -> str:
    """Read-only: NEW, RESUME or COMPLETE for ``verb`` with ``settings`` in ``root``; anything
    else is a ``FolderRefused`` naming what is there and the flag to use. A live writer (its lock)
    is refused too."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise FolderRefused(f"{flag} {root}: is a file, not a folder; {_fix(flag, root)}")
    entries = [e for e in _entries(root) if not _ours(e)]
    marker = read_marker(root)
    if marker is None:
        # the lock first: a writer that has just locked the folder may be writing its marker
        # (seen under load: another command found the marker's temporary file, not the marker)
        holder = lock_holder(root) if lock else None
        if holder is not None:
            raise FolderRefused(
                f"{root} is being written by {describe(holder)}; {_fix(flag, root)}"
            )
        if entries:
            shown = ", ".join(entries[:3]) + (
                f" and {len(entries) - 3} more" if len(entries) > 3 else ""
            )
            raise FolderRefused(
                f"{root} holds files this suite did not write ({shown}); {_fix(flag, root)}"
            )
        return NEW
    if marker["verb"] != verb:
        raise FolderRefused(
            f"{root} holds {_a(marker['verb'])} run, not {verb}; {_fix(flag, root)}"
        )
    old = renamed_settings(verb, marker.get("settings"))
    if old is None and verb in ("data generate", "data bias"):  # rewriting it would replace all
        raise FolderRefused(
            f"{root} holds a dataset made before vqa-r1 recorded its settings; {_fix(flag, root)}"
        )
    if old is not None and settings is not None:
        differ = differences(old, settings)
        if differ:
            more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
            raise FolderRefused(
                f"{root} holds {_a(verb)} run with other settings ({'; '.join(differ[:3])}{more}); "
                f"{_fix(flag, root)}"
            )
    return COMPLETE if is_complete(root, marker) else RESUME


def make_way(
    root: str | Path,
    verb: str,
    settings: Any,
    overwrite: bool = False,
    flag: str = "--output-dir",
    dry_run: bool = False,
) -> str:
    """``check``; with ``overwrite``, a folder that would be refused (or a complete one) is moved
    aside to a dated sibling (said on stderr) and the state is NEW. ``dry_run``: only says what
    would be moved."""
    root = Path(root)
    if not overwrite:
        # a rank other than 0 of a multi-process run (torchrun): rank 0 may hold the lock already
        return check(root, verb, settings, flag, lock=ranks.is_main())
    if not root.exists() or (root.is_dir() and not _entries(root)):
        return NEW
    holder = lock_holder(root) if root.is_dir() else None
    if holder is not None:
        raise FolderRefused(f"{root} is being written by {describe(holder)}: not moving it aside")
    if dry_run:
        print(f"note: --overwrite: {root} would be moved aside", file=sys.stderr)
        return NEW
    moved = move_aside(root)
    print(f"note: --overwrite: moved {root} to {moved} (nothing deleted)", file=sys.stderr)
    return NEW


def move_aside(root: str | Path) -> Path:
    """Rename ``root`` to ``ROOT.old-<YYYYmmdd-HHMM>`` (``-2``, ``-3``... when taken)."""
    root = Path(root)
    base = f"{root.name}.old-{time.strftime('%Y%m%d-%H%M')}"
    target = root.with_name(base)
    n = 2
    while target.exists():
        target, n = root.with_name(f"{base}-{n}"), n + 1
    root.rename(target)
    return target


def claim(
    root: str | Path,
    verb: str,
    settings: Any,
    command: str | None = None,
    flag: str = "--output-dir",
) -> str:
    """Write the marker of a NEW folder (rank 0); the state ``check`` found."""
    root = Path(root)
    state = check(root, verb, settings, flag)
    if state == NEW and ranks.is_main():
        root.mkdir(parents=True, exist_ok=True)
        marker = {"verb": verb, "settings": _normal(settings), "created": now_iso()}
        if command:
            marker["command"] = command
        atomic_write_json(root / MARKER, marker)
    elif state == RESUME and ranks.is_main() and _own_marker(root) is None:
        # a folder from before the marker: record it now, settings as this command has them
        marker = {"verb": verb, "settings": _normal(settings), "created": now_iso()}
        atomic_write_json(root / MARKER, marker)
    return state


@contextlib.contextmanager
def writing(
    root: str | Path, verb: str, settings: Any, flag: str = "--output-dir"
) -> Iterator[str]:
    """The choke point of a verb that writes ``root``: checked, locked (rank 0), claimed; yields
    NEW, RESUME or COMPLETE (then the caller does nothing). Other ranks check only."""
    root = Path(root)
    if not ranks.is_main():
        # rank 0 holds the lock and may have claimed the folder already
        yield check(root, verb, settings, flag, lock=False)
        return
    check(root, verb, settings, flag)  # refuse a foreign folder before creating anything in it
    with FolderLock(root, verb):
        yield claim(root, verb, settings, flag=flag)


def wait_for_claim(root: str | Path, timeout_s: float = 600.0) -> None:
    """On a rank other than 0, before it creates anything in ``root``: wait until the folder is
    ours (rank 0's ``writing`` has claimed it). A ``checkpoints/`` another rank made first is a
    file not ours to a rank 0 that checks the folder later, and it refuses the folder (seen with
    two processes under load). Returns at once on rank 0 and in a folder already ours."""
    if ranks.is_main():
        return
    root = Path(root)
    what = f"its claim of {root} ({MARKER})"
    ranks.wait_for(lambda: read_marker(root) is not None, what, timeout_s=timeout_s, poll_s=0.2)


# --------------------------------------------------------------------------------- the lock


def _identity() -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "slurm_job": os.environ.get("SLURM_JOB_ID") or None,
        "restarts": _int(os.environ.get("SLURM_RESTART_COUNT")),
        "started": now_iso(),
    }


def _int(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


def lock_holder(root: str | Path) -> dict | None:
    """The live holder of ``root``'s lock, or None (no lock, or a stale one)."""
    path = Path(root) / LOCK
    holder = _read_lock(path)
    if holder is None or _mine(holder):
        return None
    return None if _stale(holder, path) else holder


def left_lock(root: str | Path) -> tuple[dict, str] | None:
    """A lock whose writer is gone without releasing it (killed: SIGKILL, out of memory) and
    why it is stale; None when there is no lock or its holder may still be writing. `status`
    reads it for work that records no state of its own while it runs (an evaluation)."""
    path = Path(root) / LOCK
    holder = _read_lock(path)
    if holder is None or _mine(holder):
        return None
    why = _stale(holder, path)
    return (holder, why) if why else None


def _mine(holder: dict) -> bool:
    return holder.get("pid") == os.getpid() and holder.get("host") == socket.gethostname()


def describe(holder: dict) -> str:
    job = f", SLURM job {holder['slurm_job']}" if holder.get("slurm_job") else ""
    return (
        f"pid {holder.get('pid')}@{holder.get('host')} since {holder.get('started')}{job} "
        f"(lock {LOCK})"
    )


def _read_lock(path: Path) -> dict | None:
    try:
        text = path.read_text()
        mtime = path.stat().st_mtime
    except FileNotFoundError:
        return None
    except OSError:
        return {"pid": None, "host": None, "heartbeat": time.time()}
    try:
        holder = json.loads(text)
    except ValueError:  # being written this instant (O_EXCL, then the content)
        holder = {}
    if not isinstance(holder, dict):
        holder = {}
    holder["heartbeat"] = mtime
    return holder


def _stale(holder: dict, path: Path) -> str | None:
    """Why a lock is stale, or None while its holder may be writing."""
    me = _identity()
    pid, host = holder.get("pid"), holder.get("host")
    same_job = holder.get("slurm_job") and holder["slurm_job"] == me["slurm_job"]
    if same_job and pid != me["pid"] and holder.get("restarts", 0) < me["restarts"]:
        return "an earlier run of this SLURM job (requeued)"
    if same_job and pid != me["pid"] and host != me["host"]:
        return "an earlier run of this SLURM job on another node (requeued)"
    if host == me["host"] and isinstance(pid, int):
        if pid == me["pid"]:
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return f"pid {pid} is no longer running on {host}"
        except PermissionError:
            pass
        return None
    age = time.time() - holder.get("heartbeat", time.time())
    if not holder.get("pid") and age > 5:  # empty or unreadable: a writer killed mid-creation
        return "the lock file is empty"
    if age > stale_after_s():
        return f"no heartbeat for {age:.0f} s (more than {stale_after_s():.0f} s)"
    return None


_HELD: dict[Path, int] = {}
_HELD_LOCK = threading.Lock()


class FolderLock:
    """``root``'s lock for this process (re-entrant within it); ``__exit__`` releases it."""

    def __init__(self, root: str | Path, verb: str = "", lock_name: str = LOCK) -> None:
        self.root = Path(root).resolve()
        self.path = self.root / lock_name
        self.verb = verb
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> FolderLock:
        with _HELD_LOCK:
            if _HELD.get(self.path):
                _HELD[self.path] += 1
                return self
        self.root.mkdir(parents=True, exist_ok=True)
        for _ in range(5):
            if self._create():
                break
            holder = _read_lock(self.path)
            if holder is None:
                continue  # released between our attempt and the read
            why = _stale(holder, self.path)
            if why is None:
                if _mine(holder):
                    break  # this process took it (another object): re-entrant
                raise FolderRefused(
                    f"{self.root} is being written by {describe(holder)}; wait for it to end, "
                    "or use another --output-dir"
                )
            aside = self.path.with_name(f"{LOCK}.stale-{os.getpid()}")
            try:
                self.path.rename(aside)  # one taker wins the rename
            except FileNotFoundError:
                continue
            aside.unlink(missing_ok=True)
            print(
                f"note: {self.root}: took over a stale lock of pid {holder.get('pid')}@"
                f"{holder.get('host')} ({why})",
                file=sys.stderr,
            )
        else:
            raise FolderRefused(f"{self.root}: could not take the lock {self.path}")
        with _HELD_LOCK:
            _HELD[self.path] = 1
        self._thread = threading.Thread(target=self._beat, name="vqa-r1-lock", daemon=True)
        self._thread.start()
        return self

    def _create(self) -> bool:
        """Written whole beside the lock, then linked to its name (``link`` fails when the name
        is taken, as ``O_EXCL`` does): no reader ever sees a lock without its holder."""
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.root)
        try:
            os.fchmod(fd, 0o666 & ~current_umask())
            with os.fdopen(fd, "w") as fh:
                json.dump({**_identity(), "verb": self.verb}, fh)
            try:
                os.link(tmp, self.path)
            except FileExistsError:
                return False
            except OSError:  # a filesystem without hard links: create, then fill
                return self._create_in_place()
            return True
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def _create_in_place(self) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as fh:
            json.dump({**_identity(), "verb": self.verb}, fh)
        return True

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            with contextlib.suppress(OSError):
                os.utime(self.path)

    def __exit__(self, *exc: object) -> None:
        with _HELD_LOCK:
            _HELD[self.path] -= 1
            if _HELD[self.path] > 0:
                return
            del _HELD[self.path]
        self._stop.set()
        holder = _read_lock(self.path)
        if (
            holder
            and holder.get("pid") == os.getpid()
            and holder.get("host") == socket.gethostname()
        ):
            with contextlib.suppress(OSError):
                self.path.unlink()


# ------------------------------------------------------------------------- one output file


def _file_marker(path: Path) -> Path:
    return path.with_name(f".{path.name}{MARKER}")


@contextlib.contextmanager
def writing_file(
    path: str | Path, verb: str, settings: Any, overwrite: bool = False, flag: str = "--out"
) -> Iterator[str]:
    """The rule for a verb whose output is one file (judge run's checks): a file this suite did
    not write there, or wrote for other settings, is refused (``overwrite``: moved aside); one it
    wrote with these settings and marked complete is COMPLETE. The marker and the lock are hidden
    siblings (``.NAME.vqa_r1-run.json``, ``.NAME.vqa_r1.lock``). ``mark_file_complete`` after."""
    path = Path(path)
    marker_path = _file_marker(path)
    with FolderLock(path.parent, verb, lock_name=f".{path.name}{LOCK}"):
        try:
            state = check_file(path, verb, settings, flag)
        except FolderRefused:
            if not overwrite:
                raise
            state = RESUME
        if overwrite and path.exists():
            moved = move_aside(path)
            print(f"note: --overwrite: moved {path} to {moved} (nothing deleted)", file=sys.stderr)
            marker_path.unlink(missing_ok=True)
            state = NEW
        if state == NEW:
            marker = {"verb": verb, "settings": _normal(settings), "created": now_iso()}
            atomic_write_json(marker_path, marker)
        yield state


def check_file(path: str | Path, verb: str, settings: Any, flag: str = "--out") -> str:
    """Read-only ``writing_file``: NEW, RESUME or COMPLETE, or ``FolderRefused``."""
    path = Path(path)
    if not path.exists():
        return NEW
    marker = _own_marker_file(_file_marker(path))
    fix = f"use --overwrite (moves it to {path.name}.old-<time>) or a new {flag}"
    if marker is None or marker.get("verb") != verb:
        raise FolderRefused(f"{path} exists and was not written by {verb}; {fix}")
    differ = differences(marker.get("settings"), settings)
    if differ:
        raise FolderRefused(
            f"{path} was written by {verb} with other settings ({'; '.join(differ[:3])}); {fix}"
        )
    return COMPLETE if marker.get("completed") else RESUME


def mark_file_complete(path: str | Path) -> None:
    marker_path = _file_marker(Path(path))
    marker = _own_marker_file(marker_path) or {}
    marker["completed"] = now_iso()
    atomic_write_json(marker_path, marker)


def _own_marker_file(path: Path) -> dict | None:
    try:
        marker = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


# ----------------------------------------------------------------------- temporary leftovers


def remove_temporaries(target: str | Path) -> list[Path]:
    """Remove ``.NAME.tmp-*`` folders beside ``target`` that ``io.atomic_dir`` left when a run
    of the same command was killed (call it holding the target's lock)."""
    target = Path(target)
    removed = []
    with contextlib.suppress(FileNotFoundError):
        for path in target.parent.glob(f".{target.name}.tmp-*"):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    for path in removed:
        print(f"note: removed {path}, left by an interrupted run", file=sys.stderr)
    return removed


def inside(path: str | Path, folder: str | Path) -> bool:
    """Whether ``path`` is ``folder`` or lies under it (symlinks resolved)."""
    path, folder = Path(path).resolve(), Path(folder).resolve()
    return path == folder or folder in path.parents


__all__ = [
    "COMPLETE",
    "LOCK",
    "MARKER",
    "NEW",
    "RESUME",
    "FolderLock",
    "FolderRefused",
    "check",
    "check_file",
    "claim",
    "inside",
    "lock_holder",
    "make_way",
    "completed_at",
    "mark_complete",
    "mark_file_complete",
    "move_aside",
    "remove_temporaries",
    "renamed_settings",
    "writing",
    "writing_file",
]
