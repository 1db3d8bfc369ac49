"""A frozen VLM with trainable virtual tokens in front of its input: forward, answer logits, generation.

Prompt tuning (PEFT ``PromptTuningConfig``) prepends ``P`` learned input embeddings to every sequence.
PEFT's own forward does that by calling the model with ``inputs_embeds`` only, which is not enough
for these VLMs (measured with transformers 5.23, peft 0.21):

* Qwen2.5-VL derives its M-RoPE positions (temporal, height, width per image patch) from
  ``input_ids``, ``mm_token_type_ids`` and the image grid; given ``inputs_embeds`` alone it falls back
  to plain 1-D positions (or to ``rope_deltas`` left over from an earlier ``generate``), so every
  image token gets a wrong position.
* ``PeftModel.generate`` with the cache on fails for these models.

So the prompt tuner here owns the forward. The sequence is ``[virtual tokens][left padding][text]``
(PEFT's layout) and the positions are what the model itself would compute for a sequence whose
first ``P`` tokens were ordinary text tokens:

* Qwen2.5-VL: the model's own ``get_rope_index`` over the input ids with ``P`` text placeholders in
  front (token type 0, attention mask 1), so text and image positions are shifted exactly as they
  would be by ``P`` real prompt tokens;
* InternVL and SmolVLM (1-D RoPE): ``cumsum(attention_mask) - 1``, as ``generate`` computes them.

Image features are merged by the model: it finds the image placeholders in ``inputs_embeds`` by
their embedding (the models' documented path when ``input_ids`` is None). Generation is a greedy
loop over the model's forward with the KV cache: the first call reads the whole sequence with its
pixels, then each step feeds one new token's embedding, the next position (last + 1 on every
M-RoPE axis: text after the prompt advances all three together) and the cache. The image token is
suppressed as in ``models.generation.Generator``.

How this is checked (tests/test_prompt_tuning.py), for all three families: with the virtual tokens
masked out, the loop's text equals ``Generator`` (the model's ordinary ``generate``); and, for
Qwen2.5-VL, virtual tokens set to the embeddings of real text tokens give the same text as ordinary
``generate`` on input ids with those tokens in front, which checks the shifted M-RoPE positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vqa_r1.errors import UserError

# families whose positions this module computes (above); anything else is refused by name
SUPPORTED_FAMILIES = ("qwen2_5_vl", "internvl", "smolvlm")


def check_family(family: str) -> None:
    if family not in SUPPORTED_FAMILIES:
        raise UserError(
            f"prompt tuning: model family {family!r} is not supported: its position ids for a "
            "sequence with virtual tokens in front are not implemented (supported: "
            f"{', '.join(SUPPORTED_FAMILIES)})"
        )


@dataclass(frozen=True)
class AnswerTokens:
    """Where the True/False decision is read in the target ``<answer> True </answer>``.

    ``prefix`` is the assistant's text before the label (``<answer>``, plus any space the chat
    template puts after the assistant prefix); the answer position is the last token of
    prompt + ``prefix`` (the ``>`` closing ``<answer>``), whose logits predict the first token of
    the label. ``true_id`` and ``false_id`` are the first tokens where the tokenised True and False
    targets differ (`` True`` and `` False`` for the shipped tokenizers).
    """

    prefix: str
    true_id: int
    false_id: int


class VirtualPromptModel:
    """One loaded model (vqa_r1.models.loading.LoadedModel) run with or without virtual tokens."""

    def __init__(self, loaded: Any, instruction: str | None = None):
        check_family(loaded.adapter.family)
        self.loaded = loaded
        self.model = loaded.model
        self.processor = loaded.processor
        self.tokenizer = loaded.processor.tokenizer
        self.instruction = instruction
        self.family = loaded.adapter.family
        self.image_token_id = loaded.adapter.image_token_id(loaded.processor)
        self.pad_id = (
            self.tokenizer.pad_token_id
            if self.tokenizer.pad_token_id is not None
            else self.tokenizer.eos_token_id
        )
        self._answer: AnswerTokens | None = None

    # --- text ----------------------------------------------------------------------------
    def prompt_text(self, question: str, image: bool = True) -> str:
        messages = self.loaded.adapter.messages(question, self.instruction, image=image)
        return self.processor.apply_chat_template(messages, add_generation_prompt=True)

    def completion_text(self, question: str, target: str, image: bool = True) -> str:
        """The assistant's turn for ``target`` as the chat template writes it (end-of-turn too)."""
        messages = self.loaded.adapter.messages(question, self.instruction, image=image)
        prompt = self.processor.apply_chat_template(messages, add_generation_prompt=True)
        reply = [{"role": "assistant", "content": [{"type": "text", "text": target}]}]
        full = self.processor.apply_chat_template(messages + reply)
        if not full.startswith(prompt):
            raise UserError(
                f"{self.family}: the chat template's full conversation does not start with its "
                "generation prompt; cannot tell the completion apart"
            )
        return full[len(prompt) :]

    def completion_length(self, prompt: str, completion: str) -> int:
        """Tokens of ``completion`` after ``prompt`` (the tokenisation must split between them)."""
        head = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        whole = self.tokenizer(prompt + completion, add_special_tokens=False)["input_ids"]
        if whole[: len(head)] != head:
            raise UserError(
                f"{self.family}: tokenising prompt + completion changes the prompt's tokens "
                f"(completion {completion[:40]!r}); cannot place the loss on the completion"
            )
        return len(whole) - len(head)

    def answer_tokens(self) -> AnswerTokens:
        if self._answer is None:
            question = "Is the following statement true: the red circle is left of the blue square."
            prompt = self.prompt_text(question)
            comp = {
                label: self.completion_text(question, f"<answer> {label} </answer>")
                for label in ("True", "False")
            }
            ids = {
                label: self.tokenizer(prompt + text, add_special_tokens=False)["input_ids"]
                for label, text in comp.items()
            }
            k = 0
            while ids["True"][k] == ids["False"][k]:
                k += 1
            prefix = comp["True"][: comp["True"].index("<answer>") + len("<answer>")]
            head = self.tokenizer(prompt + prefix, add_special_tokens=False)["input_ids"]
            if head != ids["True"][:k]:
                raise UserError(
                    f"{self.family}: the True and False targets do not diverge right after "
                    f"{prefix!r}; the answer position is undefined for this tokenizer"
                )
            self._answer = AnswerTokens(prefix, ids["True"][k], ids["False"][k])
        return self._answer

    def encode(
        self, images: Sequence[Any] | None, texts: Sequence[str], on_device: bool = True
    ) -> Any:
        """Processor inputs (left padding), on the model's device unless not ``on_device`` (a
        training batch: the Trainer places it)."""
        if images is None:
            batch = self.processor(text=list(texts), return_tensors="pt", padding=True)
        else:
            batch = self.processor(
                text=list(texts),
                images=[[img] for img in images],
                return_tensors="pt",
                padding=True,
            )
        return batch.to(next(self.model.parameters()).device) if on_device else batch

    # --- model inputs --------------------------------------------------------------------
    def embed(self, ids: Any) -> Any:
        return self.model.get_input_embeddings()(ids)

    def model_inputs(self, batch: Any, prompt: Any = None, visible: bool = True) -> dict:
        """Keyword arguments of the model's forward: embeddings with ``prompt`` (P x hidden) in front,
        the attention mask (the virtual tokens masked out when not ``visible``) and positions."""
        import torch

        ids, mask = batch["input_ids"], batch["attention_mask"]
        embeds = self.embed(ids)
        types = batch.get("mm_token_type_ids")
        if self.image_token_id is not None and types is None:
            types = (ids == self.image_token_id).long()
        if prompt is not None:
            n, p = ids.shape[0], prompt.shape[0]
            front = (
                prompt.to(device=embeds.device, dtype=embeds.dtype).unsqueeze(0).expand(n, -1, -1)
            )
            embeds = torch.cat([front, embeds], dim=1)
            ids = torch.cat([ids.new_full((n, p), self.pad_id), ids], dim=1)
            mask = torch.cat([mask.new_full((n, p), int(visible)), mask], dim=1)
            if types is not None:
                types = torch.cat([types.new_zeros((n, p)), types], dim=1)
        extra = {
            k: v
            for k, v in batch.items()
            if k not in ("input_ids", "attention_mask") and not k.endswith("token_type_ids")
        }
        return {
            "inputs_embeds": embeds,
            "attention_mask": mask,
            "position_ids": self.positions(ids, mask, types, batch),
            **extra,
        }

    def positions(self, ids: Any, mask: Any, types: Any, batch: Any) -> Any:
        linear = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)
        if self.family != "qwen2_5_vl":
            return linear
        grid = batch.get("image_grid_thw")
        if grid is None:  # text only: M-RoPE degenerates to the same position on all three axes
            return linear.unsqueeze(0).expand(3, -1, -1)
        positions, _ = self.model.model.get_rope_index(
            ids, mm_token_type_ids=types, image_grid_thw=grid, attention_mask=mask
        )
        return positions

    def forward(self, batch: Any, prompt: Any = None, visible: bool = True, **kwargs: Any) -> Any:
        return self.model(**self.model_inputs(batch, prompt, visible), use_cache=False, **kwargs)

    # --- answer mode ---------------------------------------------------------------------
    def answer_inputs(self, images: Sequence[Any] | None, questions: Sequence[str]) -> Any:
        prefix = self.answer_tokens().prefix
        texts = [self.prompt_text(q, image=images is not None) + prefix for q in questions]
        return self.encode(images, texts)

    def answer_logits(
        self, images: Sequence[Any] | None, questions: Sequence[str], prompt: Any = None
    ) -> Any:
        """(batch, 2) logits of the True and False tokens at the answer position (AnswerTokens)."""
        import torch

        answer = self.answer_tokens()
        batch = self.answer_inputs(images, questions)
        with torch.inference_mode():
            logits = self.forward(batch, prompt).logits[:, -1]
        return logits[:, [answer.true_id, answer.false_id]].float()

    # --- generation ----------------------------------------------------------------------
    def generate(
        self,
        images: Sequence[Any] | None,
        questions: Sequence[str],
        prompt: Any = None,
        max_new_tokens: int = 128,
        visible: bool = True,
    ) -> list[str]:
        """Greedy answers; ``prompt=None`` is the base model (the same text as ``Generator``)."""
        texts = [self.prompt_text(q, image=images is not None) for q in questions]
        ids = self.generate_ids(self.encode(images, texts), prompt, max_new_tokens, visible)
        return self.processor.batch_decode(ids, skip_special_tokens=True)

    def _eos_ids(self) -> set[int]:
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        return set(eos if isinstance(eos, list | tuple) else [eos])

    def generate_ids(
        self, batch: Any, prompt: Any = None, max_new_tokens: int = 128, visible: bool = True
    ) -> Any:
        import torch

        inputs = self.model_inputs(batch, prompt, visible)
        mask, positions = inputs["attention_mask"], inputs["position_ids"]
        eos = torch.tensor(sorted(self._eos_ids()), device=mask.device)
        done = torch.zeros(mask.shape[0], dtype=torch.bool, device=mask.device)
        new: list[Any] = []
        with torch.inference_mode():
            out = self.model(**inputs, use_cache=True)
            for _ in range(max_new_tokens):
                logits = out.logits[:, -1].float()
                if self.image_token_id is not None:
                    logits[:, self.image_token_id] = float("-inf")
                token = logits.argmax(-1)
                token = torch.where(done, torch.full_like(token, self.pad_id), token)
                new.append(token)
                done |= torch.isin(token, eos)
                if bool(done.all()):
                    break
                mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
                positions = positions[..., -1:] + 1
                out = self.model(
                    inputs_embeds=self.embed(token[:, None]),
                    attention_mask=mask,
                    position_ids=positions,
                    past_key_values=out.past_key_values,
                    use_cache=True,
                )
        if not new:
            return batch["input_ids"][:, :0]
        return torch.stack(new, dim=1)
