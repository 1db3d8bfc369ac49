"""Visual cryptograms: decode a message with a substitution table drawn as an image.

The task of Groundlight's r1_vlm (github.com/groundlight/r1_vlm, the message-decoding datasets and
``message_decoding_sequences_env.py``; blog "GRPO for vision"): every example draws a random
letter-to-letter substitution, renders its decoder (a grid of cells, each a coded letter, an arrow
and the plain letter it stands for), codes a message of one to three words with it, and asks for
the message back. Neither the text nor the image alone answers it: the model has to look up each
coded letter in the picture.

What follows r1_vlm (their ``message_decoding_words_and_sequences.py`` and its ``_r1.py``):

- a fresh bijection of the alphabet per example, its cells in a random order;
- a space in the message is coded as ``_`` and the coded message is shown with its characters
  separated by spaces (``r h q _ c t``);
- the decoded characters are written in the same shape, ``<chars> c a t _ d o g </chars>``, inside
  the reasoning, then the message in ``<answer> cat dog </answer>``;
- one-, two- and three-word messages (their ``task`` column: ``word``, ``word_2``, ``word_3``),
  in equal shares.

What is ours: the drawing (legible at the small sizes our models see, colour-coded cells), the
settings (alphabet, word counts and lengths, image size), a small built-in word list (r1_vlm draws
from the 10,000 most frequent English words of at least three letters, a hub dataset that cannot
be downloaded here), no letter mapped to itself by default (``derangement``: r1_vlm's plain
shuffle may fix letters, and a message that codes to itself makes copying it correct), held-out
messages never seen in training, and the training split ordered as a curriculum over the number
of words (``order="curriculum"``).

The folder is a dataset folder ``open_split`` reads: the rows carry their own ``problem``,
``solution`` and ``reasoning`` (so ``trainer_rows`` builds the SFT target
``<think> <chars> ... </chars> </think> <answer> ... </answer>``, r1_vlm's format), plus the
columns the cryptogram rewards read by name (``coded_message``, ``decoded_message``).
"""

from __future__ import annotations

import functools
import json
import math
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from PIL import Image, ImageDraw, ImageFont

from vqa_r1.data.synthetic import LETTER_COLORS
from vqa_r1.io import atomic_dir

SPACE_CODE = "_"

CRYPTOGRAM_INSTRUCTION = (
    "Inside <think> </think>, write the decoded characters in <chars> </chars>, one by one and "
    "separated by spaces, with _ between words (for example <chars> c a t _ d o g </chars>); "
    "then give the decoded message in <answer> </answer> (for example <answer> cat dog </answer>)."
)
"""The instruction a run on cryptogram rows passes (``data.instruction``) in place of the
family's True/False one."""

# Common English words, lower case, three to eight letters: our own short list (r1_vlm's source,
# a hub list of frequent words, cannot be downloaded here). The default alphabet spells them all.
WORDS: tuple[str, ...] = tuple(
    """
    able about above act add after again age ago air all also always and animal answer any
    apple area arm army around art ask away baby back bad bag ball bank base bear beat bed
    before begin best better big bird black blue board boat body book both box boy bread
    bring brother brown build burn busy buy cake call came camp can car card care carry case
    cat catch cause center chair change child city class clean clear close cloud coast cold
    color come cook cool corn cost could count country course cover cow cross cry cup cut
    dark day dead deal dear deep desk did die dinner dog door down draw dream dress drink
    drive drop dry during each early earth east easy eat egg eight end enjoy enough even
    event every eye face fact fair fall family farm fast father fear feel few field fill
    final find fine fire first fish five floor flower fly follow food foot force forest form
    four free fresh friend front fruit full fun game garden gate gave gift girl give glad
    glass gold good grass great green ground group grow half hand happy hard hat have head
    hear heart heat heavy help her here high hill his hold home hope horse hot hour house
    how huge idea inch iron island job join joy jump just keep key kind king kitchen knee
    know lake land large last late laugh lead learn leave left leg less letter life light
    like line lion list listen little live long look lost loud love low lucky machine main
    make man many map mark market match may mean meat meet metal middle might milk mind
    minute miss model money month moon more morning most mother mount mouse mouth move much
    music must name near neck need never new next nice night nine noise north nose note
    nothing now number ocean off offer office often old once one only open orange order
    other out over page paint pair paper park part party pass past path pay peace pen
    people pick picture piece place plan plant play point pool poor power press pretty
    print pull push put queen quick quiet race rain raise reach read ready real red rest
    rich ride right ring river road rock roof room root rope rose round row rule run safe
    said sail salt same sand save say school sea season seat second see seed sell send
    serve set seven shape share sheep ship shoe shop short show side sign silver simple
    sing sister sit six size skin sky sleep slow small smile snow soft soil some son song
    soon sound south space speak speed spell spring square stand star start state stay
    step stick still stone stop store storm story street strong study sugar summer sun
    sure swim table tail take talk tall teach team tell ten test than thank that then there
    they thick thin thing think three time tiny today together tomorrow tool top touch town
    train tree trip true try turn two under until upon use valley very visit voice wait
    walk wall want warm wash watch water wave way wear weather week well west wheel white
    whole why wide wild win wind window winter wish with woman wonder wood word work world
    write yard year yellow yes young
    """.split()
)

