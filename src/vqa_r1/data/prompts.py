"""From dataset rows to model inputs: the question, the reasoning instruction and the targets.

The problem and solution strings follow the published study ("Is the following statement true:
{caption}" and "<answer> True </answer>") so that rewards and scores are comparable with it.
"""

from __future__ import annotations

REASONING_INSTRUCTION = (
    "First think about the question in <think> </think> tags, "
    "then give the final answer, True or False, in <answer> </answer> tags."
)


def problem_text(caption: str) -> str:
    return f"Is the following statement true: {caption.strip()}"


def solution_text(label: int | bool) -> str:
    return f"<answer> {'True' if int(label) == 1 else 'False'} </answer>"


def user_message(question: str, instruction: str = REASONING_INSTRUCTION) -> list[dict]:
    """A conversational user turn: the image first, then the question and the instruction."""
    text = f"{question} {instruction}".strip()
    return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]


def grounded_rationale(row: dict) -> str:
    """A short reasoning derived from the scene's boxes, for SFT warm-starts on synthetic data.

    It states the relation that actually holds between the two named objects, so the answer follows
    from the reasoning: a model trained on it learns aligned reasoning, which the judge can check.
    """
    from vqa_r1.data.synthetic import RELATIONS

    relation = row["relation"]
    actual = relation if int(row["label"]) == 1 else RELATIONS[relation][0]
    return f"The {row['subj']} is {actual} the {row['obj']}."


def scene_rationale(row: dict) -> str:
    """Describe the scene first (objects in left-to-right and top-to-bottom order), claim-independent.

    Why: deciding a True/False claim in one token asks a tiny model to bind words to image regions
    and compare positions at once. Describing the scene from the image alone and then checking the
    claim against that description splits the problem into two learnable steps; it is also what
    "reason before answering" means.
    """
    objects = list(zip(row["objects"], row["boxes"], strict=True))
    by_x = [name for name, box in sorted(objects, key=lambda o: (o[1][0] + o[1][2]) / 2)]
    by_y = [name for name, box in sorted(objects, key=lambda o: (o[1][1] + o[1][3]) / 2)]
    return f"left to right: {', '.join(by_x)}. top to bottom: {', '.join(by_y)}."


def facts_rationale(row: dict) -> str:
    """The claim's subject and object with their grid cells, in the claim's order.

    The format the pretrained tiny models learned on their own tasks (data/curriculum.py): read the
    two named objects out of the image, then compare facts that stand at fixed places.
    """
    from PIL import Image

    from vqa_r1.data.curriculum import fact, grid_cell

    with Image.open(row["image_path"]) as image:
        size = image.size[0]
    boxes = dict(zip(row["objects"], row["boxes"], strict=True))
    return "; ".join(fact(name, grid_cell(boxes[name], size)) for name in (row["subj"], row["obj"]))


RATIONALES = {"claim": grounded_rationale, "scene": scene_rationale, "facts": facts_rationale}


def sft_completion(row: dict, with_reasoning: bool = True, style: str = "claim") -> str:
    answer = solution_text(row["label"])
    if not with_reasoning:
        return answer
    return f"<think> {RATIONALES[style](row)} </think> {answer}"
