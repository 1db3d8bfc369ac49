import pytest

from vqa_r1.config import list_recipes, load_config, parse_overrides
from vqa_r1.errors import UserError


def test_study_grpo_recipe_for_3b():
    c = load_config("grpo", "qwen2.5-vl-3b")
    assert c.recipe == "grpo_3b"
    assert c.train.learning_rate == 1e-5 and c.train.num_generations == 4
    assert c.train.per_device_batch_size == 4 and c.train.beta == 0.04 and c.train.epochs == 2
    assert (c.lora.r, c.lora.alpha, c.lora.dropout) == (16, 32, 0.05)
    assert c.data.num_samples == 1000 and c.data.subset_seed == 42
    assert c.train.save_every == 0.05
    assert c.resources.gpus >= 1


def test_every_recipe_loads():
    for name in list_recipes():
        verb = name.split("_", 1)[0]
        if verb == "demo":
            verb = name.split("_", 1)[1]
        load_config(verb, "tiny-qwen2.5-vl", name)


def test_overrides_are_typed():
    c = load_config(
        "sft",
        "tiny-smolvlm",
        overrides=[
            "train.learning_rate=3e-4",
            "lora.r=4",
            "train.reward_funcs=accuracy",
            "data.num_samples=none",
        ],
    )
    assert c.train.learning_rate == 3e-4 and c.lora.r == 4
    assert c.train.reward_funcs == ["accuracy"] and c.data.num_samples is None
    assert parse_overrides(["a.b=1", "a.c=x"]) == {"a": {"b": 1, "c": "x"}}


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.lr=1", "unknown key 'train.lr'"),
        ("train.learning_rate=fast", "expected float"),
        ("lora.enabled=maybe", "expected true/false"),
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
