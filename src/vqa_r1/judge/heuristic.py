"""An offline, rule-based judge: the polarity of the reasoning's conclusion against the answer.

It exists so that the pipeline (and its statistics) runs with no API key, and as a floor that an
LLM judge must beat. It reads the reasoning's conclusion, decides whether it affirms the claim,
denies it, or declares it undecidable, and compares that with the True/False answer. It knows
nothing about images or spatial relations; its agreement with human labels is reported in
``alignment_judge/RESULTS.md`` next to the LLM judges'. Rules were written against the study's
TRAIN/VALIDATION o4-mini verdicts, never against the human-labelled TEST items.
"""

from __future__ import annotations

import re
from typing import Any

from vqa_r1.answers import normalize

# v2: the layout verdict of the synthetic scenes' reasoning (``_layout_stance``); v1's verdicts on
# the study's responses are unchanged (RESULTS.md)
HEURISTIC_ID = "heuristic_v2"

_UNDECIDED = re.compile(
    r"(cannot|can ?not|can't|could not|couldn't|unable to|not possible to|impossible to|"
    r"difficult to|hard to|no way to)\s+(be\s+)?(definitively\s+|accurately\s+|clearly\s+)?"
    r"(determine|determined|tell|confirm|confirmed|verify|verified|conclude|say|assess|judge)"
    r"|not enough information|insufficient information|\bunclear\b|\bambiguous\b"
    r"|(is|are|remains) (not )?(determinable|undeterminable|indeterminate)",
    re.IGNORECASE,
)
_VERDICT = re.compile(
    r"\b(statement|claim|caption|assertion|it)\b(?:[^.]{0,120}?\")?[^.\"]{0,120}?"
    r"\b(is|seems|appears|would be)\s+(to be\s+)?"
    r"(not\s+)?(entirely\s+|completely\s+|fully\s+)?"
    r"(true|accurate|correct|valid|supported|false|incorrect|inaccurate|wrong|untrue|misleading)\b",
    re.IGNORECASE,
)
_POSITIVE_VERDICT = {"true", "accurate", "correct", "valid", "supported"}
_MARKERS = re.compile(
    r"\b(therefore|thus|hence|so,|consequently|in conclusion|this (means|indicates|suggests|confirms)"
    r"|which (means|indicates|suggests|confirms)|indicating that|meaning that|we can conclude)\b",
    re.IGNORECASE,
)
_NEGATION = re.compile(
    r"\b(not|no|never|none|neither|nor|nothing|without|cannot|isn't|aren't|doesn't|don't|"
    r"wasn't|weren't|unlikely|rather than|instead of)\b|n't\b",
    re.IGNORECASE,
)
_ABSENT = re.compile(
    r"\b(no|not any|not a|without)\s+(visible\s+|clear\s+|other\s+)?(\w+)"
    r"|\b(\w+)\s+(is|are)\s+not\s+(visible|present|shown|seen|in the image)",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'])")
_STOP = frozenset(
    """
    the a an is are of to in on at by with and or as left right above below under over
    behind front near far away from touching into inside outside beside next top beneath
    part facing across against along past toward towards off out contains has within around
    through beyond between among side edge close surrounding attached connected enclosed
    detached parallel opposite alongside adjacent down up upon onto ahead consists person
    object
    """.split()
)


_ANTONYMS = {
    "left": "right",
    "right": "left",
    "above": "below",
    "below": "above",
    "under": "above",
    "over": "under",
    "beneath": "above",
    "behind": "front",
    "front": "behind",
    "inside": "outside",
    "outside": "inside",
    "far": "near",
    "near": "far",
    "top": "under",
}


def _relation_flip(claim: str, final: str) -> bool:
    """The conclusion names the opposite relation (right for left, ...) and not the claim's own."""
    claim_words = set(re.findall(r"[a-z]+", claim.lower()))
    final_words = set(re.findall(r"[a-z]+", final.lower()))
    for word, opposite in _ANTONYMS.items():
        if word in claim_words and opposite in final_words and word not in final_words:
            return True
    return False


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text.strip()) if s.strip()]


def claim_nouns(claim: str) -> set[str]:
    """Content words of the claim (its subject and object), singular-ish, for relevance checks."""
    words = re.findall(r"[a-z]+", claim.lower())
    return {w.rstrip("s") for w in words if w not in _STOP and len(w) > 2}


