"""The cryptogram generator: deterministic, held-out messages never trained on, a curriculum over
the number of words, decoders that decode, and a folder the loaders and rewards read."""

import itertools
import json
import random
from collections import Counter

import pytest
from PIL import Image

from vqa_r1.data.cryptogram import (
    CRYPTOGRAM_INSTRUCTION,
    SPACE_CODE,
    WORDS,
    CryptogramSpec,
    chars_form,
    draw_decoder,
    generate,
    guess_chance,
    make_cryptogram,
    write_dataset,
)
from vqa_r1.data.datasets import load_split, trainer_rows
from vqa_r1.rewards import REWARDS

SMALL = {"train": 60, "validation": 15, "test": 30}


def _decode(coded: str, decoder: dict) -> str:
    return "".join(" " if c == SPACE_CODE else decoder[c] for c in coded.split(" "))


def test_deterministic_by_seed():
    a = generate(CryptogramSpec(splits=SMALL, seed=3))
    b = generate(CryptogramSpec(splits=SMALL, seed=3))
    c = generate(CryptogramSpec(splits=SMALL, seed=4))
    key = lambda ex: {s: [(x.message, x.decoder, x.cells) for x in v] for s, v in ex.items()}  # noqa: E731
    assert key(a) == key(b) and key(a) != key(c)
    assert list(a) == list(SMALL) and {s: len(v) for s, v in a.items()} == SMALL


def test_held_out_messages_never_in_train():
    spec = CryptogramSpec(splits={"train": 600, "validation": 60, "test": 120}, seed=1)
    ex = generate(spec)
    train = {c.message for c in ex["train"]}
    validation = {c.message for c in ex["validation"]}
    test = {c.message for c in ex["test"]}
    assert not train & validation and not train & test and not validation & test


def test_a_fresh_test_draw_changes_the_test_split_alone_and_keeps_old_cache_keys():
    """Issue 31, item 4: `cryptogram_test_seed` draws the test split afresh (the reading looks at
    it once); validation stays, train still holds no test message, and a spec without it keeps
    the cache key of the folders made before it existed."""
    from vqa_r1.data.cryptogram import cryptogram_target, spec_dict

    old, fresh = CryptogramSpec(splits=SMALL, seed=0), CryptogramSpec(splits=SMALL, test_seed=1)
    a, b = generate(old), generate(fresh)
    same = lambda split: [(c.message, c.decoder) for c in split]  # noqa: E731
    assert same(a["validation"]) == same(b["validation"])
    assert same(a["test"]) != same(b["test"]) and len(b["test"]) == SMALL["test"]
    assert not {c.message for c in b["train"]} & {c.message for c in b["test"]}
    assert "test_seed" not in spec_dict(old) and spec_dict(fresh)["test_seed"] == 1
    assert cryptogram_target(old) != cryptogram_target(fresh)


def test_curriculum_and_equal_shares():
    ex = generate(CryptogramSpec(splits=SMALL, seed=0))
    counts = [c.word_count for c in ex["train"]]
    assert counts == sorted(counts)  # one word first, then two, then three
    assert Counter(counts) == {1: 20, 2: 20, 3: 20}
    assert Counter(c.word_count for c in ex["test"]) == {1: 10, 2: 10, 3: 10}
    mixed = generate(CryptogramSpec(splits=SMALL, seed=0, order="shuffled"))
    assert [c.word_count for c in mixed["train"]] != sorted(c.word_count for c in mixed["train"])
    # held-out splits are mixed
    assert [c.word_count for c in ex["test"]] != sorted(c.word_count for c in ex["test"])


def test_decoders_decode_and_fix_no_letter():
    for c in generate(CryptogramSpec(splits=SMALL, seed=2))["train"]:
        assert sorted(c.decoder) == sorted(c.decoder.values()) == sorted(c.cells)
        assert all(code != plain for code, plain in c.decoder.items())  # a derangement
        assert _decode(c.coded, c.decoder) == c.message
        assert c.coded.replace(" ", "") != c.message.replace(" ", SPACE_CODE)
        assert c.chars == chars_form(c.message)
        assert c.chars.count(" _ ") == c.word_count - 1
        words = c.message.split()
        assert all(w in WORDS and 3 <= len(w) <= 8 for w in words)


