"""The whole run, not one step: what every rank holds while it loads the model, trains, evaluates and saves.

A 10-hour run dies at its first evaluation or save as surely as at its first step. Per rank (GPU bytes) and
per node (host bytes), each part of the run is billed from what the installed libraries do (transformers
5.24, DeepSpeed 0.19.8, accelerate 1.15, torch 2.13):

* load — `PreTrainedModel.from_pretrained` before the engine shards anything (`load_part`);
* step — the training step's bill (`compute_bill`), unchanged;
* eval — HF `Trainer.evaluation_loop` under no_grad, with the logits it keeps (`eval_logits`);
* save — the checkpoint: the gathered 16-bit model (ZeRO-3) or full state dict (FSDP) on rank 0, and every
  rank's optimizer partition through `torch.save` (`save_part`).

Rank 0's extra bytes (the save's gathering, the ZeRO-3 load's state dict) are kept apart from what every
rank holds. Each part goes through the one fit rule (`verdict.fit_answer`): the step with its simulated
minimum memory, the other parts with their tensors plus the process's memory outside the allocator (no
allocator simulation for them: their fragmentation is not billed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from memdoc.core.billing.activations import estimate_activations
from memdoc.core.billing.bill import Bill
from memdoc.core.billing.verdict import FitAnswer, fit_answer
from memdoc.core.engines.layout import plan_engine
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import Checkpointing, Method, Precision, Shard, TrainingPlan

PARTS = ("load", "step", "eval", "save")
"""The parts of a run, in the order they happen."""

SAVE_SHARD_BYTES = 50 * 10**9
"""transformers 5.24 `PreTrainedModel.save_pretrained(max_shard_size="50GB")`: safetensors serialises one
shard at a time, so rank 0's host holds at most one shard's bytes while it writes."""

ZERO3_SUB_GROUP = 10**9
"""DeepSpeed 0.19.8's default `sub_group_size` (elements): ZeRO-3 keeps its fp32 partition in flat groups of
at most this many elements (`deepspeed/runtime/zero/config.py`)."""


@dataclass(frozen=True, kw_only=True)
class RunPart:
    """One part of the run: the bytes every rank holds at its peak, and rank 0's extra."""

    name: str
    gpu_bytes: int
    """Allocated GPU bytes on every rank at the part's peak."""
    host_bytes: int
    """Private host bytes of every rank's process at the part's peak."""
    rank0_gpu_bytes: int = 0
    """Rank 0's GPU bytes on top of `gpu_bytes`."""
    rank0_host_bytes: int = 0
    """Rank 0's host bytes on top of `host_bytes`."""
    how: str = ""
    """What holds the bytes, in a few words."""

    def host_per_node(self, gpus_per_node: int) -> int:
        """Host bytes of the node that runs rank 0: every local rank's, plus rank 0's extra."""
        return self.host_bytes * gpus_per_node + self.rank0_host_bytes

    def to_json(self, gpus_per_node: int) -> dict:
        return {
            "gpu_bytes": self.gpu_bytes,
            "rank0_gpu_bytes": self.rank0_gpu_bytes,
            "host_bytes": self.host_bytes,
            "rank0_host_bytes": self.rank0_host_bytes,
            "host_bytes_per_node": self.host_per_node(gpus_per_node),
            "how": self.how,
        }


@dataclass(frozen=True, kw_only=True)
class RunBill:
    """The parts of the run (`PARTS`, eval only when the plan evaluates), each with its fit per rank."""

    parts: dict[str, RunPart]
    step_min_memory_bytes: int
    """The step's simulated minimum memory (`Bill.min_memory_bytes`; without a GPU, its peak allocated plus the
    overhead: the minimum's bisection is only run against a card)."""
    overhead_bytes: int
    """The process's device memory outside the allocator (`Bill.overhead_bytes`)."""
    gpus_per_node: int
    capacity_bytes: int | None

    def min_memory_bytes(self, name: str, *, rank0: bool = False) -> int:
        """The smallest card on which part `name` runs: the step's simulated minimum, else the part's tensors
        plus the process overhead; with `rank0`, rank 0's extra on top."""
        part = self.parts[name]
        base = self.step_min_memory_bytes if name == "step" else part.gpu_bytes + self.overhead_bytes
        return base + (part.rank0_gpu_bytes if rank0 else 0)

    def fit(self, name: str, *, rank0: bool = False) -> FitAnswer | None:
        """The one fit rule on part `name` (None without a GPU)."""
        if self.capacity_bytes is None:
            return None
        return fit_answer(self.min_memory_bytes(name, rank0=rank0), self.capacity_bytes)

    def peak_part(self, *, rank0: bool = False) -> str:
        """The part whose minimum memory is largest on every rank (or on rank 0); the earliest of equals."""
        return max(self.parts, key=lambda name: self.min_memory_bytes(name, rank0=rank0))

    @property
    def host_peak_part(self) -> str:
        """The part whose host bytes on rank 0's node are largest."""
        return max(self.parts, key=lambda name: self.parts[name].host_per_node(self.gpus_per_node))

    def to_json(self) -> dict:
        """The bill's JSON `run` object (docs/run.md)."""
        out: dict = {name: self.parts[name].to_json(self.gpus_per_node) for name in PARTS if name in self.parts}
        for name, part in out.items():
            part["min_memory_bytes"] = self.min_memory_bytes(name)
            fit = self.fit(name)
            part["fit"] = None if fit is None else fit.fit.value
        out["peak_part"] = self.peak_part()
        out["peak_part_rank0"] = self.peak_part(rank0=True)
        out["host_peak_part"] = self.host_peak_part
        out["rank0_extra"] = {
            name: {"gpu_bytes": p.rank0_gpu_bytes, "host_bytes": p.rank0_host_bytes}
            for name, p in self.parts.items()
            if p.rank0_gpu_bytes or p.rank0_host_bytes
        }
        return out


