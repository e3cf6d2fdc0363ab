"""The plan flags, declared once as named `Annotated` aliases, and `PLAN_OPTIONS`, the table that
`memdoc.commands.options.plan_options` adds to every command taking a plan (each flag in its help panel:
"Training plan", "The whole run")."""

from pathlib import Path
from typing import Annotated, Optional

import typer

from memdoc.commands.plan_flags_post import POST_TRAINING_OPTIONS
from memdoc.commands.plan_flags_vision import VISION_OPTIONS
from memdoc.core.model.plan import (
    Allocator,
    Attention,
    Checkpointing,
    CpImpl,
    Loss,
    MasterWeights,
    Method,
    MoeExperts,
    Offload,
    OffloadTarget,
    Optimizer,
    Precision,
    Shard,
)

PLAN = "Training plan"

# ------------------------------------------------------------------------------------ plan flags
GpuOpt = Annotated[
    Optional[str],
    typer.Option(
        "--gpu",
        help="GPU name (rtx-4090, a100-80, h100-sxm, …) or memory in GiB (24, 80); "
        "N×GPU (8xh100) also sets --gpus N. \\[default: the local GPU]",
        rich_help_panel=PLAN,
    ),
]
GpusOpt = Annotated[Optional[int], typer.Option("--gpus", help="GPUs per node. \\[default: 1]", rich_help_panel=PLAN)]
NodesOpt = Annotated[Optional[int], typer.Option("--nodes", help="Nodes. \\[default: 1]", rich_help_panel=PLAN)]
MethodOpt = Annotated[
    Optional[Method], typer.Option("--method", help="What is trained. \\[default: full]", rich_help_panel=PLAN)
]
PrecisionOpt = Annotated[
    Optional[Precision],
    typer.Option(
        "--precision",
        help="bf16/fp16 = pure (weights, grads, states in 16 bit); amp-* = fp32 master weights + autocast. "
        "\\[default: bf16]",
        rich_help_panel=PLAN,
    ),
]
OptimizerOpt = Annotated[
    Optional[str],  # a str: `adamw`, the old name of adamw-foreach, is accepted but not listed
    typer.Option(
        "--optimizer",
        metavar="[" + "|".join(o.value for o in Optimizer) + "]",
        help="Optimizer. adamw-fused = torch AdamW fused=True, the trainers' default (HF optim adamw_torch_fused, "
        "torch ≥ 2.8); adamw-foreach (or adamw) = torch AdamW's foreach path, one extra state-sized temporary in "
        "the step (HF adamw_torch). \\[default: adamw-fused]",
        rich_help_panel=PLAN,
    ),
]
BatchOpt = Annotated[
    Optional[int], typer.Option("--batch", help="Micro-batch per GPU (sequences). \\[default: 1]", rich_help_panel=PLAN)
]
SeqOpt = Annotated[
    Optional[int], typer.Option("--seq", help="Sequence length (tokens). \\[default: 2048]", rich_help_panel=PLAN)
]
AccumOpt = Annotated[
    Optional[int], typer.Option("--accum", help="Gradient accumulation steps. \\[default: 1]", rich_help_panel=PLAN)
]
CheckpointingOpt = Annotated[
    Optional[Checkpointing],
    typer.Option("--checkpointing", help="Activation checkpointing. \\[default: none]", rich_help_panel=PLAN),
]
CheckpointEveryOpt = Annotated[
    Optional[int],
    typer.Option(
        "--checkpoint-every",
        help="With --checkpointing full: checkpoint every Nth decoder layer only (layers 0, N, 2N, …). "
        "\\[default: 1, every layer]",
        rich_help_panel=PLAN,
    ),
]
ActivationOffloadOpt = Annotated[
    Optional[bool],
    typer.Option(
        "--activation-offload/--no-activation-offload",
        help="With --checkpointing full: keep the checkpointed layers' inputs in pinned host memory "
        "(transformers' activation_checkpointing_kwargs offload, Axolotl's activation_offloading: hidden_states); "
        "costs a copy each way over the host link. \\[default: no]",
        rich_help_panel=PLAN,
    ),
]
PackingOpt = Annotated[
    Optional[bool],
    typer.Option(
        "--packing/--no-packing",
        help="Pack samples into rows of --seq tokens without padding (TRL packing/padding_free, Axolotl "
        "sample_packing, LLaMA-Factory neat_packing), flash-attention varlen: attention per document. "
        "\\[default: no]",
        rich_help_panel=PLAN,
    ),
]
DocumentTokensOpt = Annotated[
    Optional[int],
    typer.Option(
        "--document-tokens",
        metavar="N",
        help="With --packing: the documents' length-weighted mean length Σd²/Σd (bill --dataset prints it). "
        "\\[default: one document per row]",
        rich_help_panel=PLAN,
    ),
]
AttentionOpt = Annotated[
    Optional[Attention], typer.Option("--attention", help="Attention kernel. \\[default: sdpa]", rich_help_panel=PLAN)
]
LossOpt = Annotated[
    Optional[Loss],
    typer.Option(
        "--loss",
        help="hf = transformers' loss (full fp32 logits); fused = Liger as use_liger_kernel=True applies it: "
        "fused linear cross-entropy (logits never stored whole) + RMSNorm, RoPE, SwiGLU kernels; "
        "fused-ce = the fused cross-entropy alone; trl-fused = TRL's fused LM head (TRL ≥ 1.16 SFT/DPO/GRPO: "
        "4096 × 32768 logit tiles). \\[default: hf]",
        rich_help_panel=PLAN,
    ),
]
LoraRankOpt = Annotated[
    Optional[int], typer.Option("--lora-rank", help="LoRA rank. \\[default: 16]", rich_help_panel=PLAN)
]
LoraAlphaOpt = Annotated[
    Optional[int], typer.Option("--lora-alpha", help="LoRA alpha. \\[default: 2 × rank]", rich_help_panel=PLAN)
]
LoraDropoutOpt = Annotated[
    Optional[float],
    typer.Option(
        "--lora-dropout",
        help="LoRA dropout; > 0 keeps an extra fp32 copy of each adapted input. \\[default: 0.0, peft's default]",
        rich_help_panel=PLAN,
    ),
]
LoraTargetsOpt = Annotated[
    Optional[str],
    typer.Option(
        "--lora-targets",
        help="Comma-separated module names, or all-linear. \\[default: q_proj,v_proj]",
        rich_help_panel=PLAN,
    ),
]
KbitUpcastOpt = Annotated[
    Optional[bool],
    typer.Option(
        "--kbit-upcast/--no-kbit-upcast",
        help="QLoRA: upcast embeddings, LM head and norms to fp32 as peft's prepare_model_for_kbit_training does "
        "(+2 bytes per non-quantised parameter; fp32 tensors between the 4-bit matmuls). \\[default: no, as "
        "TRL's SFTTrainer, Axolotl and LLaMA-Factory run QLoRA]",
        rich_help_panel=PLAN,
    ),
]
ShardOpt = Annotated[
    Optional[Shard],
    typer.Option(
        "--shard",
        help="The engine that shards model states over GPUs: zero1/zero2/zero3 (DeepSpeed), fsdp (FSDP1 through "
        "accelerate), fsdp2 (fully_shard). \\[default: none]",
        rich_help_panel=PLAN,
    ),
]
MasterWeightsOpt = Annotated[
    Optional[MasterWeights],
    typer.Option(
        "--master-weights",
        help="Under DeepSpeed/FSDP: the dtype of the master weights and optimizer states. auto = the engine's "
        "default (fp32: 16 bytes/param with AdamW); bf16 = DeepSpeed's bf16_master_weights_and_grads + "
        "bf16_optimizer_states, or FSDP without fp32 upcast (a numerical risk). \\[default: auto]",
        rich_help_panel=PLAN,
    ),
]
OffloadOpt = Annotated[
    Optional[Offload],
    typer.Option("--offload", help="Move states off the GPU. \\[default: none]", rich_help_panel=PLAN),
]
OffloadToOpt = Annotated[
    Optional[OffloadTarget],
    typer.Option("--offload-to", help="Where offloaded states live. \\[default: cpu]", rich_help_panel=PLAN),
]
AllocatorOpt = Annotated[
    Optional[Allocator],
    typer.Option(
        "--allocator",
        help="CUDA caching allocator: default, or expandable (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True). "
        "\\[default: default]",
        rich_help_panel=PLAN,
    ),
]
MoeExpertsOpt = Annotated[
    Optional[MoeExperts],
    typer.Option(
        "--moe-experts",
        help="MoE experts as transformers lays them out: fused 3-D parameters (transformers 5, left 16-bit by "
        "QLoRA) or linear modules (transformers 4.x, quantised to NF4 by QLoRA). \\[default: fused]",
        rich_help_panel=PLAN,
    ),
]
InterconnectOpt = Annotated[
    Optional[str],
    typer.Option(
        "--interconnect",
        metavar="[N×]KIND",
        help="Network between nodes, for step time: ib-xdr-800, ib-ndr-400, ib-hdr-200, ib-edr-100, roce-400, "
        "roce-200, roce-100, eth-100, eth-25, eth-10; N NICs per node (8xib-ndr-400). Without N, InfiniBand and RoCE "
        "are one NIC per GPU, Ethernet one per node. auto: ib-ndr-400 per GPU on NVLink-4/5 and MI300X boards, "
        "ib-hdr-200 per GPU on other NVLink/Infinity Fabric boards, one eth-100 per node on PCIe cards. "
        "\\[default: auto]",
        rich_help_panel=PLAN,
    ),
]
CpOpt = Annotated[
    Optional[int],
    typer.Option(
        "--cp",
        help="Context parallelism: split each sequence over N GPUs (each holds seq/N of the activations); "
        "--gpus × --nodes must be a multiple of N × --tp. \\[default: 1]",
        rich_help_panel=PLAN,
    ),
]
CpImplOpt = Annotated[
    Optional[CpImpl],
    typer.Option(
        "--cp-impl",
        help="How --cp meets in attention: ulysses (DeepSpeed Ulysses / ALST all-to-all; heads must divide by N) "
        "or ring (ring attention: torch / accelerate cp_size, torchtitan). \\[default: ulysses]",
        rich_help_panel=PLAN,
    ),
]
TpOpt = Annotated[
    Optional[int],
    typer.Option(
        "--tp",
        help="Tensor parallelism inside a node: each decoder linear split over N GPUs as transformers' tp_plan "
        "splits it; with --shard, 2-D (dp × tp). \\[default: 1]",
        rich_help_panel=PLAN,
    ),
]
TiledMlpOpt = Annotated[
    Optional[int],
    typer.Option(
        "--tiled-mlp",
        help="ALST's tiled MLP (DeepSpeed TiledMLP): run each MLP over N sequence shards, keeping only its input and "
        "recomputing one shard at a time in backward (one more MLP forward); Axolotl's tiled_mlp. "
        "\\[default: 0, off]",
        rich_help_panel=PLAN,
    ),
]
RUN = "The whole run (load, evaluation, save)"
EvalSamplesOpt = Annotated[
    Optional[int],
    typer.Option("--eval-samples", help="Samples per evaluation. \\[default: 0, no evaluation]", rich_help_panel=RUN),
]
EvalBatchOpt = Annotated[
    Optional[int],
    typer.Option(
        "--eval-batch",
        help="Per-GPU evaluation batch (per_device_eval_batch_size). \\[default: 8]",
        rich_help_panel=RUN,
    ),
]
EvalAccumulationStepsOpt = Annotated[
    Optional[int],
    typer.Option(
        "--eval-accumulation-steps",
        help="Evaluation steps whose gathered logits stay on the GPU before moving to the host. "
        "\\[default: all of them, HF's None]",
        rich_help_panel=RUN,
    ),
]
EvalKeepsLogitsOpt = Annotated[
    Optional[bool],
    typer.Option(
        "--eval-keeps-logits/--no-eval-keeps-logits",
        help="The evaluation keeps the logits for compute_metrics (without it, HF keeps only the loss). "
        "\\[default: no]",
        rich_help_panel=RUN,
    ),
]
SaveGatherOpt = Annotated[
    Optional[bool],
    typer.Option(
        "--save-gather/--no-save-gather",
        help="The save gathers the full model on rank 0: ZeRO-3 stage3_gather_16bit_weights_on_model_save, FSDP "
        "FULL_STATE_DICT (no: SHARDED_STATE_DICT). \\[default: as emitted, zero3 yes, fsdp no]",
        rich_help_panel=RUN,
    ),
]
SaveOnlyModelOpt = Annotated[
    Optional[bool],
    typer.Option(
        "--save-only-model/--no-save-only-model",
        help="Checkpoints without the optimizer states (HF save_only_model). \\[default: no]",
        rich_help_panel=RUN,
    ),
]
LowMemLoadOpt = Annotated[
    Optional[bool],
    typer.Option(
        "--low-mem-load/--no-low-mem-load",
        help="ZeRO-3: build the model under deepspeed.zero.Init (the checkpoint on rank 0 only); FSDP: "
        "cpu_ram_efficient_loading. \\[default: yes]",
        rich_help_panel=RUN,
    ),
]
AllowLongOpt = Annotated[
    bool, typer.Option("--allow-long", help="Allow --seq beyond the model's context length.", rich_help_panel=PLAN)
]
RecipeOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--recipe", help="A memdoc recipe YAML (model + plan + GPU); flags override it.", rich_help_panel=PLAN
    ),
]

