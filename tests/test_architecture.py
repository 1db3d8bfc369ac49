"""Each registered hub model's shipped architecture (models/architectures/NAME.json) builds on
the meta device with the parameter count its model card publishes."""

from __future__ import annotations

import re

import pytest

from vqa_r1.errors import UserError
from vqa_r1.models.architecture import architecture_config, parameter_counts, shipped, source
from vqa_r1.models.registry import MODELS


def published(text: str) -> float:
    """'3.75B' -> 3.75e9; '0.9B (938M)': the more precise figure in brackets."""
    exact = re.search(r"\(([\d.]+)([MB])\)", text) or re.match(r"([\d.]+)([MB])", text)
    number, unit = exact.groups()
    return float(number) * (1e9 if unit == "B" else 1e6)


def test_every_hub_model_has_its_architecture_named_by_source():
    hub = sorted(name for name, spec in MODELS.items() if spec.hub_id)
    assert shipped() == hub
    for name in hub:
        assert source(name)["hub_id"] == MODELS[name].hub_id
        assert architecture_config(name).model_type in {
            "qwen2_5_vl": {"qwen2_5_vl"}, "internvl": {"internvl"}, "smolvlm": {"idefics3"},
            "qwen3_vl": {"qwen3_vl", "qwen3_vl_moe"},  # the 30B-A3B: the MoE classes
        }[MODELS[name].family]  # fmt: skip


@pytest.mark.parametrize("name", shipped())
def test_parameter_counts_on_meta_match_the_model_cards_within_one_percent(name):
    counts = parameter_counts(name)
    want = published(source(name)["published_parameters"])
    assert abs(counts.total - want) / want < 0.01, (counts.total, want)
    assert 0 < counts.vision < counts.total and counts.language == counts.total - counts.vision
    assert counts.embedding > 0


def test_exact_counts_of_the_qwen_checkpoints():
    """The exact totals the shipped configurations build (the model cards round them to 3.75B
    and 8.29B), pinned so that an edit of a configuration shows here; the 3B ties its output
    head to the embedding, the 7B does not."""
    three, seven = parameter_counts("qwen2.5-vl-3b"), parameter_counts("qwen2.5-vl-7b")
    assert (three.total, seven.total) == (3_754_622_976, 8_292_166_656)
    assert three.lm_head == 0 and seven.lm_head == seven.embedding


def test_an_unknown_or_tiny_model_is_one_clear_line():
    with pytest.raises(UserError, match="no shipped architecture for model 'tiny-qwen2.5-vl'"):
        parameter_counts("tiny-qwen2.5-vl")
