"""`--packing`: packed, padding-free rows with flash-attention's varlen kernel. This module holds the note every format
that packs writes; each trainer's keys (or refusal) are its folder's `facts.py` (`Format.packing_keys`).

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

FLASH_NOTE = (
    "packing: attn_implementation flash_attention_2 (pip install flash-attn): its varlen kernel attends within each "
    "packed document, as billed; under sdpa transformers builds a dense block-diagonal mask (tokens² bytes per row)"
)


__all__ = ["FLASH_NOTE"]
