"""Tiny, randomly initialised models of each family, built offline and cached on disk.

Why: tests, CI and the CPU demo must exercise the real model classes, processors, chat templates and
LoRA wiring of Qwen2.5-VL, Qwen3-VL, InternVL and SmolVLM without downloading anything. A byte-level BPE
tokenizer is trained with `tokenizers` on text shaped like our prompts; each family gets its own
special tokens and chat template; the result is saved with `save_pretrained` and loaded back through
the same `AutoProcessor` / `AutoModelForImageTextToText` path as a hub checkpoint.

Builds are deterministic from the seed and the size, and written atomically into the cache, so
concurrent jobs on a shared filesystem (or the ranks of one job) never see half a model, and the
first complete build is the one every process loads.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from vqa_r1.data.curriculum import GENERAL_INSTRUCTION
from vqa_r1.data.prompts import REASONING_INSTRUCTION
from vqa_r1.data.synthetic import COLORS, RELATIONS, SHAPES
from vqa_r1.io import atomic_dir
from vqa_r1.paths import cache_root

BUILD_VERSION = 2  # bump when a builder changes, so stale caches are not reused


@dataclass(frozen=True)
class TinySize:
    """Dimensions of a tiny model. The defaults train at a few steps per second on one CPU core."""

    hidden: int = 128
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 256
    vision_hidden: int = 64
    vision_layers: int = 2
    vocab: int = 1024


def _tiny_key(family: str, seed: int, size: TinySize | None) -> str:
    size = size or TinySize()
    return json.dumps({"family": family, "seed": seed, "v": BUILD_VERSION, **asdict(size)})


def tiny_model_path(family: str, seed: int = 0, size: TinySize | None = None) -> Path:
    """Where the tiny model of ``family`` is (or will be) built; nothing is built."""
    digest = hashlib.sha256(_tiny_key(family, seed, size).encode()).hexdigest()[:12]
    return cache_root() / "tiny" / f"{family}-{digest}"


def tiny_model_dir(family: str, seed: int = 0, size: TinySize | None = None) -> Path:
    """Build (once) and return the folder of a tiny model of ``family``."""
    size = size or TinySize()
    key = _tiny_key(family, seed, size)
    target = tiny_model_path(family, seed, size)
    if (target / "config.json").exists():
        return target
    # every rank of a job (and every job on a shared filesystem) may build the same model at once:
    # the first complete build stays, so none is swapped under a process loading it
    with atomic_dir(target, keep_existing=True) as tmp:
        BUILDERS[family](tmp, seed, size)
        (tmp / "tiny_build.json").write_text(key)
    return target


# ----------------------------------------------------------------------------- tokenizer


def _corpus(seed: int) -> list[str]:
    """Text shaped like our prompts and answers, so the BPE merges fit the task vocabulary.

    Frozen: the shipped pretrained models start from builds of exactly this text (its grid-fact
    lines come from an earlier curriculum), and their cards' commands reproduce them only while it
    stays byte-identical. A change here needs a new BUILD_VERSION and new pretrained models.
    """
    import random

    rng = random.Random(seed)
    names = [f"{c} {s}" for c in COLORS for s in SHAPES]
    lines = [
        REASONING_INSTRUCTION,
        GENERAL_INSTRUCTION,
        "Yes No True False yes no true false Answer: answer",
    ]
    for _ in range(3000):
        a, b = rng.sample(names, 2)
        rel = rng.choice(list(RELATIONS))
        label = rng.choice(["True", "False"])
        lines.append(f"Is the following statement true: The {a} is {rel} the {b}.")
        lines.append(f"<think> The {a} is {rel} the {b}. </think> <answer> {label} </answer>")
        lines.append(f"The image shows a {a} and a {b}.\nAnswer: {label}")
        xy = [rng.randrange(10) for _ in range(4)]
        facts = f"{a}: x {xy[0]}, y {xy[1]}; {b}: x {xy[2]}, y {xy[3]}"
        lines.append(f"Facts: {facts}. Where are the {a} and the {b}? Where is the {b}?")
        lines.append(f"<think> {facts} </think> <answer> x {xy[0]}, y {xy[1]} </answer>")
        lines.append(f"What colour is the {b.split()[1]}? How many objects are there? {xy[0]}")
    lines += ["system user assistant You are a helpful assistant. Describe the image."] * 20
    return lines


def _train_tokenizer(
    seed: int, vocab: int, special: list[str], extra_special: dict | None = None, **named
):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(seed), trainer=trainer)
    kwargs = dict(tokenizer_object=tok, **named)
    if extra_special:
        kwargs["extra_special_tokens"] = extra_special
    fast = PreTrainedTokenizerFast(**kwargs)
    fast.add_special_tokens(
        {"additional_special_tokens": special}, replace_extra_special_tokens=False
    )
    return fast


def _seed_all(seed: int) -> None:
    import torch

    torch.manual_seed(seed)


# ----------------------------------------------------------------------------- families

QWEN_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image' in part %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


QWEN_SPECIAL = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]


def _qwen_tokenizer(seed: int, size: TinySize) -> tuple:
    """The tokenizer both Qwen families share (their chat and vision tokens), and those ids."""
    tok = _train_tokenizer(
        seed, size.vocab, QWEN_SPECIAL, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    tok.chat_template = QWEN_TEMPLATE
    return tok, {t: tok.convert_tokens_to_ids(t) for t in QWEN_SPECIAL}


def _qwen_text_config(
    vocab: int, ids: dict, size: TinySize, sections: list[int], interleaved: bool = False, **extra
) -> dict:
    """The language model both Qwen families share at a tiny size: M-RoPE over (t, h, w) sections
    (Qwen3-VL interleaves them), tied embeddings, the chat tokens as end and padding."""
    rope = {"rope_type": "default", "mrope_section": sections, "rope_theta": 10000.0}
    if interleaved:
        rope["mrope_interleaved"] = True
    return dict(
        vocab_size=vocab,
        hidden_size=size.hidden,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads,
        intermediate_size=size.intermediate,
        max_position_embeddings=2048,
        rope_parameters=rope,
        tie_word_embeddings=True,
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
        bos_token_id=ids["<|endoftext|>"],
        **extra,
    )


def build_qwen2_5_vl(out: Path, seed: int, size: TinySize) -> None:
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2_5_VLProcessor,
        Qwen2VLImageProcessor,
    )
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    tok, ids = _qwen_tokenizer(seed, size)
    head_dim = size.hidden // size.heads
    half = head_dim // 2
    sections = [half - 2 * (half // 3), half // 3, half // 3]
    _seed_all(seed)
    config = Qwen2_5_VLConfig(
        text_config=_qwen_text_config(len(tok), ids, size, sections),
        vision_config=dict(
            depth=size.vision_layers,
            hidden_size=size.vision_hidden,
            num_heads=4,
            intermediate_size=2 * size.vision_hidden,
            out_hidden_size=size.hidden,
            window_size=56,
            fullatt_block_indexes=[size.vision_layers - 1],
            patch_size=14,
            spatial_merge_size=2,
            temporal_patch_size=2,
        ),
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True,
    )
    model = Qwen2_5_VLForConditionalGeneration(config)
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    image_processor = Qwen2VLImageProcessor(min_pixels=28 * 28 * 4, max_pixels=28 * 28 * 16)
    processor = Qwen2_5_VLProcessor(
        image_processor=image_processor,
        tokenizer=tok,
        video_processor=Qwen2VLVideoProcessor(),
        chat_template=QWEN_TEMPLATE,
    )
    model.save_pretrained(out)
    processor.save_pretrained(out)


INTERNVL_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image' in part %}<IMG_CONTEXT>\n"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_internvl(out: Path, seed: int, size: TinySize) -> None:
    from transformers import (
        GotOcr2ImageProcessor,
        InternVLConfig,
        InternVLForConditionalGeneration,
        InternVLProcessor,
    )
    from transformers.models.internvl.video_processing_internvl import InternVLVideoProcessor

    special = [
        "<|endoftext|>",
        "<|im_start|>",
        "<|im_end|>",
        "<img>",
        "</img>",
        "<IMG_CONTEXT>",
        "<video>",
    ]
    tok = _train_tokenizer(
        seed,
        size.vocab,
        special,
        extra_special={
            "start_image_token": "<img>",
            "end_image_token": "</img>",
            "context_image_token": "<IMG_CONTEXT>",
            "video_token": "<video>",
        },
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    tok.chat_template = INTERNVL_TEMPLATE
    ids = {t: tok.convert_tokens_to_ids(t) for t in special}
    image_size = 112
    patch = 14
    seq_len = int((image_size // patch) ** 2 * 0.25)
    _seed_all(seed)
    config = InternVLConfig(
        vision_config=dict(
            hidden_size=size.vision_hidden,
            num_hidden_layers=size.vision_layers,
            num_attention_heads=4,
            intermediate_size=2 * size.vision_hidden,
            image_size=[image_size, image_size],
            patch_size=[patch, patch],
        ),
        text_config=dict(
            model_type="qwen2",
            vocab_size=len(tok),
            hidden_size=size.hidden,
            num_hidden_layers=size.layers,
            num_attention_heads=size.heads,
            num_key_value_heads=size.kv_heads,
            intermediate_size=size.intermediate,
            max_position_embeddings=2048,
            tie_word_embeddings=True,
            eos_token_id=ids["<|im_end|>"],
            pad_token_id=ids["<|endoftext|>"],
        ),
        image_token_id=ids["<IMG_CONTEXT>"],
        image_seq_length=seq_len,
        tie_word_embeddings=True,
    )
    model = InternVLForConditionalGeneration(config)
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    image_processor = GotOcr2ImageProcessor(
        size={"height": image_size, "width": image_size},
        crop_to_patches=False,
        max_patches=1,
    )
    processor = InternVLProcessor(
        image_processor=image_processor,
        tokenizer=tok,
        video_processor=InternVLVideoProcessor(size={"height": image_size, "width": image_size}),
        image_seq_length=seq_len,
        chat_template=INTERNVL_TEMPLATE,
    )
    model.save_pretrained(out)
    processor.save_pretrained(out)


SMOL_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{ message['role'] | capitalize }}"
    "{% if message['content'] is string %}: {{ message['content'] }}"
    "{% else %}{% if message['content'][0]['type'] == 'image' %}:{% else %}: {% endif %}"
    "{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image' in part %}<image>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}"
)


def build_smolvlm(out: Path, seed: int, size: TinySize) -> None:
    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3ImageProcessor,
        Idefics3Processor,
    )

    grid = [f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)]
    special = [
        "<|endoftext|>",
        "<|im_start|>",
        "<end_of_utterance>",
        "<image>",
        "<fake_token_around_image>",
        "<global-img>",
        *grid,
    ]
    tok = _train_tokenizer(
        seed,
        size.vocab,
        special,
        eos_token="<end_of_utterance>",
        pad_token="<|endoftext|>",
        bos_token="<|im_start|>",
    )
    tok.chat_template = SMOL_TEMPLATE
    ids = {t: tok.convert_tokens_to_ids(t) for t in special}
    image_size = 112
    patch = 14
    scale = 2
    seq_len = (image_size // patch) ** 2 // (scale * scale)
    _seed_all(seed)
    config = Idefics3Config(
        vision_config=dict(
            hidden_size=size.vision_hidden,
            intermediate_size=2 * size.vision_hidden,
            num_hidden_layers=size.vision_layers,
            num_attention_heads=4,
            image_size=image_size,
            patch_size=patch,
        ),
        text_config=dict(
            model_type="llama",
            vocab_size=len(tok),
            hidden_size=size.hidden,
            num_hidden_layers=size.layers,
            num_attention_heads=size.heads,
            num_key_value_heads=size.kv_heads,
            intermediate_size=size.intermediate,
            max_position_embeddings=2048,
            tie_word_embeddings=True,
            eos_token_id=ids["<end_of_utterance>"],
            pad_token_id=ids["<|endoftext|>"],
            bos_token_id=ids["<|im_start|>"],
        ),
        image_token_id=ids["<image>"],
        scale_factor=scale,
        tie_word_embeddings=True,
    )
    model = Idefics3ForConditionalGeneration(config)
    model.generation_config.eos_token_id = ids["<end_of_utterance>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    image_processor = Idefics3ImageProcessor(
        size={"longest_edge": image_size},
        max_image_size={"longest_edge": image_size},
        do_image_splitting=False,
    )
    processor = Idefics3Processor(
        image_processor=image_processor,
        tokenizer=tok,
        image_seq_len=seq_len,
        chat_template=SMOL_TEMPLATE,
    )
    model.save_pretrained(out)
    processor.save_pretrained(out)


def build_qwen3_vl(out: Path, seed: int, size: TinySize) -> None:
    """Qwen3-VL: Qwen2.5-VL's chat tokens, a Qwen3 language model (q/k norms, interleaved M-RoPE)
    and a vision tower of 16 px patches with DeepStack features fed into the first decoder layers.
    The image processor is Qwen2-VL's with the checkpoints' patch 16 and mean/std 0.5, and a
    pixel budget that turns an 84 px scene into 3 x 3 merged patches (9 image tokens)."""
    from transformers import (
        Qwen2VLImageProcessor,
        Qwen3VLConfig,
        Qwen3VLForConditionalGeneration,
        Qwen3VLProcessor,
    )
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    tok, ids = _qwen_tokenizer(seed, size)
    head_dim = size.hidden // size.heads
    half = head_dim // 2
    # interleaved M-RoPE: the height and width sections take every third frequency from 1 and 2
    sections = [half - 2 * (half // 3), half // 3, half // 3]
    patch, merge = 16, 2
    _seed_all(seed)
    config = Qwen3VLConfig(
        text_config=_qwen_text_config(
            len(tok), ids, size, sections, interleaved=True, head_dim=head_dim
        ),
        vision_config=dict(
            depth=size.vision_layers,
            hidden_size=size.vision_hidden,
            num_heads=4,
            intermediate_size=2 * size.vision_hidden,
            out_hidden_size=size.hidden,
            patch_size=patch,
            spatial_merge_size=merge,
            temporal_patch_size=2,
            num_position_embeddings=36,  # a 6 x 6 grid of learned positions, interpolated
            deepstack_visual_indexes=[0],
        ),
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True,
    )
    model = Qwen3VLForConditionalGeneration(config)
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    factor = patch * merge
    image_processor = Qwen2VLImageProcessor(
        patch_size=patch,
        merge_size=merge,
        temporal_patch_size=2,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
        min_pixels=factor * factor * 4,
        max_pixels=factor * factor * 16,
    )
    processor = Qwen3VLProcessor(
        image_processor=image_processor,
        tokenizer=tok,
        video_processor=Qwen3VLVideoProcessor(patch_size=patch, merge_size=merge),
        chat_template=QWEN_TEMPLATE,
    )
    model.save_pretrained(out)
    processor.save_pretrained(out)


BUILDERS = {
    "qwen2_5_vl": build_qwen2_5_vl,
    "internvl": build_internvl,
    "smolvlm": build_smolvlm,
    "qwen3_vl": build_qwen3_vl,
}
