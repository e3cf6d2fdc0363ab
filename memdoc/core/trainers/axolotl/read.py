"""An Axolotl YAML (`axolotl train config.yaml`) -> the plan it runs: the inverse of `write.py`, from the same key
table (`keys.py`).

Keys, types and defaults come from Axolotl's pydantic schema (axolotl/utils/schemas/: `model.py`
base_model; `peft.py` adapter, load_in_4bit/8bit, lora_*; `training.py` micro_batch_size,
gradient_accumulation_steps, optimizer (default `adamw_torch_fused`); `config.py` sequence_len (default
512), bf16 (default "auto"), fp16, bfloat16/float16/float32, gradient_checkpointing, attn_implementation
and the legacy attention flags, deepspeed, fsdp/fsdp_config/fsdp_version, plugins) and from how Axolotl
resolves them (axolotl/utils/config/__init__.py `resolve_dtype`, `normalize_config`). Plugin keys (Liger)
are the plugin's schema: axolotl/integrations/liger/args.py. The post-training keys (`rl`, `rl_beta`, `trl:`,
`reward_model`): `rl_keys.read_axolotl_rl`.
"""

from __future__ import annotations

from memdoc.core.model.plan import ALL_LINEAR
from memdoc.core.model.stack import Stack
from memdoc.core.trainers.axolotl.keys import DETECTING, KEYS
from memdoc.core.trainers.axolotl.post_read import read_axolotl_rl
from memdoc.core.trainers.deepspeed.read import read_deepspeed_key
from memdoc.core.trainers.fsdp import fsdp_words, read_fsdp
from memdoc.core.trainers.hf.optimizers import read_optimizer
from memdoc.core.trainers.precision import trained_precision
from memdoc.core.trainers.reading import ConfigReading, KeyRead, SourceDoc
from memdoc.core.trainers.values import get_bool, get_float, get_int, get_mapping, get_str, skip_set_keys
from memdoc.errors import quoted

DEFAULT_OPTIMIZER = KEYS.row("optimizer").default
"""axolotl/utils/schemas/training.py `HyperparametersConfig.optimizer` default (Axolotl's own, whatever
the transformers version)."""
DEFAULT_SEQUENCE_LEN = KEYS.row("seq_len").default
"""axolotl/utils/schemas/config.py `sequence_len` default."""
PEFT_DEFAULT_RANK = KEYS.row("lora_rank").default
"""peft `LoraConfig.r` default, which Axolotl passes through when `lora_r` is absent."""

NOT_BILLED = {
    KEYS["load_in_8bit"]: "an 8-bit (LLM.int8) base is not billed; its weights are billed in the compute dtype",
    "lora_modules_to_save": "fully trained copies of these modules (weights, gradients, states) are not billed",
    "peft_use_dora": "DoRA's magnitude vectors and its extra weight-norm activations are not billed",
    "peft_layers_to_transform": "billed with adapters on every layer",
    "peft_layer_replication": "replicated layers are not billed",
    "lora_target_parameters": "adapters on parameters (MoE expert tensors) are not billed",
    "lora_mlp_kernel": "Axolotl's fused LoRA MLP kernel saves other activations than peft's LoRA: not billed",
    "lora_qkv_kernel": "Axolotl's fused LoRA QKV kernel saves other activations than peft's LoRA: not billed",
    "lora_o_kernel": "Axolotl's fused LoRA output kernel saves other activations than peft's LoRA: not billed",
    "relora": "ReLoRA restarts are not billed",
    "unfrozen_parameters": "billed as a full fine-tune: the frozen parameters' gradients and states are counted",
    KEYS["activation_offload"]: "activations offloaded to CPU/disk are billed on the GPU",
    "layer_offloading": "weights offloaded to the CPU between uses are billed on the GPU",
    "selective_checkpointing": "Axolotl's selective checkpointing (saved attention) is not memdoc's selective mode",
    "dynamic_checkpoint": "a dynamic checkpointing schedule is not billed",
    KEYS["tiled_mlp_on"]: "a tiled MLP (ALST) that never holds the whole MLP activation is not billed",
    "chunked_cross_entropy": "Axolotl's chunked cross-entropy is not billed (bill --loss fused-ce for a chunked loss)",
    "flash_attn_cross_entropy": "flash-attention's cross-entropy is not billed",
    "flash_attn_fuse_mlp": "flash-attention's fused MLP is not billed",
    "fp8": "FP8 training (torchao) is not billed",
    "gptq": "a GPTQ-quantised base is not billed",
    "dp_shard_size": "an FSDP shard group smaller than the world is not billed (billed over every GPU)",
}
"""Keys that change memory but that memdoc does not bill, each with the reason (recorded when turned on)."""


