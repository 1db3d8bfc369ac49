"""Multiple-choice rewards over sets of option letters: ``choice`` (exact) and ``choice_partial``.

Both read the letters with ``vqa_r1.answers.extract_choices`` from the completion and from the
``solution`` column ("A, C", "<answer>(A) and (C)</answer>" and "A,C" all read {A, C}). A row whose
solution names no letter, or a completion that names none, scores 0.0.
"""

from __future__ import annotations

from typing import Any

from vqa_r1.answers import extract_choices
from vqa_r1.rewards.text import completion_text, score_rows


def choice_score(text: str, solution: Any) -> float:
    """1.0 when the completion names exactly the solution's letters (a non-empty set), else 0.0."""
    gold = extract_choices(solution) if solution is not None else frozenset()
    return 1.0 if gold and extract_choices(text) == gold else 0.0


def choice_partial_score(text: str, solution: Any) -> float:
    """0.0 when any chosen letter is wrong, else the share of the correct letters chosen."""
    gold = extract_choices(solution) if solution is not None else frozenset()
    chosen = extract_choices(text)
    if not gold or not chosen or not chosen <= gold:
        return 0.0
    return len(chosen) / len(gold)


def choice_reward(completions: Any, solution: Any = None, **_: Any) -> list[float]:
    """Exact multiple-choice accuracy; range {0, 1}.

    1.0 iff the set of letters the completion answers equals the solution's (order, separators
    and brackets do not matter), else 0.0.
    """

    def score(completion: Any, reference: Any) -> float:
        return choice_score(completion_text(completion), reference)

    return score_rows(completions, [solution], score, 0.0, 1.0)


def choice_partial_reward(completions: Any, solution: Any = None, **_: Any) -> list[float]:
    """Partial credit for multi-answer questions; range [0, 1].

    Rule: with P the chosen letters and G the correct ones, 0.0 if P has a letter outside G (or P
    is empty), else |P| / |G|. Exam-style scoring, chosen over Jaccard |P∩G|/|P∪G| because Jaccard
    pays for hedging (answering every option of a five-option item with two correct letters earns
    0.4), which a policy-gradient learner would find and exploit; here a guess can only lose credit,
    while naming a correct subset earns its share. Equals ``choice`` on single-answer items.
    """

    def score(completion: Any, reference: Any) -> float:
        return choice_partial_score(completion_text(completion), reference)

    return score_rows(completions, [solution], score, 0.0, 1.0)
