"""The shape of every launch: a graph of steps, each one job with its own run directory.

One job is a one-step graph, a sweep a graph of independent steps (one SLURM job array), a
pipeline a line, an experiment (and the demo) a declared graph. launch/build.py makes the graphs
(the one builder), launch/executor.py runs them (the one executor); this module holds only the
values they pass between them, frozen once built, and the order of the steps.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vqa_r1.launch.request import JobRequest


@dataclass(frozen=True)
class Step:
    """One job of a launch: its request, its run directory and the steps it waits for."""

    name: str  # unique in the graph; how other steps name it in ``after``
    run_dir: Path
    request: JobRequest
    after: tuple[str, ...] = ()
    after_any: bool = False  # run when the dependencies ended, whether they succeeded or not
    info: dict[str, Any] = field(default_factory=dict)  # recorded in launch.json as is
    checked_at: float = field(default_factory=time.time)  # about when the folder was read

    @property
    def done(self) -> bool:
        """Complete from an earlier launch with these settings (claims.is_complete, read when the
        request was built): skipped, never redone."""
        from vqa_r1 import claims

        return self.request.folder_state == claims.COMPLETE


@dataclass(frozen=True)
class Prep:
    """Something the launch makes before its first job, after its folder is claimed (a dataset
    the jobs read, ``experiment.json``); skipped by a dry run, which shows ``description``."""

    description: str
    make: Callable[[], Any]


@dataclass(frozen=True)
class Graph:
    """The steps of one launch and its folder (where ``launch.json`` lives)."""

    kind: str  # run | sweep | pipeline | experiment | demo
    root: Path
    steps: tuple[Step, ...]
    lines: tuple[str, ...] = ()  # what a dry run and a launch print first
    header: dict[str, Any] = field(default_factory=dict)  # kind-specific, kept in launch.json
    # independent steps sharing one job script: one SLURM job array, run by this request
    array: JobRequest | None = None
    parallelism: int | None = None  # array elements running at once (None: all)
    # the launch folder's own claim (claims.py), made by the executor once every step is checked;
    # None when the folder is the one step's run directory, which its job claims itself
    claim: tuple[str, Any] | None = None
    overwrite: bool = False
    prepare: tuple[Prep, ...] = ()  # made in this order, after the claim, before any job
    flag: str = "--output-dir"  # the flag that names the folder (pretrain: --out), in messages

    @property
    def single(self) -> bool:
        return self.kind == "run"


def order(steps: tuple[Step, ...] | list[Step]) -> list[Step]:
    """The steps with every dependency first; unknown names and cycles are building bugs."""
    by_name = {s.name: s for s in steps}
    if len(by_name) != len(steps):
        raise ValueError("step names must be unique")
    placed: list[Step] = []
    seen: set[str] = set()

    def visit(step: Step, path: tuple[str, ...]) -> None:
        if step.name in seen:
            return
        if step.name in path:
            raise ValueError(f"dependency cycle: {' -> '.join((*path, step.name))}")
        for dep in step.after:
            if dep not in by_name:
                raise ValueError(f"step {step.name} waits for unknown step {dep}")
            visit(by_name[dep], (*path, step.name))
        seen.add(step.name)
        placed.append(step)

    for step in steps:
        visit(step, ())
    return placed
