"""The curriculum's off-by-default tasks ``count``, ``cell`` and ``lookup``: well-formed,
deterministic, never in the shipped models' rows, and disjoint from the counting and cryptogram
studies' held-out data."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from vqa_r1.data.curriculum import (
    CELL_QUESTIONS,
    CELL_RANGE,
    COUNT_QUESTIONS,
    COUNT_RANGE,
    DEFAULT_WEIGHTS,
    LOOKUP_LENGTH,
    LOOKUP_PAIRS,
    TASKS,
    CurriculumConfig,
    generate_examples,
    image_payload,
    layout_of,
    render,
    render_payload,
    table_fingerprint,
)
from vqa_r1.data.prompts import REASONING_INSTRUCTION
from vqa_r1.data.synthetic import LETTER_COLORS, SHAPES

TARGET = re.compile(r"<think> (.+) </think> <answer> (\S+) </answer>")


def _examples(task: str, n: int = 400, seed: int = 0, exclude=frozenset()):
    cfg = CurriculumConfig(seed=seed, weights={task: 1.0})
    return cfg, generate_examples(n, cfg, REASONING_INSTRUCTION, exclude)


def test_count_rows_list_the_objects_left_to_right_and_end_with_their_number():
    cfg, examples = _examples("count", 600)
    counts = Counter()
    for e in examples:
        assert e.task == "count" and e.scene is not None and e.table is None
        assert e.question in COUNT_QUESTIONS
        reasoning, answer = TARGET.fullmatch(e.target).groups()
        n = len(e.scene.objects)
        by_x, _ = layout_of((o.name, o.box) for o in e.scene.objects)
        noun = "object" if n == 1 else "objects"
        assert reasoning == f"left to right: {', '.join(by_x)}. {n} {noun}."
        assert answer == str(n)
        assert len({o.color for o in e.scene.objects}) == n  # a colour names an object
        xs = sorted(o.center[0] for o in e.scene.objects)
        assert all(
            b - a >= cfg.min_gap * cfg.scene.image_size for a, b in zip(xs, xs[1:], strict=False)
        )
        image = render(e, cfg.scene)
        assert image.size == (cfg.scene.image_size,) * 2 and image.mode == "RGB"
        counts[n] += 1
    # every count of the range, about equally often; never the counting study's condition B
    assert sorted(counts) == list(range(COUNT_RANGE[0], COUNT_RANGE[1] + 1))
    assert min(counts.values()) > 60
    assert COUNT_RANGE[1] < 7


def test_cell_rows_answer_the_letter_paired_with_the_asked_key():
    cfg, examples = _examples("cell", 600)
    layouts = Counter()
    for e in examples:
        assert e.task == "cell" and e.scene is None and e.table is not None and e.has_image
        pairs = e.table.pairs
        keys, values = zip(*pairs, strict=True)
        assert CELL_RANGE[0] <= len(pairs) <= CELL_RANGE[1]
        assert len(set(keys)) == len(keys) and len(set(values)) == len(values)
        assert set(keys) != set(values) and all(k != v for k, v in pairs)
        key = re.fullmatch(
            CELL_QUESTIONS[e.table.layout].format(key=r"([a-z])").replace("?", r"\?"), e.question
        ).group(1)
        reasoning, answer = TARGET.fullmatch(e.target).groups()
        assert answer == dict(pairs)[key]
        table = ", ".join(f"{k} -> {v}" for k, v in pairs)
        assert reasoning == f"{table}. {key} -> {answer}."
        image = render(e, cfg.scene)
        assert image.size == (cfg.scene.image_size,) * 2 and image.mode == "RGB"
        assert len(image.getcolors(1 << 16)) > 2  # letters and lines drawn on the white
        # each letter in its own colour (the tiny vision towers tell colours, not shapes, apart)
        inks = {rgb for _, rgb in image.getcolors(1 << 16)}
        assert {LETTER_COLORS[letter] for pair in pairs for letter in pair} <= inks
        assert (
            not (set(LETTER_COLORS.values()) - {LETTER_COLORS[x] for p in pairs for x in p}) & inks
        )
        # what build_rows stores draws the same image
        assert render_payload(image_payload(e), cfg.scene).tobytes() == image.tobytes()
        layouts[e.table.layout] += 1
    assert set(layouts) == set(CELL_QUESTIONS) and min(layouts.values()) > 200


LOOKUP_QUESTION = re.compile(
    r"Table: (.+)\. Look up each letter of this message in the table; _ stands for a space\. "
    r"The message is: (.+)\."
)


def test_lookup_rows_look_each_letter_of_the_message_up_in_the_tables_text():
    _, examples = _examples("lookup", 600)
    spaced = 0
    for e in examples:
        assert e.task == "lookup" and e.scene is None and e.table is None and not e.has_image
        assert e.fingerprint() is None
        table, message = LOOKUP_QUESTION.fullmatch(e.question).groups()
        pairs = [tuple(cell.split(" -> ")) for cell in table.split(", ")]
        keys, values = zip(*pairs, strict=True)
        assert LOOKUP_PAIRS[0] <= len(pairs) <= LOOKUP_PAIRS[1]
        assert len(set(keys)) == len(keys) and len(set(values)) == len(values)
        assert set(keys) != set(values) and all(k != v for k, v in pairs)  # never a decoder
        assert set(keys) | set(values) <= set(LETTER_COLORS)
        letters = message.split(" ")
        assert LOOKUP_LENGTH[0] <= len(letters) <= LOOKUP_LENGTH[1]
        assert "_" not in (letters[0], letters[-1]) and set(letters) - {"_"} <= set(keys)
        spaced += "_" in letters
        reasoning, answer = re.fullmatch(
            r"<think> (.+) </think> <answer> (.+) </answer>", e.target
        ).groups()
        mapping = dict(pairs)
        # the cryptogram's worked steps and <chars> block, written the same way
        assert (
            reasoning == ", ".join(c if c == "_" else f"{c} -> {mapping[c]}" for c in letters) + "."
        )
        assert answer.split(" ") == [mapping.get(c, c) for c in letters]
    assert 150 < spaced < 450


@pytest.mark.parametrize("task", ["count", "cell", "lookup"])
def test_new_tasks_are_deterministic_by_seed(task):
    cfg, first = _examples(task, 60, seed=4)
    _, again = _examples(task, 60, seed=4)
    _, other = _examples(task, 60, seed=5)
    assert [e.target for e in first] == [e.target for e in again]
    assert [e.question for e in first] == [e.question for e in again]
    for a, b in zip(first[:10], again[:10], strict=True):
        if task == "lookup":  # text only
            assert render(a, cfg.scene) is None and render(b, cfg.scene) is None
        else:
            assert render(a, cfg.scene).tobytes() == render(b, cfg.scene).tobytes()
    assert [e.question for e in first] != [e.question for e in other]
    if task != "lookup":
        assert [e.fingerprint() for e in first] != [e.fingerprint() for e in other]


def test_default_weights_leave_the_new_tasks_off_and_weights_turn_them_on():
    from vqa_r1.models.adapters import get_adapter
    from vqa_r1.train.pretrain import (
        PretrainConfig,
        build_rows,
        config_from_overrides,
        readout_tasks,
    )

    assert CurriculumConfig().weights == DEFAULT_WEIGHTS and set(TASKS) - set(DEFAULT_WEIGHTS) == {
        "count",
        "cell",
        "lookup",
    }
    assert readout_tasks(PretrainConfig()) == list(DEFAULT_WEIGHTS)
    default = generate_examples(3000, CurriculumConfig(seed=1), REASONING_INSTRUCTION)
    assert {e.task for e in default} == set(DEFAULT_WEIGHTS)
    weights = (
        "{layout: 0.15, which: 0.2, verify: 0.25, text_claim: 0.4, count: 0.15, cell: 0.15, "
        "lookup: 0.15}"
    )
    cfg = config_from_overrides("qwen2.5-vl", [f"weights={weights}", "examples=300"])
    assert cfg.weights["count"] == 0.15 and cfg.weights["lookup"] == 0.15
    assert readout_tasks(cfg) == list(TASKS)
    rows = build_rows(cfg, get_adapter(cfg.family))
    seen = Counter()
    for i in range(len(rows)):
        row = rows[i]
        target = row["completion"][0]["content"][0]["text"]
        has_image = any(part["type"] == "image" for part in row["prompt"][0]["content"])
        assert len(row["images"]) == int(has_image)
        if "Look up each letter" in row["prompt"][0]["content"][-1]["text"]:
            seen["lookup"] += 1
            assert not has_image and " -> " in target
        elif " -> " in target:
            seen["cell"] += 1
            assert has_image and row["images"][0].size == (112, 112)
        elif re.search(r"\d objects?\. </think>", target):
            seen["count"] += 1
            assert has_image
    assert seen["cell"] > 10 and seen["count"] > 10 and seen["lookup"] > 10


def test_new_tasks_follow_the_held_out_fingerprint_check():
    from vqa_r1.data.datasets import heldout_fingerprints
    from vqa_r1.recipes import all_data_configs

    held = heldout_fingerprints(all_data_configs())
    for task in ("count", "cell"):
        _, examples = _examples(task, 1000, seed=0, exclude=held)
        assert not {e.fingerprint() for e in examples} & held
        # a scene or table declared held out is drawn again
        first = examples[0].fingerprint()
        _, again = _examples(task, 20, seed=0, exclude={first})
        assert first not in {e.fingerprint() for e in again}
        assert again[0].fingerprint() == examples[1].fingerprint()


def test_count_scenes_are_not_the_counting_studys():
    """Another palette and other shapes (no object name in common), other question wording, and
    no scene fingerprint of the study's held-out splits (as declared, and with its defaults)."""
    from vqa_r1.data import counting
    from vqa_r1.data.curriculum import fingerprint
    from vqa_r1.experiments.counting import counting_spec
    from vqa_r1.experiments.spec import load_spec

    _, examples = _examples("count", 1000)
    ours = {e.fingerprint() for e in examples}
    names = {o.name for e in examples for o in e.scene.objects}
    assert not {name.split()[1] for name in names} & set(counting.SHAPES)
    assert {name.split()[1] for name in names} <= set(SHAPES)
    study_questions = {"How many objects are there?"} | {
        f"How many {w} are there?" for w in counting.PLURALS.values()
    }
    assert not set(COUNT_QUESTIONS) & study_questions
    assert not any(q.startswith("How many") and q.endswith("are there?") for q in COUNT_QUESTIONS)
    for spec in (counting_spec(load_spec("counting")), counting.CountingSpec()):
        for index, (split, (condition, n)) in enumerate(spec.splits.items()):
            if split == "train":
                continue
            scenes = counting.generate_scenes(int(n), spec.seed * 1000 + index, condition, spec)
            theirs = {fingerprint((o.name, o.box) for o in s.objects) for s in scenes}
            assert not ours & theirs


