"""The plan's validation beyond its own fields: knobs that need another knob (as requested), and what a model
allows (LoRA targets, rank, context). `TrainingPlan.__post_init__` validates each field on its own."""

from __future__ import annotations

from memdoc.core.model.plan import ALL_LINEAR, Attention, Checkpointing, Method, Offload, TrainingPlan, flag_for
from memdoc.core.model.plan_post import check_post_training_request
from memdoc.core.model.plan_vision import VISION_ONLY_WITH_IMAGES, check_vision_against_model
from memdoc.errors import PlanError, did_you_mean


def check_requested_plan(plan: TrainingPlan) -> None:
    """Refuse a plan as requested (flags or recipe) whose knobs only mean something with another knob.

    Not in `__post_init__`: plans derived from a valid one (the ladder's rungs, the states' memo key
    with checkpointing reset) may keep a knob their other fields make irrelevant, and it is ignored there.
    """
    check_post_training_request(plan)
    if plan.checkpoint_every > 1 and plan.checkpointing is not Checkpointing.FULL:
        raise PlanError("--checkpoint-every N needs --checkpointing full (it checkpoints every Nth decoder layer)")
    if plan.activation_offload and plan.checkpointing is not Checkpointing.FULL:
        raise PlanError(
            "--activation-offload needs --checkpointing full: it keeps the checkpointed layers' inputs in host "
            "memory (transformers' activation_checkpointing_kwargs offload, Axolotl's activation_offloading)"
        )
    if plan.checkpointing is Checkpointing.SAC_OP and plan.method is not Method.FULL:
        raise PlanError(
            "--checkpointing sac-op is torchtitan's op-level selective checkpointing, which trains full models; "
            "with LoRA use --checkpointing selective or full"
        )
    check_packing(plan)
    if plan.kbit_upcast and plan.method is not Method.QLORA:
        raise PlanError("--kbit-upcast upcasts what a 4-bit model keeps in 16 bit: it needs --method qlora")


def check_packing(plan: TrainingPlan) -> None:
    """`--document-tokens` describes packed rows; packing runs flash-attention's varlen kernel, which eager
    attention is not (TRL 1.16 `SFTConfig.padding_free`: "only supported with the FlashAttention 2 or 3")."""
    if plan.document_tokens is not None and not plan.packing:
        raise PlanError("--document-tokens describes packed rows: it needs --packing")
    if plan.packing and plan.attention is Attention.EAGER:
        raise PlanError(
            "--packing with --attention eager: packed rows need flash-attention's varlen kernel (TRL's padding_free "
            "supports FlashAttention 2/3 only); use --attention sdpa (billed as flash-attention varlen)"
        )


def check_plan_against_model(
    plan: TrainingPlan,
    *,
    hidden_size: int,
    max_positions: int | None,
    model_id: str,
    linear_names: frozenset[str] = frozenset(),
    model_type: str = "",
) -> None:
    """Refuse plans that cannot run on this model (the model-dependent half of validation).

    `linear_names` are the model's LoRA-targetable module names (empty: not known, not checked). `model_type`
    (HF's; empty: not checked) decides whether images and video apply (`plan_vision.check_vision_against_model`).
    Every target must name one of them (peft only refuses a list matching nothing, so a typo next
    to a valid name would silently train fewer adapters than billed); a dotted target
    (`self_attn.q_proj`) is matched by its last part, as peft matches module-name suffixes.
    """
    if plan.is_peft and linear_names and ALL_LINEAR not in plan.lora_targets:
        bad = [t for t in plan.lora_targets if t.split(".")[-1] not in linear_names]
        if bad:
            hint = did_you_mean(bad[0].split(".")[-1], sorted(linear_names))
            raise PlanError(
                f"--lora-targets {bad[0]} matches no linear module of {model_id}{hint}; "
                f"its modules: {', '.join(sorted(linear_names))}, or all-linear"
            )
    if plan.is_peft and plan.lora_rank >= hidden_size:
        raise PlanError(
            f"--lora-rank {plan.lora_rank} must be smaller than the hidden size {hidden_size} of {model_id}"
        )
    if max_positions and plan.seq_len > max_positions and not plan.allow_long:
        raise PlanError(
            f"--seq {plan.seq_len} exceeds {model_id}'s context of {max_positions} tokens "
            "(pass --allow-long if you extend it with RoPE scaling)"
        )
    if model_type:
        check_vision_against_model(plan, model_type, model_id)


_NEEDS: tuple[tuple[tuple[str, ...], str, object, str], ...] = (
    (("lora_rank", "lora_alpha", "lora_dropout", "lora_targets"), "method", lambda p: p.is_peft, "--method full"),
    (("offload_to",), "offload", lambda p: p.offload is not Offload.NONE, "no --offload"),
    (("interconnect",), "nodes", lambda p: p.nodes > 1, "one node (it is the network between nodes)"),
    (
        ("eval_batch", "eval_accumulation_steps", "eval_keeps_logits"),
        "eval_samples",
        lambda p: p.eval_samples > 0,
        "no evaluation (--eval-samples 0)",
    ),
    (("save_gather", "low_mem_load"), "shard", lambda p: p.shard.shards_weights, "no --shard zero3/fsdp/fsdp2"),
    (("beta",), "task", lambda p: p.task.may_use_reference, "a task without a reference term (sft, orpo, simpo, rm)"),
    (
        ("num_generations", "completion_len", "generation_batch", "num_iterations"),
        "task",
        lambda p: p.task.is_online,
        "a task that does not generate (only grpo, rloo and ppo do)",
    ),
    (("prompt_len",), "task", lambda p: not p.task.is_online, "an online task (its prompt is --seq)"),
    (("vllm_memory", "vllm_sleep"), "vllm", lambda p: p.vllm.value == "colocate", "no --vllm colocate"),
    (VISION_ONLY_WITH_IMAGES, "images_per_sample", lambda p: p.has_vision, "no images or video (the default)"),
)
"""(flags, the field they depend on, when they apply, why not): the flags that mean nothing without another."""


def inapplicable_flags(plan: TrainingPlan, given: frozenset[str], searched: frozenset[str] = frozenset()) -> list[str]:
    """One note per plan field in `given` that does not apply to `plan` (ignored, said rather than silent).

    `searched`: fields a search may still change (`memdoc plan`'s knobs); a flag depending on one the user left
    free may apply to a plan the search finds, so it is not noted. `plan.save_gather` and the FSDP/ZeRO-3
    loading switches are read only under weight sharding (`core/engines/`); the LoRA numbers only by peft plans."""
    notes = []
    for fields, depends_on, applies, why in _NEEDS:
        if depends_on in searched and depends_on not in given or applies(plan):
            continue
        notes += [f"{flag_for(name)} does not apply with {why}: ignored" for name in fields if name in given]
    return notes
