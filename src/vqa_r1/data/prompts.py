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


# a question over several images may say where each goes: "Is the red circle in <image> left of
# the blue square in <image>?" puts each image at its placeholder, in order; a question without
# one gets its images in front, in the row's order (TRL's convention for an `images` column)
IMAGE_PLACEHOLDER = "<image>"


def placeholder_count(question: str) -> int:
    return question.count(IMAGE_PLACEHOLDER)


def content_parts(text: str, images: int) -> list[dict]:
    """The user turn's parts: ``images`` image parts at the text's placeholders (or in front when
    it has none) and the text between them. Why parts and not the family's token: each family's
    chat template writes its own image block (Qwen's vision tokens, InternVL's <img> run,
    SmolVLM's tiles), and the processor expands one block per image, in order."""
    marks = placeholder_count(text)
    if marks and marks != images:
        raise ValueError(
            f"{marks} {IMAGE_PLACEHOLDER} placeholder(s) in the question and {images} image(s)"
        )
    if not marks:
        parts = [{"type": "image"} for _ in range(images)]
        return [*parts, {"type": "text", "text": text.strip()}]
    parts = []
    for i, piece in enumerate(text.split(IMAGE_PLACEHOLDER)):
        if i:
            parts.append({"type": "image"})
        if piece.strip():
            parts.append({"type": "text", "text": piece.strip()})
    return parts


def numbered_placeholders(question: str) -> str:
    """The question as a reader without the images sees it (the judge): each placeholder named
    by its image's place, ``[image 1]``, ``[image 2]``."""
    pieces = question.split(IMAGE_PLACEHOLDER)
    out = pieces[0]
    for i, piece in enumerate(pieces[1:], 1):
        out += f"[image {i}]{piece}"
    return out


THINK_DEMAND = "First think about the question in <think> </think> tags, then give"


def for_thinking_model(instruction: str) -> str:
    """The instruction for a model whose chat template opens the think block itself (Qwen3-VL
    Thinking): it is asked to close it and answer, not to open a second one."""
    return instruction.replace(
        THINK_DEMAND, "Think about the question, close your thinking with </think>, then give"
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