def test_settings_small_alphabet_and_checks():
    spec = CryptogramSpec(
        splits=SMALL, alphabet="abcdef", words="letters", word_lengths=(2, 3), word_counts=(1, 2)
    )
    ex = generate(spec)
    for c in ex["train"]:
        assert set(c.message.replace(" ", "")) <= set("abcdef") and c.word_count in (1, 2)
    with pytest.raises(ValueError, match="words='letters'"):
        generate(CryptogramSpec(splits=SMALL, alphabet="abcdef"))  # few English words
    with pytest.raises(ValueError, match="too small"):
        generate(
            CryptogramSpec(
                splits={"train": 5, "test": 200},
                alphabet="ab",
                words="letters",
                word_lengths=(1, 1),
                word_counts=(1,),
            )
        )
    for bad in (
        {"alphabet": "aab"},
        {"alphabet": "a_"},
        {"word_counts": (0,)},
        {"word_lengths": (4, 2)},
        {"image_size": 10},
        {"order": "random"},
        {"splits": {"train": -1}},
    ):
        with pytest.raises(ValueError):
            CryptogramSpec(**bad)


def test_word_file(tmp_path):
    names = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"]
    names += ["golf", "hotel", "india", "juliet", "kilo"]
    words = tmp_path / "words.txt"
    words.write_text("\n".join([*names, "Lima!"]))  # not spelled with the alphabet: left out
    ex = generate(CryptogramSpec(splits={"train": 30}, words=str(words), word_counts=(1,)))
    assert {c.message for c in ex["train"]} <= set(names)


@pytest.mark.parametrize("size", [64, 112, 224])
def test_decoder_image_has_every_cell(size):
    import random

    spec = CryptogramSpec(image_size=size)
    c = make_cryptogram(random.Random(0), spec, "cat")
    img = draw_decoder(c, size)
    assert img.size == (size, size) and img.mode == "RGB"
    # ink of both colours: coded letters (dark) and plain letters (blue)
    pixels = (
        list(img.convert("RGB").get_flattened_data())
        if hasattr(img, "get_flattened_data")
        else list(img.getdata())
    )
    assert sum(1 for p in pixels if p[2] > 150 and p[0] < 100) > 26
    assert sum(1 for p in pixels if max(p) < 80) > 26


def test_worked_steps_read_the_table_then_look_each_letter_up():
    """The worked-steps reasoning: the decoder cell by cell in the image's order, then each coded
    character's lookup (``_`` for a space), then ``<chars>``; without them, ``<chars>`` alone."""
    from vqa_r1.data.cryptogram import Cryptogram, reasoning_text

    c = Cryptogram({"a": "c", "b": "a", "c": "b"}, ["b", "c", "a"], "ab c")
    assert c.coded == "b c _ a"
    assert reasoning_text(c) == "<chars> a b _ c </chars>"
    assert reasoning_text(c, worked_steps=True) == (
        "b -> a, c -> b, a -> c. b -> a, c -> b, _, a -> c. <chars> a b _ c </chars>"
    )


def test_letters_in_colours_are_drawn_each_in_its_own():
    """``letter_colours``: every letter of the decoder in its LETTER_COLORS ink (a-f only)."""
    import random

    from vqa_r1.data.synthetic import LETTER_COLORS

    spec = CryptogramSpec(alphabet="abcdef", letter_colours=True, image_size=112)
    c = make_cryptogram(random.Random(0), spec, "cab")
    inks = {rgb for _, rgb in draw_decoder(c, 112, letter_colours=True).getcolors(1 << 16)}
    assert set(LETTER_COLORS.values()) <= inks
    plain = {rgb for _, rgb in draw_decoder(c, 112).getcolors(1 << 16)}
    assert not set(LETTER_COLORS.values()) & plain
    with pytest.raises(ValueError, match="letter_colours draws the letters abcdef only, not gh"):
        CryptogramSpec(alphabet="abcdefgh", letter_colours=True)


def test_table_layout_is_the_curriculums_letter_table_of_the_whole_alphabet():
    """``layout="table"``: each coded letter above its plain letter, drawn as the curriculum's cell
    task draws its tables, and the question says so."""
    import random

    from vqa_r1.data.cryptogram import problem_text
    from vqa_r1.data.curriculum import Table, draw_table

    spec = CryptogramSpec(alphabet="abcde", letter_colours=True, layout="table", image_size=112)
    c = make_cryptogram(random.Random(0), spec, "cab")
    pairs = [(code, c.decoder[code]) for code in c.cells]
    drawn = draw_decoder(c, 112, letter_colours=True, layout="table")
    assert drawn.tobytes() == draw_table(Table(pairs, "under"), 112).tobytes()
    assert "top row is written above" in problem_text(c.coded, "table")
    assert "an arrow" in problem_text(c.coded)
    with pytest.raises(ValueError, match="layout must be grid or table"):
        CryptogramSpec(layout="rows")


