"""``--set`` items of a launch of several steps: to every step, or (``NAME:KEY=VALUE``) to one.

Pipelines route them to their steps, experiments to their verbs.
"""

from __future__ import annotations

from vqa_r1.errors import UserError


def route_overrides(
    items: list[str] | tuple[str, ...], targets: list[str], known: tuple[str, ...], kind: str
) -> dict[str, list[str]]:
    """``--set KEY=V`` goes to every target, ``--set NAME:KEY=V`` to the target NAME alone
    (``kind`` names what the targets are, in errors). A colon inside the value
    (``--set model.path=/a:b``) comes after the ``=`` and is no prefix."""
    routed: dict[str, list[str]] = {t: [] for t in targets}
    for item in items or []:
        head, sep, rest = item.partition(":")
        if not sep or "=" in head:
            for target in targets:
                routed[target].append(item)
            continue
        name = head.replace("-", "_")
        if name not in known:
            raise UserError(f"--set {item!r}: {head!r} is not a {kind} ({', '.join(known)})")
        if name not in routed:
            raise UserError(f"--set {item!r}: {kind} {head} is not in --{kind}s")
        routed[name].append(rest)
    return routed
