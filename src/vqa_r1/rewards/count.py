"""The counting reward: is the count in the final answer the solution's (``count``).

The count is read by ``vqa_r1.answers`` with the ``number`` rule (the last number, in digits or
words, of the final answer: "<answer> 3 </answer>", "3 objects", "three"), or with R1-V's own
rule when ``answer_rule`` is ``r1v_count`` (only a first ``<answer>N</answer>`` block of digits
counts, as their evaluation reads it). A solution is a count in any form ``number_label`` reads
(4, "4", "<answer> 4 </answer>"). Nothing raises: a row without a solution, an empty or garbage
completion, or a solution that holds no number scores 0.0.
"""

from __future__ import annotations

from typing import Any

from vqa_r1.answers import NUMBER_RULES, extract_answer, label_of
from vqa_r1.rewards.text import completion_text, score_rows


def count_score(text: str, solution: Any, rule: str = "number") -> float:
    """1.0 when the completion's count equals the solution's (a count was read from both)."""
    rule = rule if rule in NUMBER_RULES else "number"
    if solution is None:
        return 0.0
    gold = label_of(solution, rule)
    return 1.0 if gold and extract_answer(text, rule) == gold else 0.0


def count_reward(
    completions: Any, solution: Any = None, answer_rule: str = "number", **_: Any
) -> list[float]:
    """Counting accuracy; range {0, 1}.

    1.0 iff the count read from the completion (rule ``number``; ``r1v_count`` when
    ``answer_rule`` names it, any other rule means ``number``) equals the solution's, else 0.0.
    """

    def score(completion: Any, reference: Any) -> float:
        return count_score(completion_text(completion), reference, str(answer_rule))

    return score_rows(completions, [solution], score, 0.0, 1.0)
