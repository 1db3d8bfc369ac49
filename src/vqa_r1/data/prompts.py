"""From dataset rows to model inputs: the question, the reasoning instruction and the targets.

The problem and solution strings follow the published study ("Is the following statement true:
{caption}" and "<answer> True </answer>") so that rewards and scores are comparable with it.
"""

from __future__ import annotations

from vqa_r1.data.curriculum import claim_reasoning, layout_of
from vqa_r1.data.synthetic import RELATIONS

REASONING_INSTRUCTION = (
    "First think about the question in <think> </think> tags, "
    "then give the final answer, True or False, in <answer> </answer> tags."
)

# counting rows (answer_type "number") when data.instruction is not set: the family's instruction
# asks for True or False
COUNT_INSTRUCTION = (
    "First think about the question in <think> </think> tags, "
    "then give the final answer, a number, in <answer> </answer> tags."
)


def problem_text(caption: str) -> str:
    return f"Is the following statement true: {caption.strip()}"


def solution_text(label: int | bool) -> str:
    return f"<answer> {'True' if int(label) == 1 else 'False'} </answer>"


def grounded_rationale(row: dict) -> str:
    """A short reasoning derived from the scene's boxes, for SFT warm-starts on synthetic data.

    It states the relation that actually holds between the two named objects, so the answer follows
    from the reasoning: a model trained on it learns aligned reasoning, which the judge can check.
    """

    relation = row["relation"]
    actual = relation if int(row["label"]) == 1 else RELATIONS[relation][0]
    return f"The {row['subj']} is {actual} the {row['obj']}."


def scene_rationale(row: dict) -> str:
    """Describe the scene first (colours left to right, then top to bottom), then the claim's end.

    Why: deciding a True/False claim in one token asks a tiny model to bind words to image regions
    and compare positions at once. Describing the layout from the image alone and then checking the
    claim against that description splits the problem into two learnable steps; it is also the
    format the pretrained tiny models learned (data/curriculum.py), and what "reason before
    answering" means.
    """

    layout = layout_of(zip(row["objects"], row["boxes"], strict=True))
    return claim_reasoning(row["relation"], row["subj"], *layout)


RATIONALES = {"claim": grounded_rationale, "scene": scene_rationale}


def sft_completion(row: dict, with_reasoning: bool = True, style: str = "claim") -> str:
    answer = solution_text(row["label"])
    if not with_reasoning:
        return answer
    return f"<think> {RATIONALES[style](row)} </think> {answer}"