# Cell colours: the coded letter dark, the plain letter blue, an arrow between them in grey.
_INK = (20, 20, 20)
_PLAIN = (20, 60, 200)
_ARROW = (130, 130, 130)
_GRID = (200, 200, 200)


@dataclass
class CryptogramSpec:
    """What a cryptogram dataset holds. Every split is drawn from ``seed``; the splits other than
    ``train`` are held out: none of their messages appears in ``train``, and ``test`` shares none
    with ``validation``."""

    splits: dict[str, int] = field(
        default_factory=lambda: {"train": 3000, "validation": 150, "test": 300}
    )
    seed: int = 0
    # the test split's own seed (a fresh draw of it, recorded; the other splits keep ``seed``,
    # train still avoids every test message); None: ``seed``
    test_seed: int | None = None
    alphabet: str = "abcdefghijklmnopqrstuvwxyz"
    # how many words a message has; each count gets an equal share of every split (r1_vlm: 1-3)
    word_counts: tuple[int, ...] = (1, 2, 3)
    # letters per word, inclusive; built-in words outside the range (or spelled with letters
    # outside the alphabet) are not used
    word_lengths: tuple[int, int] = (3, 8)
    # builtin: the short English list above; letters: random strings over the alphabet (for small
    # alphabets, which spell few words); or the path of a text file with one word a line
    words: str = "builtin"
    image_size: int = 224
    # no letter is its own code: copying the coded message is never right
    derangement: bool = True
    # curriculum: train rows ordered by word count (all one-word messages first); shuffled: mixed
    order: Literal["curriculum", "shuffled"] = "curriculum"
    # the reasoning first reads the decoder cell by cell, then lists each lookup ("r -> c, h -> a,
    # ..."), before the <chars> block
    worked_steps: bool = False
    # each letter drawn in its own colour (synthetic.LETTER_COLORS: a-f), for the tiny models,
    # whose vision towers tell colours apart but not letter shapes; needs an alphabet within a-f
    letter_colours: bool = False
    # grid: cells of "coded -> plain"; table: two rows, each coded letter above the letter it
    # stands for (the curriculum's letter tables, data/curriculum.py, drawn the same way)
    layout: Literal["grid", "table"] = "grid"

    def __post_init__(self) -> None:
        self.word_counts = tuple(int(n) for n in self.word_counts)
        self.word_lengths = (int(self.word_lengths[0]), int(self.word_lengths[1]))
        letters = list(self.alphabet)
        if len(letters) < 2 or len(set(letters)) != len(letters):
            raise ValueError(
                f"alphabet must hold 2 or more distinct letters, got {self.alphabet!r}"
            )
        if any(c.isspace() or c == SPACE_CODE or not c.isprintable() for c in letters):
            raise ValueError(f"alphabet letters must be printable, not space or {SPACE_CODE!r}")
        if not self.word_counts or min(self.word_counts) < 1:
            raise ValueError(f"word_counts must be 1 or more, got {self.word_counts}")
        low, high = self.word_lengths
        if not 1 <= low <= high:
            raise ValueError(
                f"word_lengths must be (min, max) with 1 <= min <= max, got {low, high}"
            )
        if self.letter_colours and not set(letters) <= set(LETTER_COLORS):
            raise ValueError(
                f"letter_colours draws the letters {''.join(LETTER_COLORS)} only, not "
                f"{''.join(sorted(set(letters) - set(LETTER_COLORS)))}: use an alphabet within them"
            )
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be grid or table, got {self.layout!r}")
        if self.image_size < 48:
            raise ValueError(f"image_size must be 48 or more, got {self.image_size}")
        if self.order not in ("curriculum", "shuffled"):
            raise ValueError(f"order must be curriculum or shuffled, got {self.order!r}")
        negative = {k: n for k, n in self.splits.items() if n < 0}
        if negative:
            raise ValueError(f"example counts must be 0 or more, got {negative}")