def looks_like(data: dict) -> bool:
    """`base_model` with `micro_batch_size`, `sequence_len` or `datasets` entries that have a `type`
    (axolotl/utils/schemas/config.py)."""
    if KEYS["model"] not in data:
        return False
    datasets = data.get(KEYS["dataset"])
    typed = isinstance(datasets, list) and any(isinstance(d, dict) and "type" in d for d in datasets)
    return bool(DETECTING & set(data)) or typed


def read_axolotl(doc: SourceDoc, stack: Stack) -> ConfigReading:
    """What an Axolotl config says about the plan; absent keys take Axolotl's defaults.

    Axolotl's defaults are its own schema's, not the libraries'; `stack` only reaches an inline DeepSpeed
    config's reader."""
    reading = ConfigReading(formats=["axolotl"])
    model = get_str(doc, KEYS["model"])
    if model is not None:
        reading.model = model
        reading.read.append(KeyRead(doc.path, KEYS["model"], "model"))
    method = _method(reading, doc)
    if method != "full":
        _lora(reading, doc)
    _precision(reading, doc, method)
    read_optimizer(reading, doc, KEYS["optimizer"], DEFAULT_OPTIMIZER)
    _batch(reading, doc)
    _checkpointing(reading, doc)
    _attention(reading, doc)
    if get_bool(doc, KEYS["packing"]):  # multipack: rows of sequence_len, attention per sample
        reading.set(doc, KEYS["packing"], "packing", True)
    _loss(reading, doc)
    _sharding(reading, doc, stack)
    _parallel(reading, doc)
    read_axolotl_rl(reading, doc)
    offloaded = _activation_offload(reading, doc)
    skip_set_keys(
        reading, doc, {k: why for k, why in NOT_BILLED.items() if not (offloaded and k == KEYS["activation_offload"])}
    )
    return reading


def _activation_offload(reading: ConfigReading, doc: SourceDoc) -> bool:
    """`activation_offloading: hidden_states` with non-reentrant checkpointing offloads the checkpointed layers'
    inputs through transformers' switch (axolotl 0.19 `core/builders/base.py` `_configure_gradient_checkpointing`
    passes it on only when `gradient_checkpointing_kwargs.use_reentrant` is false): memdoc's --activation-offload,
    what `write.py` emits. Other values (TRL's offloader, disk) are not billed."""
    kwargs = get_mapping(doc, KEYS["checkpointing_kwargs"]) or {}
    if doc.data.get(KEYS["activation_offload"]) != KEYS.row("activation_offload").write(True):
        return False
    if kwargs.get("use_reentrant") is not False:
        return False
    reading.set(doc, KEYS["activation_offload"], "activation_offload", True)
    return True


def _parallel(reading: ConfigReading, doc: SourceDoc) -> None:
    """`context_parallel_size` (`sequence_parallel_degree`, its deprecated name: `utils/schemas/validation.py`
    `check_context_parallel_size`) -> --cp with ring attention (ring-flash-attn); `tensor_parallel_size` -> --tp
    (DeepSpeed AutoTP, the same column/row split of the linears)."""
    for key in (KEYS["cp"], "sequence_parallel_degree"):
        cp = get_int(doc, key)
        if cp is not None and cp > 1:
            reading.set(doc, key, "cp", cp)
            reading.plan["cp_impl"] = "ring"
            break
    tp = get_int(doc, KEYS["tp"])
    if tp is not None and tp > 1:
        reading.set(doc, KEYS["tp"], "tp", tp)


