"""Test-only GRPO rewards, named in configs as ``rewards_for_tests:<function>``.

A SLURM job cannot see a reward monkeypatched into the submitting process, so the tests put this
folder on PYTHONPATH (the job inherits it) and name the rewards through the plug-in form of
``train.reward_funcs`` (see vqa_r1/rewards/__init__.py).
"""

from __future__ import annotations

import time

from vqa_r1.rewards import completion_text

# A random-init model earns no accuracy reward, so GRPO would have zero gradients and a
# comparison of weights could not fail; the share of "e" varies between samples, so the sampling
# RNG and every update matter.
STEP_PAD_S = 0.5


def letter_e(completions, **_):
    texts = [completion_text(c) for c in completions]
    return [t.count("e") / max(1, len(t)) for t in texts]


def letter_e_slow(completions, **kwargs):
    """``letter_e`` plus a sleep: steps get longer without using CPU, so a one-minute job needs a
    predictable number of requeues while sharing the machine's two CPUs with other work."""
    time.sleep(STEP_PAD_S)
    return letter_e(completions, **kwargs)