@dataclass
class Cryptogram:
    """One example: the decoder (coded letter -> plain letter), its cell order, the message."""

    decoder: dict[str, str]
    cells: list[str]  # the coded letters in the order the grid shows them
    message: str  # plain, words separated by one space

    @property
    def coded(self) -> str:
        """The coded message as shown: characters separated by spaces, ``_`` for a space."""
        encoder = {plain: code for code, plain in self.decoder.items()}
        return " ".join(SPACE_CODE if c == " " else encoder[c] for c in self.message)

    @property
    def chars(self) -> str:
        """The decoded characters as r1_vlm writes them: ``c a t _ d o g``."""
        return chars_form(self.message)

    @property
    def word_count(self) -> int:
        return len(self.message.split())


def chars_form(message: str) -> str:
    """``cat dog`` -> ``c a t _ d o g`` (r1_vlm's ``format_chars``)."""
    return f" {SPACE_CODE} ".join(" ".join(word) for word in message.split())


def word_list(spec: CryptogramSpec) -> list[str] | None:
    """The words messages are drawn from (None: random letter strings)."""
    if spec.words == "letters":
        return None
    if spec.words == "builtin":
        source = list(WORDS)
    else:
        path = Path(spec.words)
        if not path.is_file():
            raise ValueError(f"words={spec.words!r}: not builtin, letters or a file")
        source = path.read_text(encoding="utf-8").split()
    low, high = spec.word_lengths
    allowed = set(spec.alphabet)
    found = sorted({w for w in source if low <= len(w) <= high and set(w) <= allowed})
    if len(found) < 10:
        raise ValueError(
            f"only {len(found)} words of {low}-{high} letters are spelled with the alphabet "
            f"{spec.alphabet!r}: use words='letters' (random strings) or a longer word list"
        )
    return found


def _bijection(rng: random.Random, letters: list[str], derangement: bool) -> dict[str, str]:
    """Coded letter -> plain letter; with ``derangement`` no letter stands for itself."""
    while True:
        shuffled = letters[:]
        rng.shuffle(shuffled)
        if not derangement or all(a != b for a, b in zip(letters, shuffled, strict=True)):
            return dict(zip(letters, shuffled, strict=True))


def guess_chance(coded: str, message: str, alphabet_size: int, derangement: bool = True) -> float:
    """The chance that a uniformly random decoder of the rules (a bijection of the alphabet, a
    derangement when no letter stands for itself) decodes ``coded`` into ``message``: what a model
    that learned the format and the rules but never reads the image scores on that item, the
    floor a cryptogram row is tested against (an exact message has no 0.5 chance).

    Counted exactly: the decoders that agree with the message's k distinct letter pairs are the
    bijections of the remaining n - k letters onto the remaining n - k plain letters; with the
    derangement, the m letters left on both sides must not map to themselves (inclusion-exclusion:
    sum_j (-1)^j C(m, j) (n - k - j)!), out of the n-letter derangements (the same sum with m = n).
    """
    codes, plains = coded.replace(SPACE_CODE, "").split(), message.replace(" ", "")
    pairs = dict(zip(codes, plains, strict=False))
    n, k = alphabet_size, len(pairs)
    consistent = all(pairs[c] == p for c, p in zip(codes, plains, strict=False))
    if len(codes) != len(plains) or not consistent or len(set(pairs.values())) != k or k > n:
        raise ValueError(f"{coded!r} is not a coding of {message!r} over {n} letters")

    def count(free: int, fixed_free: int) -> int:
        if not derangement:
            return math.factorial(free)
        return sum(
            (-1) ** j * math.comb(fixed_free, j) * math.factorial(free - j)
            for j in range(fixed_free + 1)
        )

    # letters neither coded in the message nor decoded to: free on both sides, never themselves
    both_free = n - len(set(pairs) | set(pairs.values()))
    if both_free < 0:
        raise ValueError(f"{coded!r} -> {message!r} uses more than {n} letters")
    if derangement and any(code == plain for code, plain in pairs.items()):
        return 0.0
    return count(n - k, both_free) / count(n, n)