def _method(reading: ConfigReading, doc: SourceDoc) -> str:
    """adapter + load_in_4bit -> full, lora or qlora (peft.py `LoraConfig`): `qlora`, or `lora` over a 4-bit
    base, is memdoc's qlora; no adapter trains every weight."""
    adapter = get_str(doc, KEYS["method"])
    four, eight = get_bool(doc, KEYS["load_in_4bit"]), get_bool(doc, KEYS["load_in_8bit"])
    if four and eight:
        raise doc.error(KEYS["load_in_4bit"], "load_in_4bit and load_in_8bit are both true; choose one")
    if adapter is not None and adapter.strip().lower() not in ("", "lora", "qlora"):
        reading.skip(
            doc, KEYS["method"], f"adapter {adapter!r} is not billed (memdoc bills lora and qlora); billed as full"
        )
        return "full"
    adapter = (adapter or "").strip().lower()
    if adapter == "qlora" and four is False:
        raise doc.error(
            KEYS["load_in_4bit"], "adapter: qlora needs load_in_4bit: true (Axolotl's QLoRA loads a 4-bit base)"
        )
    if adapter == "qlora" and eight:
        raise doc.error(KEYS["load_in_8bit"], "adapter: qlora trains over a 4-bit base, not load_in_8bit")
    if not adapter:
        if four:
            reading.skip(doc, KEYS["load_in_4bit"], "a 4-bit base without an adapter is not billed; billed as full")
        reading.plan["method"] = "full"
        return "full"
    method = "qlora" if adapter == "qlora" or four else "lora"
    reading.set(doc, KEYS["method"], "method", method)
    if four:
        reading.read.append(KeyRead(doc.path, KEYS["load_in_4bit"], "method"))
    return method


def _lora(reading: ConfigReading, doc: SourceDoc) -> None:
    """lora_r (peft's 8 when absent), lora_alpha, lora_dropout (schema default 0.0) and the targets:
    `lora_target_linear: true` is every linear (peft's all-linear, with or without a module list beside it);
    `lora_target_modules` a list of names (or one name; other text is a peft regex, not billed)."""
    rank = get_int(doc, KEYS["lora_rank"])
    if rank is None:
        reading.plan["lora_rank"] = PEFT_DEFAULT_RANK
    else:
        reading.set(doc, KEYS["lora_rank"], "lora_rank", rank)
    alpha = get_int(doc, KEYS["lora_alpha"])
    if alpha is not None:
        reading.set(doc, KEYS["lora_alpha"], "lora_alpha", alpha)
    dropout = get_float(doc, KEYS["lora_dropout"])
    if dropout is None:
        reading.plan["lora_dropout"] = KEYS.row("lora_dropout").default
    else:
        reading.set(doc, KEYS["lora_dropout"], "lora_dropout", dropout)
    if get_bool(doc, KEYS["lora_target_linear"]):
        reading.set(doc, KEYS["lora_target_linear"], "lora_targets", [ALL_LINEAR])
        return
    targets = doc.data.get(KEYS["lora_targets"])
    if targets is None:
        return
    if isinstance(targets, str):
        if targets.strip() == ALL_LINEAR or targets.replace("_", "").replace(".", "").isalnum():
            reading.set(doc, KEYS["lora_targets"], "lora_targets", [targets.strip()])
        else:
            reading.skip(doc, KEYS["lora_targets"], f"a regex of modules ({targets!r}) is not billed")
        return
    if not isinstance(targets, list) or not targets or not all(isinstance(t, str) and t for t in targets):
        raise doc.error(KEYS["lora_targets"], f"must be a list of module names, got {quoted(targets)}")
    reading.set(doc, KEYS["lora_targets"], "lora_targets", list(targets))


_DTYPE_KEYS = (KEYS["bf16"], KEYS["fp16"], KEYS["bfloat16"], KEYS["float16"], KEYS["float32"])