def conclusion(reasoning: str, claim: str = "") -> str:
    """The sentence that states the verdict: the last one with a conclusion marker or an explicit
    'the statement is ...', else the last one naming both objects of the claim, else the last."""
    sentences = _sentences(reasoning)
    if not sentences:
        return ""
    for sentence in reversed(sentences):
        if _VERDICT.search(sentence) or _MARKERS.search(sentence):
            return sentence
    nouns = claim_nouns(claim)
    if len(nouns) >= 2:
        for sentence in reversed(sentences):
            words = {w.rstrip("s") for w in re.findall(r"[a-z]+", sentence.lower())}
            if nouns <= words:
                return sentence
    return sentences[-1]


# the layout reasoning of the synthetic scenes (data/prompts.py, the tiny models): "left to right:
# red, blue. top to bottom: blue, red. right: blue. subject: red." -- the object at the end of the
# layout the claim asks about, then the claim's subject: the claim holds when they are the same
_LAYOUT = re.compile(
    r"\b(left|right|top|bottom):\s*([a-z]+)\.\s*subject:\s*([a-z]+)", re.IGNORECASE
)
_CLAIM_END = {"left of": "left", "right of": "right", "above": "top", "below": "bottom"}
_OPPOSITE_END = {"left": "right", "right": "left", "top": "bottom", "bottom": "top"}


def _layout_stance(reasoning: str, claim: str) -> bool | None:
    """The stance of a layout reasoning (``_LAYOUT``) on ``claim``; None when it is not one."""
    matches = list(_LAYOUT.finditer(reasoning))
    wanted = next((end for words, end in _CLAIM_END.items() if words in claim.lower()), None)
    if not matches or wanted is None:
        return None
    end, named, subject = (g.lower() for g in matches[-1].groups())
    if end == wanted:
        return named == subject
    if end == _OPPOSITE_END[wanted]:
        return named != subject
    return None


def stance(reasoning: str, claim: str = "") -> bool | None | str:
    """True (claim holds), False (it does not), None (undecided), or "empty"."""
    text = reasoning.strip()
    if not text:
        return "empty"
    layout = _layout_stance(text, claim)
    if layout is not None:
        return layout
    final = conclusion(text, claim)
    if _UNDECIDED.search(final):
        return None
    verdicts = list(_VERDICT.finditer(final)) or list(_VERDICT.finditer(text))
    if verdicts:
        match = verdicts[-1]
        positive = match.group(6).lower() in _POSITIVE_VERDICT
        return positive != bool(match.group(4))
    if _UNDECIDED.search(text) and not _MARKERS.search(final):
        return None
    # a claim object the reasoning says is absent cannot be in any relation
    nouns = claim_nouns(claim)
    for match in _ABSENT.finditer(text):
        word = (match.group(3) or match.group(4) or "").lower().rstrip("s")
        if word and word in nouns:
            return False
    if _relation_flip(claim, final):
        return False
    return not _NEGATION.search(final)


def judge(claim: str, reasoning: str, final_answer: str) -> dict[str, Any]:
    """A verdict in the taxonomy prompt's shape."""
    answer = normalize(final_answer)
    view = stance(reasoning, claim)
    if view == "empty":
        return {"aligns": False, "type": "missing_detail", "why": "There is no reasoning."}
    if answer not in ("true", "false"):
        return {"aligns": False, "type": "other", "why": "The final answer is not True or False."}
    nouns = claim_nouns(claim)
    mentioned = {w.rstrip("s") for w in re.findall(r"[a-z]+", reasoning.lower())}
    if nouns and not nouns & mentioned:
        return {
            "aligns": False,
            "type": "irrelevant",
            "why": "The reasoning never mentions the objects of the claim.",
        }
    if view is None:
        return {
            "aligns": False,
            "type": "contradiction",
            "why": "The reasoning says the claim cannot be decided but the answer asserts one.",
        }
    if view == (answer == "true"):
        return {
            "aligns": True,
            "type": None,
            "why": f"The reasoning's conclusion {'affirms' if view else 'denies'} the claim, "
            f"matching the answer {final_answer.strip()}.",
        }
    return {
        "aligns": False,
        "type": "contradiction",
        "why": f"The reasoning's conclusion {'affirms' if view else 'denies'} the claim but the "
        f"answer is {final_answer.strip()}.",
    }
