"""`--packing`: each trainer's keys for packed, padding-free rows with flash-attention's varlen kernel.

The bill assumes no padding and attention within each document, which is flash-attention's varlen path
(transformers' `flash_attention_2` reads the documents from `position_ids` / `cu_seq_lens`). Under `sdpa`,
transformers 5.24 detects the packed rows from `position_ids` (`masking_utils.find_packed_sequence_indices`) and
builds a dense block-diagonal mask instead (`sdpa_mask`, `allow_is_causal_skip=False`): tokens² bytes per row, and
no skipped blocks. So every format that packs also writes flash-attention 2.

- TRL 1.16 (`sft_config.py`): `packing: true` (strategy "bfd", which turns `padding_free` on: `sft_trainer.py`
  `SFTTrainer.__init__`), `padding_free: true` written out; `padding_free` "is only supported with the
  FlashAttention 2 or 3".
- Axolotl 0.19: `sample_packing: true`, `pad_to_sequence_len: true` (every row `sequence_len` tokens: the billed
  shape), `attn_implementation: flash_attention_2`.
- LLaMA-Factory 0.9.5 (`hparams/data_args.py`): `neat_packing: true` (packing "without cross-attention"; it sets
  `packing` too), `packing: true`, `flash_attn: fa2`. `packing` alone attends across documents: not what is billed.
- HF `Trainer`: no key (a `DataCollatorWithFlattening` in the script); refused, naming the formats that have one.
"""

from __future__ import annotations

from memdoc.core.model.plan import TrainingPlan
from memdoc.errors import PlanError

FLASH_NOTE = (
    "packing: attn_implementation flash_attention_2 (pip install flash-attn): its varlen kernel attends within each "
    "packed document, as billed; under sdpa transformers builds a dense block-diagonal mask (tokens² bytes per row)"
)


def packing_keys(fmt: str, plan: TrainingPlan, notes: list[str]) -> dict:
    """The keys of `fmt` that pack the rows as billed (empty without `--packing`)."""
    if not plan.packing:
        return {}
    if fmt == "hf":
        raise PlanError(
            "--packing: HF TrainingArguments have no packing key (it is a data collator in your script)",
            hint="nearest formats: --format trl (packing, padding_free), axolotl (sample_packing), "
            "llamafactory (neat_packing)",
        )
    notes.append(FLASH_NOTE)
    if fmt == "trl":
        return {"packing": True, "padding_free": True, "attn_implementation": "flash_attention_2"}
    if fmt == "axolotl":
        return {"sample_packing": True, "pad_to_sequence_len": True, "attn_implementation": "flash_attention_2"}
    return {"packing": True, "neat_packing": True, "flash_attn": "fa2"}


__all__ = ["FLASH_NOTE", "packing_keys"]