def _word(rng: random.Random, spec: CryptogramSpec, words: list[str] | None) -> str:
    if words is not None:
        return rng.choice(words)
    return "".join(rng.choice(spec.alphabet) for _ in range(rng.randint(*spec.word_lengths)))


def make_cryptogram(rng: random.Random, spec: CryptogramSpec, message: str) -> Cryptogram:
    """A random decoder for ``message`` (whose letters must all be in the alphabet)."""
    letters = list(spec.alphabet)
    decoder = _bijection(rng, letters, spec.derangement)
    cells = letters[:]
    rng.shuffle(cells)
    return Cryptogram(decoder, cells, message)


@functools.lru_cache(maxsize=16)
def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)  # Pillow >= 10.1 with FreeType: scalable
    except (TypeError, OSError):
        return ImageFont.load_default()


def _grid_shape(n: int) -> tuple[int, int]:
    """Columns and rows for ``n`` cells, cells wider than tall (a cell holds three glyphs)."""
    for columns in range(1, n + 1):
        rows = -(-n // columns)
        if columns * 1.0 >= rows * 0.85:
            return columns, rows
    return n, 1


def draw_decoder(
    cryptogram: Cryptogram, size: int, letter_colours: bool = False, layout: str = "grid"
) -> Image.Image:
    """The decoder image: one cell per letter, ``coded -> plain``, on a light grid, or (``table``)
    the coded letters in a top row with each plain letter under its code; the coded letters dark
    and the plain ones blue, or each letter in its own colour (``letter_colours``)."""
    if layout == "table":
        from vqa_r1.data.curriculum import Table, draw_table

        pairs = [(code, cryptogram.decoder[code]) for code in cryptogram.cells]
        return draw_table(Table(pairs, "under"), size, None if letter_colours else (_INK, _PLAIN))
    n = len(cryptogram.cells)
    columns, rows = _grid_shape(n)
    image = Image.new("RGB", (size, size), (255, 255, 255))
    pen = ImageDraw.Draw(image)
    cell_w, cell_h = size / columns, size / rows
    font = _font(max(8, int(min(cell_h * 0.62, cell_w * 0.36))))
    for index, code in enumerate(cryptogram.cells):
        row, col = divmod(index, columns)
        x0, y0 = col * cell_w, row * cell_h
        pen.rectangle((x0, y0, x0 + cell_w, y0 + cell_h), outline=_GRID)
        mid_y = y0 + cell_h / 2
        plain = cryptogram.decoder[code]
        code_ink, plain_ink = (
            (LETTER_COLORS[code], LETTER_COLORS[plain]) if letter_colours else (_INK, _PLAIN)
        )
        _glyph(pen, code, (x0 + cell_w * 0.2, mid_y), font, code_ink, letter_colours)
        _glyph(pen, plain, (x0 + cell_w * 0.8, mid_y), font, plain_ink, letter_colours)
        # the arrow, drawn (not a font glyph: small built-in fonts lack one)
        ax0, ax1 = x0 + cell_w * 0.4, x0 + cell_w * 0.6
        head = max(1.5, cell_w * 0.06)
        width = max(1, round(size / 160))
        pen.line((ax0, mid_y, ax1, mid_y), fill=_ARROW, width=width)
        pen.polygon(
            [(ax1 + 1, mid_y), (ax1 - head, mid_y - head), (ax1 - head, mid_y + head)], fill=_ARROW
        )
    return image


def _glyph(
    pen: ImageDraw.ImageDraw, text: str, centre: tuple[float, float], font, fill, bold=False
) -> None:
    stroke = {"stroke_width": 1, "stroke_fill": fill} if bold else {}
    pen.text(centre, text, fill=fill, font=font, anchor="mm", **stroke)


def _messages(
    rng: random.Random,
    spec: CryptogramSpec,
    words: list[str] | None,
    count: int,
    word_count: int,
    excluded: set[str],
) -> list[str]:
    """``count`` messages of ``word_count`` words, none in ``excluded``."""
    out = []
    for _ in range(count):
        for _attempt in range(1000):
            message = " ".join(_word(rng, spec, words) for _ in range(word_count))
            if message not in excluded:
                out.append(message)
                break
        else:
            raise ValueError(
                f"cannot draw a {word_count}-word message outside the held-out ones: the word "
                "list is too small for these split sizes (use more words or smaller splits)"
            )
    return out


def _shares(n: int, parts: int) -> list[int]:
    return [n // parts + (1 if i < n % parts else 0) for i in range(parts)]


def generate_split(
    spec: CryptogramSpec, split: str, excluded: set[str] | None = None
) -> list[Cryptogram]:
    """The examples of one split, deterministic from ``spec.seed`` and the split's name; no
    message in ``excluded``. Word counts in equal shares; ``train`` in curriculum order when
    ``spec.order`` says so, every other split shuffled."""
    excluded = excluded or set()
    words = word_list(spec)
    seed = spec.test_seed if spec.test_seed is not None and split.startswith("test") else spec.seed
    rng = random.Random(f"cryptogram|{seed}|{split}")
    blocks = []
    shares = _shares(spec.splits[split], len(spec.word_counts))
    for word_count, n in zip(spec.word_counts, shares, strict=True):
        messages = _messages(rng, spec, words, n, word_count, excluded)
        blocks.append([make_cryptogram(rng, spec, m) for m in messages])
    if split == "train" and spec.order == "curriculum":
        for block in blocks:
            rng.shuffle(block)
        blocks.sort(key=lambda block: block[0].word_count if block else 0)
        return [c for block in blocks for c in block]
    examples = [c for block in blocks for c in block]
    rng.shuffle(examples)
    return examples


def generate(spec: CryptogramSpec) -> dict[str, list[Cryptogram]]:
    """Every split: the held-out ones first (test avoiding validation), then ``train`` avoiding
    them all."""
    held_out: set[str] = set()
    out: dict[str, list[Cryptogram]] = {}
    for split in sorted(spec.splits, key=lambda s: (s == "train", s != "validation", s)):
        examples = generate_split(spec, split, held_out)
        if split != "train":
            held_out |= {c.message for c in examples}
        out[split] = examples
    return {split: out[split] for split in spec.splits}


# what the question says the image is, per layout
LAYOUTS = {
    "grid": "each cell shows a coded letter, an arrow and the letter it stands for",
    "table": "each coded letter in the top row is written above the letter it stands for",
}


def problem_text(coded: str, layout: str = "grid") -> str:
    """The question for a coded message as shown (``r h q _ c t``): what the image is, the code."""
    return (
        f"The image is a decoder: {LAYOUTS[layout]}. Decode this message; {SPACE_CODE} stands "
        f"for a space between words. The coded message is: {coded}."
    )


def decoded_row(
    coded: str,
    message: str,
    image_path: str,
    mapping: dict,
    reasoning: str | None = None,
    layout: str = "grid",
) -> dict:
    """A dataset row of one coded message and its plain ``message`` (the generator's and the
    r1_vlm converter's; the columns ``open_split``, ``trainer_rows`` and the rewards read)."""
    problem = problem_text(coded, layout)
    count = len(message.split())
    return {
        "image_path": image_path,
        "caption": problem,
        "label": 1,  # not a True/False claim: the row carries its own solution
        "problem": problem,
        "solution": f"<answer> {message} </answer>",
        "reasoning": reasoning
        if reasoning is not None
        else f"<chars> {chars_form(message)} </chars>",
        "coded_message": coded,
        "decoded_message": message,
        "mapping": json.dumps(mapping, sort_keys=True, ensure_ascii=False),
        "word_count": count,
        "task": "word" if count == 1 else f"word_{count}",
    }


def reasoning_text(cryptogram: Cryptogram, worked_steps: bool = False) -> str:
    """The target reasoning: the ``<chars>`` block, or (``worked_steps``) first the decoder read
    cell by cell in the image's order (``a -> c, b -> d, ...``, as the curriculum's cell task reads
    its tables), then each coded character looked up in that reading, then ``<chars>``."""
    chars = f"<chars> {cryptogram.chars} </chars>"
    if not worked_steps:
        return chars
    decoder = cryptogram.decoder
    table = ", ".join(f"{code} -> {decoder[code]}" for code in cryptogram.cells)
    steps = ", ".join(
        SPACE_CODE if code == SPACE_CODE else f"{code} -> {decoder[code]}"
        for code in cryptogram.coded.split(" ")
    )
    return f"{table}. {steps}. {chars}"


def row(
    cryptogram: Cryptogram, image_path: str, worked_steps: bool = False, layout: str = "grid"
) -> dict:
    """The dataset row of a generated example."""
    reasoning = reasoning_text(cryptogram, worked_steps)
    return decoded_row(
        cryptogram.coded, cryptogram.message, image_path, cryptogram.decoder, reasoning, layout
    )


def spec_dict(spec: CryptogramSpec) -> dict:
    """The settings as stored with a dataset (and hashed into a cache key)."""
    out = asdict(spec)
    if out["test_seed"] is None:  # the folders made before it existed keep their key
        del out["test_seed"]
    out["word_counts"] = list(spec.word_counts)
    out["word_lengths"] = list(spec.word_lengths)
    return out


def write_dataset(
    out_dir: str | Path,
    spec: CryptogramSpec | None = None,
    carry: tuple[str, ...] = (),
    keep_existing: bool = False,
) -> Path:
    """Write the decoder PNGs and a Hugging Face DatasetDict under ``out_dir`` (in a temporary
    folder renamed into place, like the synthetic scenes), with ``dataset_info.json``;
    ``keep_existing``: a cache folder another process finished first is kept (same content)."""
    from datasets import Dataset, DatasetDict

    spec = spec or CryptogramSpec()
    out_dir = Path(out_dir)
    examples = generate(spec)
    with atomic_dir(out_dir, carry=carry, keep_existing=keep_existing) as tmp:
        splits = {}
        for split, items in examples.items():
            image_dir = tmp / "images" / split
            image_dir.mkdir(parents=True)
            rows = []
            for i, cryptogram in enumerate(items):
                rel_path = f"images/{split}/{i:06d}.png"
                draw_decoder(cryptogram, spec.image_size, spec.letter_colours, spec.layout).save(
                    tmp / rel_path, compress_level=1
                )
                image_path = str((out_dir / rel_path).resolve())
                rows.append(row(cryptogram, image_path, spec.worked_steps, spec.layout))
            splits[split] = Dataset.from_list(rows)
        DatasetDict(splits).save_to_disk(str(tmp / "hf"))
        meta = {"kind": "cryptogram", **spec_dict(spec)}
        (tmp / "dataset_info.json").write_text(json.dumps(meta, indent=2))
    return out_dir


def cryptogram_target(spec: CryptogramSpec, root: Path | None = None) -> Path:
    """The cache folder of a spec (its settings hashed), generating nothing (dry runs name it)."""
    import hashlib

    from vqa_r1.paths import cache_root

    key = json.dumps([spec_dict(spec), 2], sort_keys=True)  # 2: worked steps read the table first
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return (root or cache_root() / "data") / f"cryptogram-{digest}"


def cryptogram_dataset_dir(spec: CryptogramSpec, root: Path | None = None) -> Path:
    """The cryptogram dataset of ``spec``, generated once into its cache folder (written into a
    temporary folder and renamed into place: a folder that exists is whole)."""
    target = cryptogram_target(spec, root)
    if not (target / "hf").exists():
        write_dataset(target, spec, keep_existing=True)  # another job may write it too
    return target