ConfigOpt = Annotated[
    Optional[list[Path]],
    typer.Option(
        "--config",
        help="Your own training config, repeatable: a TRL/HF TrainingArguments YAML/JSON, DeepSpeed JSON, accelerate "
        "config, Axolotl or LLaMA-Factory YAML (files it references are read too); later files override earlier "
        "ones, flags override them all, and MODEL defaults to the one it names.",
        rich_help_panel=PLAN,
    ),
]
StackOpt = Annotated[
    Optional[str],
    typer.Option(
        "--stack",
        metavar="SPEC",
        help="The library versions that will run the plan, e.g. transformers==4.57,trl==0.19,torch==2.6: their "
        "defaults fill what you leave out (transformers' optim, TRL's loss path, the MoE expert layout); libraries "
        "left out are taken at memdoc's latest known versions. \\[default: the installed versions, with --config]",
        rich_help_panel=PLAN,
    ),
]

PLAN_OPTIONS = {
    "gpu": GpuOpt,
    "gpus": GpusOpt,
    "nodes": NodesOpt,
    "method": MethodOpt,
    "precision": PrecisionOpt,
    "optimizer": OptimizerOpt,
    "batch": BatchOpt,
    "seq": SeqOpt,
    "accum": AccumOpt,
    "checkpointing": CheckpointingOpt,
    "checkpoint_every": CheckpointEveryOpt,
    "activation_offload": ActivationOffloadOpt,
    "packing": PackingOpt,
    "document_tokens": DocumentTokensOpt,
    "attention": AttentionOpt,
    "loss": LossOpt,
    "lora_rank": LoraRankOpt,
    "lora_alpha": LoraAlphaOpt,
    "lora_dropout": LoraDropoutOpt,
    "lora_targets": LoraTargetsOpt,
    "kbit_upcast": KbitUpcastOpt,
    "shard": ShardOpt,
    "master_weights": MasterWeightsOpt,
    "offload": OffloadOpt,
    "offload_to": OffloadToOpt,
    "allocator": AllocatorOpt,
    "moe_experts": MoeExpertsOpt,
    "interconnect": InterconnectOpt,
    "cp": CpOpt,
    "cp_impl": CpImplOpt,
    "tp": TpOpt,
    "tiled_mlp": TiledMlpOpt,
    "allow_long": AllowLongOpt,
    "eval_samples": EvalSamplesOpt,
    "eval_batch": EvalBatchOpt,
    "eval_accumulation_steps": EvalAccumulationStepsOpt,
    "eval_keeps_logits": EvalKeepsLogitsOpt,
    "save_gather": SaveGatherOpt,
    "save_only_model": SaveOnlyModelOpt,
    "low_mem_load": LowMemLoadOpt,
    **POST_TRAINING_OPTIONS,
    **VISION_OPTIONS,
    "recipe": RecipeOpt,
    "config": ConfigOpt,
    "stack": StackOpt,
}
