import pytest

from vqa_r1.errors import UserError
from vqa_r1.recipes import load_config
from vqa_r1.typed_config import parse_overrides


def test_study_grpo_recipe_for_3b():
    """`--recipe study` on the 3B: the published study's GRPO (the GPU defaults differ only in
    their group of 8 and batch of 4 prompts: tests/test_scaling.py)."""
    c = load_config("grpo", "qwen2.5-vl-3b", recipe="study")
    assert c.recipe == "study"
    assert c.train.learning_rate == 1e-5 and c.train.num_generations == 4
    assert c.train.per_device_train_batch_size == 4 and c.train.beta == 0.04
    assert c.train.gradient_accumulation_steps == 1
    assert c.train.num_train_epochs == 2
    assert (c.lora.r, c.lora.alpha, c.lora.dropout) == (16, 32, 0.05)
    assert c.data.num_samples == 1000 and c.data.subset_seed == 42
    assert c.train.save_steps == 0.05
    assert c.resources.gpus >= 1


def test_overrides_are_typed_by_their_field():
    c = load_config(
        "grpo",
        "tiny-smolvlm",
        overrides=[
            "train.learning_rate=3e-4",
            "lora.r=4",
            "train.reward_funcs=accuracy",
            "data.num_samples=none",
            "model.generation_cache=off",
            "lora.enabled=off",
            "data.instruction=yes",
        ],
    )
    assert c.train.learning_rate == 3e-4 and c.lora.r == 4
    assert c.train.reward_funcs == ["accuracy"] and c.data.num_samples is None
    # YAML 1.1 would read these as booleans; here a str field keeps the text, a bool field parses it
    assert c.model.generation_cache == "off" and c.lora.enabled is False
    assert c.data.instruction == "yes"
    # values stay raw text until a field types them
    assert parse_overrides(["a.b=1", "a.c=x"]) == {"a": {"b": "1", "c": "x"}}


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.lr=1", "unknown key 'train.lr'"),
        ("train.learning_rate=fast", "expected float"),
        ("lora.enabled=maybe", "lora.enabled: expected true or false"),
        ("model.generation_cache=of", "model.generation_cache: expected one of auto, on, off"),
        ("train.reward_funcs=accuracy,speed", "reward_funcs"),
        ("nonsense", "key=value"),
        ("data.dataset=/does/not/exist", "data.dataset"),
        ("train.num_generations=1", "num_generations"),
    ],
)
def test_bad_overrides_are_clear_errors(override, message):
    with pytest.raises(UserError, match=message):
        load_config("grpo", "tiny-qwen2.5-vl", overrides=[override])


def test_unknown_model_and_recipe():
    with pytest.raises(UserError, match="Valid names: qwen2.5-vl-3b"):
        load_config("sft", "qwen-9000")
    with pytest.raises(UserError, match="available are"):
        load_config("sft", "tiny-qwen2.5-vl", recipe="nope")


@pytest.mark.parametrize(
    "overrides",
    [
        ["train.max_steps=0", "train.num_train_epochs=0"],
        ["train.max_steps=-1", "train.num_train_epochs=0"],
    ],
)
@pytest.mark.parametrize("verb", ["sft", "grpo"])
def test_zero_training_steps_is_an_error_not_a_completed_run(verb, overrides):
    with pytest.raises(UserError, match="no training steps.*max_steps.*num_train_epochs"):
        load_config(verb, "tiny-qwen2.5-vl", overrides=overrides)
    # either one alone trains: max_steps > 0 wins over epochs, epochs > 0 count when max_steps <= 0
    load_config(
        verb, "tiny-qwen2.5-vl", overrides=["train.max_steps=1", "train.num_train_epochs=0"]
    )
    load_config(
        verb, "tiny-qwen2.5-vl", overrides=["train.max_steps=0", "train.num_train_epochs=1"]
    )


@pytest.mark.parametrize("value", ["0", "-2"])
def test_a_training_subset_of_no_rows_is_refused(value):
    with pytest.raises(UserError, match="data.num_samples: must be at least 1"):
        load_config("sft", "tiny-qwen2.5-vl", overrides=[f"data.num_samples={value}"])


@pytest.mark.parametrize("limit", ["0", "-3"])
def test_an_evaluation_limit_below_one_is_refused(limit):
    with pytest.raises(UserError, match="eval.limit: must be at least 1"):
        load_config("evaluate", "tiny-qwen2.5-vl", overrides=[f"eval.limit={limit}"])
    assert load_config("evaluate", "tiny-qwen2.5-vl").eval.limit is None  # none: every item