def _sharded(value: int, world: int) -> int:
    return -(-value // world)


def largest_module_params(model: ModelSpec) -> int:
    """Parameters of the largest module whose own parameters are one gather: DeepSpeed gathers module by module
    (`GatheredParameters(module.parameters(recurse=False))`), so the unit is a Linear (a fused expert tensor),
    the embedding or the LM head, whichever is largest."""
    linears = [
        lin.out_features * lin.in_features * lin.copies + (lin.out_features * lin.copies if lin.bias else 0)
        for _, layout, _ in model.layer_groups
        for lin in layout.linears
    ]
    return max([model.params.embedding, model.params.head, *linears])


def _largest_layer_params(model: ModelSpec) -> int:
    """Parameters of the largest decoder layer: FSDP's wrapped unit (transformer-based auto wrap)."""
    return max(layout.params() + layout.norm_params for _, layout, _ in model.layer_groups)


def _loaded_bytes(bill: Bill) -> int:
    """The model as `from_pretrained` builds it. Full fine-tuning: every parameter in the plan's load dtype (the
    engine's fp32 master copy or accelerate's FSDP upcast come later, in `prepare`). LoRA/QLoRA: the step's
    unsharded weights, less the fp32 adapters (peft adds them after loading)."""
    if not bill.plan.is_peft:
        return bill.model.params.total * (bill.plan.precision.param_bits // 8)
    return bill.states.weights - 4 * bill.states.trainable_params


def _bytes_per_param(bill: Bill) -> float:
    """Bytes per parameter of the loaded model (`_loaded_bytes`)."""
    return _loaded_bytes(bill) / bill.model.params.total


def load_part(bill: Bill) -> RunPart:
    """Every rank's `from_pretrained`, before the engine shards (transformers 5.24 `modeling_utils.py`).

    * ZeRO-3 under `zero.Init` (`get_init_context`: transformers enters it when `is_deepspeed_zero3_enabled()`,
      i.e. the TrainingArguments holding the ZeRO-3 config exist; never for a quantised model): parameters are
      partitioned as they are built; `_load_pretrained_model` loads the checkpoint on rank 0's CPU
      (`map_location="cpu" if get_rank() == 0 else "meta"`) and `_load_state_dict_into_zero3_model` gathers one
      module at a time on the GPU (`GatheredParameters(..., modifier_rank=0)`).
    * Every other path builds the model on the meta device and loads the whole checkpoint on every rank's CPU
      (`convert_and_load_state_dict_in_model`). FSDP's `cpu_ram_efficient_loading` changes only how ranks > 0
      initialise missing keys in 5.24 (`_move_missing_keys_from_meta_to_device`, `_initialize_missing_keys`):
      every rank still reads the checkpoint. Then DeepSpeed moves the whole module to the GPU unless it was
      built under zero.Init (`deepspeed/runtime/engine.py` `_configure_distributed_model`: `self.module.to(
      self.device)`), and FSDP moves and shards one wrapped unit at a time.
    """
    model, plan = bill.model, bill.plan
    full = _loaded_bytes(bill)
    world = plan.world_size
    if plan.shard is Shard.ZERO3 and plan.low_mem_load and plan.method is not Method.QLORA:
        unit = round(largest_module_params(model) * _bytes_per_param(bill))
        return RunPart(
            name="load",
            gpu_bytes=_sharded(full, world) + unit,
            host_bytes=0,
            rank0_host_bytes=full,
            how="zero.Init: partitions built in place, one module gathered at a time; the checkpoint on rank 0's CPU",
        )
    if plan.shard.is_fsdp:
        unit = round(_largest_layer_params(model) * _bytes_per_param(bill))
        return RunPart(
            name="load",
            gpu_bytes=_sharded(full, world) + unit,
            host_bytes=full,
            how="every rank loads the checkpoint on its CPU (transformers 5.24), FSDP shards one unit at a time",
        )
    how = "every rank loads the whole model on its CPU, then moves it to its GPU"
    if plan.shard is Shard.ZERO3:
        how += " before DeepSpeed partitions it (no zero.Init" + (": quantised)" if plan.is_peft else ")")
    return RunPart(name="load", gpu_bytes=full, host_bytes=full, how=how)


@dataclass(frozen=True, kw_only=True)
class EvalLogits:
    """The logits an HF evaluation keeps, per rank (`Trainer.evaluation_loop`, transformers 5.24)."""

    steps: int
    """Evaluation steps: ceil(samples / (eval batch × world))."""
    kept_gpu_bytes: int
    """The largest gathered-logits tensor `all_preds` holds on the GPU between steps."""
    gpu_peak_bytes: int
    """At the last concatenation of a block: the previous tensor, the new step's and their concatenation."""
    host_bytes: int
    """At the last move to the host: the arrays so far, the new block (and its fp32 copy for bf16), the result."""


def eval_logits(model: ModelSpec, plan: TrainingPlan) -> EvalLogits:
    """What `evaluation_loop` keeps of the logits (transformers 5.24 `trainer.py`, `trainer_pt_utils.py`).

    Each step's logits (`prediction_step`, in the compute dtype: the LM head's output) are gathered from every
    rank (`gather_for_metrics`, an all-gather: each rank holds world × eval batch rows) and concatenated onto
    `all_preds` (`EvalLoopContainer.add` → `nested_concat` → `torch.cat`, which holds the old tensor, the new one
    and the result). Every `eval_accumulation_steps` steps (else once, at the end) they move to the host
    (`to_cpu_and_numpy` → `nested_numpify`: `.cpu()`, then float32 for bf16, which numpy lacks) and are
    concatenated onto the host arrays. None of it when the logits are not kept (`eval_keeps_logits`).
    """
    rows_per_step = plan.eval_batch * plan.world_size
    steps = math.ceil(plan.eval_samples / rows_per_step) if plan.eval_samples else 0
    if not plan.eval_keeps_logits or steps == 0:
        return EvalLogits(steps=steps, kept_gpu_bytes=0, gpu_peak_bytes=0, host_bytes=0)
    row = plan.seq_len * model.vocab_size
    logit = plan.precision.compute_bits // 8
    array = 4 if plan.precision in (Precision.BF16, Precision.AMP_BF16) else logit
    block = min(plan.eval_accumulation_steps or steps, steps)
    block_rows = min(block * rows_per_step, plan.eval_samples)
    # the last block: the rows after the previous moves (gather_for_metrics drops the last batch's padding)
    moves = math.ceil(steps / block)
    last_rows = plan.eval_samples - (moves - 1) * block * rows_per_step
    before = plan.eval_samples - last_rows
    new_block = last_rows * row * (logit + (array if array != logit else 0))
    return EvalLogits(
        steps=steps,
        kept_gpu_bytes=block_rows * row * logit,
        gpu_peak_bytes=(block_rows if block == 1 else 2 * block_rows) * row * logit,
        host_bytes=new_block + (before * row * array + plan.eval_samples * row * array if before else 0),
    )


def _resident(bill: Bill) -> int:
    """What stays on the GPU between steps: the step's weights and optimizer states (gradients are freed:
    `zero_grad(set_to_none=True)`), as the optimizer phase bills them after sharding and offload."""
    after = bill.phases["optimizer"]
    return after.weights + after.optimizer


def eval_part(bill: Bill) -> RunPart | None:
    """An evaluation under no_grad (`prediction_step`: `torch.no_grad()`): the resident states, one layer's
    activations and the loss's logits for the eval batch (nothing is saved for backward), gathered weights
    (ZeRO-3/FSDP), and the logits the loop keeps (`eval_logits`). None when the plan does not evaluate."""
    plan = bill.plan
    if not plan.eval_samples:
        return None
    acts = estimate_activations(
        bill.model, plan.replace(micro_batch=plan.eval_batch, grad_accum=1, checkpointing=Checkpointing.NONE)
    )
    forward = acts.layer_saved + acts.head_saved + acts.loss_forward_peak
    gathered = 0
    if plan.shard.shards_weights:
        gathered = 2 * round(_largest_layer_params(bill.model) * plan.precision.compute_bits / 8)
    logits = eval_logits(bill.model, plan)
    kept = "no logits kept (prediction_loss_only)" if not plan.eval_keeps_logits else "gathered logits kept"
    return RunPart(
        name="eval",
        gpu_bytes=_resident(bill) + gathered + max(logits.kept_gpu_bytes + forward, logits.gpu_peak_bytes),
        host_bytes=logits.host_bytes,
        how=f"no_grad forward of batch {plan.eval_batch}, {kept}",
    )


def save_gathers(plan: TrainingPlan) -> bool:
    """Whether the save gathers the full model on rank 0: the plan's `save_gather`, else what memdoc emits
    (`core/trainers/deepspeed/write.py`: `stage3_gather_16bit_weights_on_model_save` True;
    `core/trainers/accelerate/write.py`:
    `fsdp_state_dict_type` SHARDED_STATE_DICT). Only ZeRO-3 and FSDP shard the weights there is to gather."""
    if not plan.shard.shards_weights:
        return False
    return plan.save_gather if plan.save_gather is not None else plan.shard is Shard.ZERO3


def save_part(bill: Bill) -> RunPart:
    """A checkpoint save (HF `Trainer._save_checkpoint`), per engine.

    * ZeRO-3 gathering (`deepspeed/runtime/engine.py` `_zero3_consolidated_16bit_state_dict`): every rank
      gathers one module at a time on the GPU; rank 0 clones each into a CPU state dict: the whole 16-bit model.
    * FSDP `FULL_STATE_DICT` (accelerate: `offload_to_cpu`, `rank0_only`): one unit unsharded on every GPU; the
      full model, and with the optimizer `FSDP.optim_state_dict`'s full states, on rank 0's host.
      `SHARDED_STATE_DICT`: each rank writes its shard (bounded by its shard of weights and states).
    * DDP, ZeRO-1/2: rank 0 `save_pretrained` serialises one safetensors shard at a time (`SAVE_SHARD_BYTES`).
    * The optimizer (unless `save_only_model`): `torch.save` copies one storage at a time to the host
      (`torch/serialization.py` `_save`); DeepSpeed's largest is each rank's flat fp32 partition (ZeRO-3: one
      `sub_group_size` group); DDP's, one state tensor on rank 0, is not billed (small next to the model).
    """
    model, plan, states = bill.model, bill.plan, bill.states
    world, resident = plan.world_size, _resident(bill)
    optimizer = 0 if plan.save_only_model else states.optimizer
    opt_storage = 0
    if optimizer and plan_engine(plan).is_deepspeed:  # offload without --shard runs as ZeRO-1/2 too
        elements = _sharded(states.trainable_params, world)
        opt_storage = 4 * (min(elements, ZERO3_SUB_GROUP) if plan.shard is Shard.ZERO3 else elements)
    if plan.shard is Shard.ZERO3 and save_gathers(plan):
        unit = 2 * largest_module_params(model)
        full = 2 * model.params.total if plan.method is not Method.QLORA else states.weights
        how = "ZeRO-3 gathers the 16-bit model module by module onto rank 0's CPU"
        return RunPart(name="save", gpu_bytes=resident + unit, host_bytes=opt_storage, rank0_host_bytes=full, how=how)
    if plan.shard.is_fsdp and save_gathers(plan):
        unit = round(_largest_layer_params(model) * _bytes_per_param(bill))
        how = "FSDP FULL_STATE_DICT: the full model" + (" and optimizer states" if optimizer else "")
        return RunPart(
            name="save",
            gpu_bytes=resident + unit,
            host_bytes=0,
            rank0_host_bytes=states.weights + optimizer,
            how=how + " on rank 0's CPU",
        )
    if plan.shard.shards_weights:
        shard = _sharded(states.weights + optimizer, world)
        how = "each rank writes its own shard" + ("" if plan.shard.is_fsdp else " (no 16-bit gathering)")
        return RunPart(name="save", gpu_bytes=resident, host_bytes=max(shard, opt_storage), how=how)
    return RunPart(
        name="save",
        gpu_bytes=resident,
        host_bytes=opt_storage,
        rank0_host_bytes=min(states.weights, SAVE_SHARD_BYTES),
        how="rank 0 writes the model, one safetensors shard at a time",
    )


def run_bill(bill: Bill) -> RunBill:
    """The whole run of `bill`'s plan: load, the step, the evaluation (when the plan evaluates), the save."""
    step = RunPart(name="step", gpu_bytes=bill.peak_allocated, host_bytes=bill.host_bytes, how="the training step")
    evaluation = eval_part(bill)
    parts = {"load": load_part(bill), "step": step}
    if evaluation is not None:
        parts["eval"] = evaluation
    parts["save"] = save_part(bill)
    return RunBill(
        parts=parts,
        step_min_memory_bytes=bill.peak_allocated + bill.overhead_bytes if bill.gpu is None else bill.min_memory_bytes,
        overhead_bytes=bill.overhead_bytes,
        gpus_per_node=bill.plan.gpus_per_node,
        capacity_bytes=None if bill.gpu is None else bill.gpu.memory_bytes,
    )