class _Adapter:  # the FamilyAdapter interface trainer_rows reads
    instruction = "True or False?"
    thinking = False

    def messages(self, question, instruction=None, images=1):
        text = f"{question} {instruction if instruction is not None else self.instruction}"
        return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]


def test_folder_loads_and_its_targets_earn_full_reward(tmp_path):
    spec = CryptogramSpec(
        splits={"train": 6, "validation": 3, "test": 3}, image_size=112, worked_steps=True
    )
    out = write_dataset(tmp_path / "crypto", spec)
    info = json.loads((out / "dataset_info.json").read_text())
    assert info["kind"] == "cryptogram" and info["splits"] == spec.splits
    train = load_split(out, "train")  # columns and images checked
    assert train["word_count"] == sorted(train["word_count"])
    first = train[0]
    assert Image.open(first["image_path"]).size == (112, 112)
    assert first["coded_message"] in first["problem"] and first["caption"] == first["problem"]
    assert first["task"] == ("word" if first["word_count"] == 1 else f"word_{first['word_count']}")
    assert json.loads(first["mapping"])  # coded letter -> plain letter

    sft = trainer_rows(train, _Adapter(), "sft")
    target = sft[0]["completion"][0]["content"][0]["text"]
    assert target.startswith("<think> ") and "<chars> " in target
    assert target.endswith(f"</think> <answer> {first['decoded_message']} </answer>")
    prompt = sft[0]["prompt"][0]["content"][1]["text"]  # the cryptogram instruction, not True/False
    assert prompt == f"{first['problem']} {CRYPTOGRAM_INSTRUCTION}"

    grpo = trainer_rows(train, _Adapter(), "grpo")
    assert {"coded_message", "decoded_message", "word_count"} <= set(grpo.column_names)
    columns = {k: list(grpo[k]) for k in ("coded_message", "decoded_message", "solution")}
    targets = [r["completion"][0]["content"][0]["text"] for r in sft]
    for name in [n for n in REWARDS if n.startswith("cryptogram_")]:
        assert REWARDS[name](completions=targets, **columns) == [1.0] * len(targets), name


def _r1_vlm_rows(n: int, seed: int) -> list[dict]:
    """Rows as r1_vlm's message_decoding_words_and_sequences_r1.py writes them."""
    import io
    import random

    spec = CryptogramSpec()
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        message = " ".join(rng.choice(WORDS) for _ in range(1 + i % 3))
        c = make_cryptogram(rng, spec, message)
        buffer = io.BytesIO()
        draw_decoder(c, 96).save(buffer, format="PNG")
        rows.append(
            {
                "messages": "[...]",
                "coded_message": c.coded,
                "mapping": {**c.decoder, "_": " "},
                "decoded_message": message,
                "task": "word" if c.word_count == 1 else f"word_{c.word_count}",
                "image": {"bytes": buffer.getvalue(), "path": f"images/{i}.png"},
            }
        )
    return rows


@pytest.mark.parametrize("layout", ["parquet", "save_to_disk"])
def test_r1_vlm_release_is_read(tmp_path, layout):
    from datasets import Dataset, DatasetDict
    from datasets import Image as ImageFeature

    from vqa_r1.data import formats

    folder = tmp_path / "message-decoding-words-and-sequences-r1"
    splits = {"train": _r1_vlm_rows(6, 0), "test": _r1_vlm_rows(3, 1)}
    if layout == "parquet":
        (folder / "data").mkdir(parents=True)
        for split, rows in splits.items():
            Dataset.from_list(rows).to_parquet(
                str(folder / "data" / f"{split}-00000-of-00001.parquet")
            )
    else:
        dd = DatasetDict({s: Dataset.from_list(r) for s, r in splits.items()})
        dd.cast_column("image", ImageFeature()).save_to_disk(str(folder))
    assert formats.detect(folder).NAME == "r1_vlm_cryptogram"
    assert not formats.is_saved_dataset(folder)
    train = load_split(folder, "train")
    test = load_split(folder, "test")
    assert len(train) == 6 and len(test) == 3
    released = splits["train"]
    assert train["coded_message"] == [r["coded_message"] for r in released]
    assert train["decoded_message"] == [r["decoded_message"] for r in released]
    assert train["task"] == [r["task"] for r in released]
    assert json.loads(train[0]["mapping"])["_"] == " "
    sft = trainer_rows(train, _Adapter(), "sft")
    targets = [r["completion"][0]["content"][0]["text"] for r in sft]
    columns = {k: list(train[k]) for k in ("coded_message", "decoded_message")}
    for name in [n for n in REWARDS if n.startswith("cryptogram_")]:
        assert REWARDS[name](completions=targets, **columns) == [1.0] * 6, name
    # copying the released coded message: the gate holds on their rows too
    copies = [
        f"<think><chars> {c} </chars></think><answer>x</answer>" for c in columns["coded_message"]
    ]
    assert REWARDS["cryptogram_decoding"](completions=copies, **columns) == [0.0] * 6


