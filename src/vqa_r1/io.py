"""Atomic writes (nothing a job leaves behind is half-written, even after SIGKILL) and JSONL reads.

The temporary files and folders of ``tempfile`` are private (0600, 0700) whatever the umask; the
writers here give them the mode a plain ``open``/``mkdir`` would, so colleagues of the group read a
run on a shared filesystem exactly as far as the user's umask allows.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from vqa_r1.errors import UserError


def current_umask() -> int:
    """The process umask, read without changing it where Linux shows it (``os.umask`` can only
    be read by setting it, which races with other threads creating files)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def follow_umask(root: str | Path) -> None:
    """Give ``root`` and everything under it the modes ``open``/``mkdir`` would give under the
    current umask (executable bits kept). For folders that libraries wrote privately: safetensors
    writes through a 0600 temporary file, so every adapter and model it saves is unreadable by
    the group whatever the umask."""
    mask = current_umask()
    root = Path(root)
    for path in [root, *root.rglob("*")] if root.is_dir() else [root]:
        if path.is_symlink():
            continue
        mode = path.stat().st_mode
        full = 0o777 if path.is_dir() or mode & 0o111 else 0o666
        if stat.S_IMODE(mode) != full & ~mask:
            path.chmod(full & ~mask)


@contextlib.contextmanager
def atomic_dir(
    target: str | Path, *, keep_existing: bool = False, carry: tuple[str, ...] = ()
) -> Iterator[Path]:
    """Yield a temporary sibling folder; on success it replaces ``target`` in one rename.

    ``keep_existing``: for a cache whose content is the same whoever builds it (the tiny models).
    When another process or rank finished the same target first, its folder stays and ours is
    dropped: replacing it would pull files from under a process already loading from it.
    ``carry``: names of entries of the old ``target`` moved into the new one (a claimed output
    folder's marker and lock, claims.py), not dropped with it.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        yield tmp
        follow_umask(tmp)  # the folder was made 0700, and libraries may write files 0600
        if keep_existing and target.exists():
            shutil.rmtree(tmp)
        elif target.exists():
            for name in carry:
                if (target / name).exists() and not (tmp / name).exists():
                    (target / name).rename(tmp / name)
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            target.rename(old)
            tmp.rename(target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            try:
                tmp.rename(target)
            except OSError:  # another builder renamed its folder in since the check above
                if not (keep_existing and target.exists()):
                    raise
                shutil.rmtree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def atomic_write_bytes(path: str | Path, data: bytes, *, fsync: bool = True) -> None:
    """Write a temporary sibling and ``os.replace`` it into place: a killed process leaves the old
    file or the new one, never a torn one. ``fsync=False`` skips flushing to disk (~5 ms per file):
    for caches that re-create what an OS crash may tear (the rename alone survives any kill)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | Path, text: str, *, fsync: bool = True) -> None:
    """``atomic_write_bytes`` of the UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"), fsync=fsync)


def atomic_write_json(path: str | Path, obj: object) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def read_jsonl(
    path: str | Path, *, missing_ok: bool = False, partial_last_line: bool = False
) -> list[dict]:
    """The JSON objects of a JSONL file, one per line; blank lines are skipped.

    Errors are UserErrors naming the file and line. ``missing_ok``: a missing file reads as no
    records. ``partial_last_line``: a last line that does not parse and has no newline after it is
    dropped, since a running job may be mid-way through appending it (a bad line anywhere else is
    still an error).
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        if missing_ok:
            return []
        raise UserError(f"{path}: file not found") from None
    lines = data.split(b"\n")  # not str.splitlines: JSON text may hold a raw U+2028
    records: list[dict] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as err:  # JSONDecodeError, or UnicodeDecodeError of a torn character
            if partial_last_line and number == len(lines):
                break
            raise UserError(f"{path}:{number}: not valid JSON ({err})") from None
        if not isinstance(record, dict):
            raise UserError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
        records.append(record)
    return records