def _precision(reading: ConfigReading, doc: SourceDoc, method: str) -> None:
    """bf16/fp16 (autocast) and bfloat16/float16 (weights, no AMP) as `resolve_dtype` resolves them
    (axolotl/utils/config/__init__.py): `bf16: auto` (the default) is bf16 on a GPU that has it (every GPU
    memdoc bills bf16 on; fp16 otherwise), fp16 turns auto off; the weights are bfloat16 when bf16 or
    bfloat16, else float16 when fp16, float16 or load_in_8bit, else float32. A full fine-tune trains those
    weights (no fp32 master copy: pure bf16/fp16); a LoRA base is frozen, so bf16 autocast over it is
    memdoc's amp-bf16 (`precision.trained_precision`)."""
    bf16 = _bf16_flag(doc)
    fp16, bfloat16, float16 = (get_bool(doc, k) for k in (KEYS["fp16"], KEYS["bfloat16"], KEYS["float16"]))
    get_bool(doc, KEYS["float32"])
    if bf16 is True and fp16:
        raise doc.error(KEYS["fp16"], "bf16 and fp16 are both true; choose one")
    if bfloat16 and float16:
        raise doc.error(KEYS["float16"], "bfloat16 and float16 are both true; choose one")
    if bf16 == "auto":
        bf16 = not fp16
    if bf16 or bfloat16:
        weights = "bf16"
    elif fp16 or float16 or get_bool(doc, KEYS["load_in_8bit"]):
        weights = "fp16"
    else:
        weights = "fp32"
    autocast = bool(bf16 or fp16)
    precision = trained_precision(weights, weights if autocast else None, peft=method != "full")
    present = [k for k in _DTYPE_KEYS if doc.data.get(k) is not None]
    reading.plan["precision"] = precision
    for key in present:
        reading.set(doc, key, "precision", precision)


def _bf16_flag(doc: SourceDoc) -> bool | str:
    value = doc.data.get(KEYS["bf16"], "auto")
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        return "auto"
    return get_bool(doc, KEYS["bf16"])


