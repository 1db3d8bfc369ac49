"""Gradient-checkpointing input hooks on the language model only, not on the frozen vision tower.

With PEFT and gradient checkpointing, TRL (GRPOTrainer/SFTTrainer ``__init__``), PEFT
(``prepare_model_for_gradient_checkpointing``) and transformers (``gradient_checkpointing_enable``,
again after each GRPO generation) call ``enable_input_require_grads()``. In transformers 5.17 to 5.23 that
hooks the input embeddings of every ``PreTrainedModel`` inside the model, the vision tower's patch
embedding included, so the image features require grad and backward (and the checkpointed
recomputation) runs through every vision block, although nothing there trains when LoRA wraps the
language model alone and the vision side is frozen.

``hook_language_inputs_only`` replaces the method on the model instance (every caller above reaches
it through the PEFT wrappers): it hooks the language model's input embeddings and nothing else. A
model with a trainable vision parameter keeps the library's behaviour.
"""

from __future__ import annotations

import logging
from types import MethodType
from typing import Any

log = logging.getLogger(__name__)


def transformers_model(model: Any) -> Any:
    """The transformers model inside a PeftModel (the model itself otherwise)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _make_output_require_grad(module: Any, inputs: Any, output: Any) -> None:
    output.requires_grad_(True)


def vision_trains(model: Any, adapter: Any) -> bool:
    return any(
        p.requires_grad for name, p in model.named_parameters() if adapter.is_vision_module(name)
    )


def hook_language_inputs_only(model: Any, adapter: Any) -> bool:
    """Make ``enable_input_require_grads`` hook the language model's embeddings only.

    Call after the vision side is frozen and before the trainer is built. Returns False (and
    changes nothing) when a vision parameter trains: its inputs then need the library's hooks."""
    base = transformers_model(model)
    if vision_trains(base, adapter):
        log.info("a vision parameter trains: input-gradient hooks stay on the vision side too")
        return False
    library_method = type(base).enable_input_require_grads

    def enable_input_require_grads(self: Any) -> None:
        self.disable_input_require_grads()  # no hooks piling up over repeated calls
        if vision_trains(self, adapter):  # unfrozen later: the library's behaviour
            library_method(self)
            return
        embeddings = self.get_input_embeddings()
        hook = embeddings.register_forward_hook(_make_output_require_grad)
        self._require_grads_hooks = [hook]
        self._require_grads_hook = hook  # the name older callers remove

    base.enable_input_require_grads = MethodType(enable_input_require_grads, base)
    if getattr(base, "_require_grads_hooks", None):  # hooked already: redo on the language side
        base.enable_input_require_grads()
    return True
