"""The chat template of a model family, by each trainer's own name for it.

A fine-tune trains the prompt format the template writes, so `template: default` (LLaMA-Factory)
is a valid value that silently trains the wrong format. The names come from the trainers' own
registries: LLaMA-Factory `llamafactory/data/template.py` (`register_template(name=...)`, and the
per-model choice in `llamafactory/extras/constants.py` `DEFAULT_TEMPLATE`, which the tests check
this table against), Axolotl `axolotl/utils/schemas/enums.py` `ChatTemplate`. A base checkpoint
has no chat format of its own; it gets its family's instruct template, which is what it is
usually fine-tuned into. Families without a registered template return None.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class ChatTemplate:
    llamafactory: str
    """LLaMA-Factory `template`."""
    axolotl: str
    """Axolotl `chat_template`; `tokenizer_default` where Axolotl has no built-in for the family."""


TABLE: tuple[tuple[str, ChatTemplate], ...] = (
    # first match wins; patterns match the start of the lower-cased repo name (the id after the org)
    (r"^(meta-)?llama-2", ChatTemplate("llama2", "tokenizer_default")),
    (r"^(meta-)?llama-3(?!.*vision)", ChatTemplate("llama3", "llama3")),
    (r"^qwen3-.*instruct-2507", ChatTemplate("qwen3_nothink", "qwen3")),
    (r"^qwen3-(?!vl|omni|next|coder)", ChatTemplate("qwen3", "qwen3")),
    (r"^qwen2(\.5)?-(?!vl|audio|omni|math|coder)", ChatTemplate("qwen", "qwen_25")),
    (r"^mistral-nemo", ChatTemplate("ministral", "mistral_v3_tekken")),
    (r"^(mistral-7b-(instruct-)?v0\.3|mixtral-8x22b)", ChatTemplate("mistral", "mistral_v2v3")),
    (r"^(mistral-7b|mixtral-8x7b)", ChatTemplate("mistral", "mistral_v1")),
    (r"^gemma-2-", ChatTemplate("gemma2", "gemma")),
    (r"^gemma-(1\.1-)?\d+b", ChatTemplate("gemma", "gemma")),
    (r"^phi-3-small", ChatTemplate("phi_small", "phi_3")),
    (r"^phi-3-", ChatTemplate("phi", "phi_3")),
    (r"^deepseek-v2-lite", ChatTemplate("deepseek", "deepseek_v2")),
    (r"^falcon-7b", ChatTemplate("falcon", "tokenizer_default")),
    # vision-language models (issue 26): the template carries LLaMA-Factory's mm_plugin and picks Axolotl's
    # processing strategy (`axolotl/processing_strategies.py` `get_processing_strategy`); Axolotl has no Qwen3-VL
    # template, so the processor's own is used
    (r"^(qwen2(\.5)?-vl|qvq)", ChatTemplate("qwen2_vl", "qwen2_vl")),
    (r"^qwen3-vl-.*thinking", ChatTemplate("qwen3_vl", "tokenizer_default")),
    (r"^qwen3-vl-", ChatTemplate("qwen3_vl_nothink", "tokenizer_default")),
    (r"^gemma-3-(4|12|27)b", ChatTemplate("gemma3", "gemma3")),
    (r"^llama-3\.2-\d+b-vision", ChatTemplate("mllama", "llama3_2_vision")),
    (r"^llava-1\.5-", ChatTemplate("llava", "llava")),
    (r"^pixtral-", ChatTemplate("pixtral", "pixtral")),
    (r"^mistral-small-3\.[12]-", ChatTemplate("mistral_small", "mistral_v7_tekken")),
)


def chat_template(model_id: str) -> ChatTemplate | None:
    """The family's chat template for `model_id` (a Hub id, or a local path naming the model), or None."""
    name = model_id.rstrip("/").rsplit("/", 1)[-1].lower()
    for pattern, template in TABLE:
        if re.match(pattern, name):
            return template
    return None