def _batch(reading: ConfigReading, doc: SourceDoc) -> None:
    """micro_batch_size and gradient_accumulation_steps (schema defaults 1), sequence_len (512); a total
    `batch_size` without accumulation gives batch_size // micro_batch_size (`normalize_config`)."""
    micro = get_int(doc, KEYS["micro_batch"])
    if micro is None:
        reading.plan["micro_batch"] = 1
    else:
        reading.set(doc, KEYS["micro_batch"], "micro_batch", micro)
    accum, total = get_int(doc, KEYS["grad_accum"]), get_int(doc, KEYS["batch_size"])
    if accum is not None:
        reading.set(doc, KEYS["grad_accum"], "grad_accum", accum)
    elif total is not None:
        reading.set(doc, KEYS["batch_size"], "grad_accum", max(1, total // (micro or 1)))
    else:
        reading.plan["grad_accum"] = 1
    seq = get_int(doc, KEYS["seq_len"])
    if seq is None:
        reading.plan["seq_len"] = DEFAULT_SEQUENCE_LEN
    else:
        reading.set(doc, KEYS["seq_len"], "seq_len", seq)


def _checkpointing(reading: ConfigReading, doc: SourceDoc) -> None:
    """gradient_checkpointing: true (or 'offload'/'offload_disk', which also move the checkpointed inputs
    off the GPU: not billed) -> full; false/absent (the default) -> none. Its kwargs must be a mapping
    (`use_reentrant` does not change what is saved)."""
    get_mapping(doc, KEYS["checkpointing_kwargs"])
    value = doc.data.get(KEYS["checkpointing"])
    if isinstance(value, str) and value.strip().lower() in ("offload", "offload_disk"):
        reading.set(doc, KEYS["checkpointing"], "checkpointing", "full")
        reading.skip(doc, KEYS["checkpointing"], f"{value}: the checkpointed layer inputs are billed on the GPU")
        return
    on = get_bool(doc, KEYS["checkpointing"])
    if on is None:
        reading.plan["checkpointing"] = "none"
    else:
        reading.set(doc, KEYS["checkpointing"], "checkpointing", "full" if on else "none")


_O_S_KERNELS = (
    "sdpa",
    "flash_attention_2",
    "flash_attention_3",
    "flash_attention_4",
    "flash_attention_torch",
    "flex_attention",
    "xformers",
    "sage",
)
"""Axolotl's attention backends (axolotl/utils/schemas/enums.py `CANONICAL_ATTN_IMPLS`) that keep O(s)
state per head, as memdoc's sdpa bills; `eager` keeps the s×s probabilities."""
_LEGACY_ATTN = {
    "xformers_attention": "xformers",
    "sage_attention": "sage",
    "flex_attention": "flex_attention",
    "flash_attention": "flash_attention_2",
    "sdp_attention": "sdpa",
    "eager_attention": "eager",
}
"""enums.py `LEGACY_ATTN_FLAG_TO_IMPL`, in its priority order (config.py `normalize_attn_implementation`)."""


def _attention(reading: ConfigReading, doc: SourceDoc) -> None:
    """attn_implementation, or the first legacy flag set (both at once is Axolotl's own error); absent,
    transformers picks sdpa."""
    impl = get_str(doc, KEYS["attention"])
    flags = [k for k in _LEGACY_ATTN if get_bool(doc, k)]
    if impl and flags:
        raise doc.error(flags[0], f"attn_implementation and {flags[0]} both choose the attention; keep one")
    key = KEYS["attention"] if impl else (flags[0] if flags else None)
    if key is None:
        reading.plan["attention"] = "sdpa"
        return
    name = (impl or _LEGACY_ATTN[key]).strip()
    if name == "eager":
        reading.set(doc, key, "attention", "eager")
    elif name in _O_S_KERNELS or "flash" in name:
        reading.set(doc, key, "attention", "sdpa")
    else:
        reading.skip(doc, key, f"attention {name!r} is not billed (billed as sdpa)")


LIGER_PLUGIN = "LigerPlugin"
CCE_PLUGIN = "CutCrossEntropyPlugin"
_LIGER_ALL = (KEYS["liger_rope"], KEYS["liger_rms_norm"], KEYS["liger_glu_activation"])


def _loss(reading: ConfigReading, doc: SourceDoc) -> None:
    """`plugins` with Liger's plugin: liger_fused_linear_cross_entropy -> fused-ce, with liger_rope,
    liger_rms_norm and liger_glu_activation too -> fused (axolotl/integrations/liger/args.py; every key
    defaults to None, off). Cut cross-entropy (its plugin; `cut_cross_entropy` defaults true) is not billed."""
    plugins = doc.data.get(KEYS["loss"]) or []
    if not isinstance(plugins, list) or not all(isinstance(p, str) for p in plugins):
        raise doc.error(KEYS["loss"], f"must be a list of plugin class paths, got {quoted(plugins)}")
    liger = any(p.endswith(LIGER_PLUGIN) for p in plugins)
    flce = get_bool(doc, KEYS["liger_flce"])
    kernels = [get_bool(doc, k) for k in _LIGER_ALL]
    if liger and flce:
        loss = "fused" if all(kernels) else "fused-ce"
        reading.set(doc, KEYS["liger_flce"], "loss", loss)
        for key in _LIGER_ALL if loss == "fused" else ():
            reading.read.append(KeyRead(doc.path, key, "loss"))
    else:
        reading.plan["loss"] = "hf"
    if liger and get_bool(doc, KEYS["liger_cross_entropy"]) and not flce:
        reading.skip(doc, KEYS["liger_cross_entropy"], "Liger's (unfused) cross-entropy is not billed")
    if not liger and (flce or any(kernels)):
        reading.skip(doc, KEYS["loss"], "liger_* keys take effect only with axolotl.integrations.liger.LigerPlugin")
    if any(p.endswith(CCE_PLUGIN) for p in plugins) and get_bool(doc, KEYS["cut_cross_entropy"]) is not False:
        reading.skip(
            doc, KEYS["loss"], "cut cross-entropy (never stores the logits) is not billed; bill --loss fused-ce"
        )


def _sharding(reading: ConfigReading, doc: SourceDoc, stack: Stack) -> None:
    """`deepspeed:` (a JSON path, read next, or an inline mapping) or FSDP (`fsdp_config`, the deprecated
    `fsdp` list, `fsdp_version`; config.py) -> shard (`fsdp.read_fsdp`); both at once is a contradiction."""
    config = get_mapping(doc, KEYS["fsdp_config"]) or {}
    words = fsdp_words(doc)
    version = get_int(doc, KEYS["fsdp_version"])
    fsdp = bool(config or words or version)
    if read_deepspeed_key(reading, doc, stack) and fsdp:
        key = KEYS["fsdp_config"] if config else (KEYS["fsdp"] if words else KEYS["fsdp_version"])
        raise doc.error(key, f"deepspeed and {key} both shard the model; keep one")
    if fsdp:
        read_fsdp(reading, doc, KEYS["fsdp_config"] if config else KEYS["fsdp"], words, config)