def test_data_cryptogram_command_writes_the_splits_as_typed(tmp_path, capsys):
    from vqa_r1.cli import main

    out = tmp_path / "crypt"
    argv = ["data", "cryptogram", "--out", str(out), "--train", "6", "--validation", "2",
            "--test", "3", "--alphabet", "abcdef", "--word-counts", "1,2",
            "--word-lengths", "2,3", "--words", "letters", "--image-size", "96",
            "--order", "curriculum", "--seed", "3"]  # fmt: skip
    assert main(argv) == 0
    train, test = load_split(out, "train"), load_split(out, "test")
    assert len(train) == 6 and len(test) == 3 and len(load_split(out, "validation")) == 2
    assert train["word_count"] == sorted(train["word_count"]) and set(train["word_count"]) == {1, 2}
    assert set("".join(test["decoded_message"]).replace(" ", "")) <= set("abcdef")
    assert Image.open(test[0]["image_path"]).size == (96, 96)
    assert not any(" -> " in r for r in train["reasoning"])  # r1_vlm's targets: <chars> alone
    capsys.readouterr()
    assert main(argv) == 0 and "nothing to do" in capsys.readouterr().out
    argv[argv.index("--seed") + 1] = "4"
    assert main(argv) == 2 and "other settings" in capsys.readouterr().err
    # the two aids for tiny models, as flags
    aided = tmp_path / "aided"
    flags = ["--worked-steps", "--letter-colours", "--layout", "table"]
    assert main([*argv[:3], str(aided), *argv[4:], *flags]) == 0
    rows = load_split(aided, "train")
    assert all(" -> " in r and "<chars>" in r for r in rows["reasoning"])
    assert all("top row" in p for p in rows["problem"])
    inks = {rgb for _, rgb in Image.open(rows[0]["image_path"]).convert("RGB").getcolors(1 << 16)}
    assert (220, 30, 30) in inks  # the letter a, red
    # settings that cannot be drawn fail in one line before the folder is claimed
    bad = tmp_path / "bad"
    argv = ["data", "cryptogram", "--out", str(bad), "--train", "600", "--alphabet", "ab",
            "--word-lengths", "2,2", "--words", "letters"]  # fmt: skip
    assert main(argv) == 2 and not bad.exists()
    assert "word list is too small" in capsys.readouterr().err
    for flag, value in (("--word-counts", "1,x"), ("--word-lengths", "3"), ("--alphabet", "a")):
        assert main(["data", "cryptogram", "--out", str(bad), flag, value]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: data cryptogram") and err.count("\n") == 1, err


@pytest.mark.parametrize("derangement", [True, False])
def test_guess_chance_counts_the_decoders_that_agree(derangement):
    """The random-guess floor equals brute force over every decoder of a five-letter alphabet."""
    letters = "abcde"
    decoders = [
        dict(zip(letters, p, strict=True))
        for p in itertools.permutations(letters)
        if not derangement or all(a != b for a, b in zip(letters, p, strict=True))
    ]
    rng = random.Random(0)
    for _ in range(100):
        truth = rng.choice(decoders)
        encode = {plain: code for code, plain in truth.items()}
        words = ["".join(rng.choice(letters) for _ in range(rng.randint(1, 4))) for _ in range(2)]
        message = " ".join(words)
        coded = " ".join(SPACE_CODE if c == " " else encode[c] for c in message)
        agree = sum(_decode(coded, d) == message for d in decoders)
        assert guess_chance(coded, message, 5, derangement) == pytest.approx(agree / len(decoders))


def test_guess_chance_refuses_what_no_decoder_codes():
    assert guess_chance("a b", "ab", 4) == 0.0  # a letter standing for itself: never a derangement
    assert guess_chance("a b", "ab", 4, derangement=False) == pytest.approx(1 / 12)
    for coded, message in (("a b", "c"), ("a a", "bc"), ("a b", "cc")):
        with pytest.raises(ValueError, match="is not a coding"):
            guess_chance(coded, message, 6)
