"""Commands as a user types them, run in the test's own process (tests/README.md: one subprocess
test per verb proves the entry points; the others share this interpreter's imports)."""

from __future__ import annotations

import contextlib
import io
import os
from dataclasses import dataclass


@dataclass
class Ran:
    """What a command printed and returned, as subprocess.run reports it."""

    returncode: int
    stdout: str
    stderr: str


def run_in_process(main, argv: list[str], env: dict[str, str] | None = None) -> Ran:
    """A command as a user types it (``main`` of `vqa-r1` or `slurm/launch.py`, with ``argv``),
    run in this process: the same parsing, checks, output and exit status, without paying for a
    new interpreter and its imports (torch, transformers, TRL: seconds each). ``env`` replaces
    the environment for the call. The suite keeps one subprocess test per verb for the entry
    points themselves (tests/test_cli.py and each module's first test)."""
    out, err = io.StringIO(), io.StringIO()
    saved = dict(os.environ)
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as exit_:  # argparse's errors and --help
                code = (
                    exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
                )
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return Ran(int(code or 0), out.getvalue(), err.getvalue())