def test_cell_tables_are_never_the_cryptogram_studys_decoders():
    """A cryptogram decoder maps its alphabet onto itself; a cell table never does. Checked on the
    study's held-out splits (as declared, and with the full alphabet): no mapping in common, and
    the questions never carry a coded message."""
    from vqa_r1.data import cryptogram
    from vqa_r1.experiments.cryptogram import cryptogram_spec
    from vqa_r1.experiments.spec import load_spec

    _, examples = _examples("cell", 2000)
    ours = {e.fingerprint() for e in examples}
    _, lookups = _examples("lookup", 2000)
    for e in lookups:  # the lookup task's tables, written in its questions
        table = LOOKUP_QUESTION.fullmatch(e.question).group(1)
        ours.add(table_fingerprint(tuple(cell.split(" -> ")) for cell in table.split(", ")))
    for spec in (cryptogram_spec(load_spec("cryptogram")), cryptogram.CryptogramSpec()):
        for split, items in cryptogram.generate(spec).items():
            if split == "train":
                continue
            decoders = {table_fingerprint(c.decoder.items()) for c in items}
            assert not ours & decoders
    # a question is a template and one letter: no coded message is ever shown
    templates = {
        t.format(key=k) for t in CELL_QUESTIONS.values() for k in "abcdefghijklmnopqrstuvwxyz"
    }
    assert {e.question for e in examples} <= templates


def test_a_card_command_with_weights_reads_back_as_its_settings():
    """The card's command quotes a weights mapping for the shell, so it can be pasted (and the
    shipped cards, with no weights, read as before)."""
    import shlex

    from vqa_r1.train.pretrain import card_command, config_from_overrides

    weights = "{layout: 0.15, which: 0.2, verify: 0.25, text_claim: 0.4, count: 0.15, cell: 0.15}"
    cfg = config_from_overrides("qwen2.5-vl", [f"weights={weights}", "seed=1"])
    args = shlex.split(card_command(cfg))[2:]
    sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
    assert config_from_overrides(args[args.index("--family") + 1], sets) == cfg
