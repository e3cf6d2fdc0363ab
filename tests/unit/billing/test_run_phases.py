"""The whole run (`core/billing/run_phases.py`): load, step, evaluation and save, per rank.

Against hand arithmetic from the cited source lines (Llama-3.1-8B's published 8,030,261,248 parameters and its
config: vocabulary 128,256, hidden 4,096) and, for the evaluation, a real `Trainer.evaluate` on a tiny Llama on
the CPU whose kept prediction tensors are counted as the loop holds them.
"""

from __future__ import annotations

import math

import pytest
from conftest import TINY_LLAMA, bill_plan

from memdoc.core.billing.run_phases import eval_logits, largest_module_params, run_bill
from memdoc.core.model.model_spec import spec_from_config
from memdoc.core.model.plan import TrainingPlan
from memdoc.errors import PlanError

LLAMA_8B = "meta-llama/Llama-3.1-8B"
P_8B = 8_030_261_248
"""Llama-3.1-8B's parameters (Meta's model card; memdoc's catalog test builds it on the meta device)."""
EMBED_8B = 128_256 * 4_096
"""Its embedding (vocab × hidden), the largest module DeepSpeed gathers (an MLP matrix is 14,336 × 4,096)."""


def test_largest_module_is_the_embedding():
    assert largest_module_params(bill_plan(LLAMA_8B).model) == EMBED_8B


def test_zero3_load_under_zero_init_puts_the_checkpoint_on_rank0_only():
    """transformers 5.24 `_load_pretrained_model`: map_location "cpu" on rank 0, "meta" elsewhere; the partition
    plus one module gathered on every GPU (`_load_state_dict_into_zero3_model`)."""
    run = run_bill(bill_plan(LLAMA_8B, "h100-sxm", shard="zero3", gpus=8))
    load = run.parts["load"]
    assert load.rank0_host_bytes == 2 * P_8B
    assert load.host_bytes == 0
    assert load.host_per_node(8) == 2 * P_8B
    assert load.gpu_bytes == math.ceil(2 * P_8B / 8) + 2 * EMBED_8B


def test_load_without_zero_init_materialises_the_model_on_every_rank():
    """Without zero.Init every rank loads the checkpoint on its CPU, and DeepSpeed moves the module to the GPU
    (`deepspeed/runtime/engine.py` `_configure_distributed_model`): 8 ranks, 8 copies on the node."""
    run = run_bill(bill_plan(LLAMA_8B, "h100-sxm", shard="zero3", gpus=8, low_mem_load=False))
    load = run.parts["load"]
    assert (load.gpu_bytes, load.host_bytes, load.rank0_host_bytes) == (2 * P_8B, 2 * P_8B, 0)
    assert load.host_per_node(8) == 8 * 2 * P_8B
    ddp = run_bill(bill_plan(LLAMA_8B, "h100-sxm", method="lora", gpus=4)).parts["load"]
    assert ddp.host_per_node(4) == 4 * 2 * P_8B


def test_fsdp_load_reads_the_checkpoint_on_every_rank():
    """In transformers 5.24, `cpu_ram_efficient_loading` only changes how ranks > 0 initialise missing keys; every
    rank still loads the checkpoint on its CPU."""
    load = run_bill(bill_plan(LLAMA_8B, "h100-sxm", shard="fsdp", gpus=8)).parts["load"]
    assert load.host_per_node(8) == 8 * 2 * P_8B


def test_zero3_save_gathers_the_16bit_model_on_rank0():
    """`_zero3_consolidated_16bit_state_dict`: rank 0's CPU state dict holds every 16-bit parameter; every GPU one
    gathered module on top of what stays between steps; each rank's optimizer save copies one flat fp32 group
    (`sub_group_size` 1e9 elements) at a time."""
    bill = bill_plan(LLAMA_8B, "h100-sxm", shard="zero3", gpus=8)
    save = run_bill(bill).parts["save"]
    resident = bill.phases["optimizer"].weights + bill.phases["optimizer"].optimizer
    assert save.rank0_host_bytes == 2 * P_8B
    assert save.gpu_bytes == resident + 2 * EMBED_8B
    assert save.host_bytes == 4 * min(math.ceil(P_8B / 8), 10**9)
    off = run_bill(bill_plan(LLAMA_8B, "h100-sxm", shard="zero3", gpus=8, save_gather=False)).parts["save"]
    assert off.rank0_host_bytes == 0
    only_model = run_bill(bill_plan(LLAMA_8B, "h100-sxm", shard="zero3", gpus=8, save_only_model=True)).parts["save"]
    assert only_model.host_bytes == 0


def test_fsdp_full_state_dict_puts_model_and_optimizer_on_rank0():
    bill = bill_plan(LLAMA_8B, "h100-sxm", shard="fsdp", gpus=8, save_gather=True)
    save = run_bill(bill).parts["save"]
    assert save.rank0_host_bytes == bill.states.weights + bill.states.optimizer
    sharded = run_bill(bill_plan(LLAMA_8B, "h100-sxm", shard="fsdp", gpus=8)).parts["save"]
    assert sharded.rank0_host_bytes == 0
    assert sharded.host_bytes == math.ceil((bill.states.weights + bill.states.optimizer) / 8)


def test_eval_logits_by_hand():
    """100 samples, eval batch 8, one GPU, bf16: 13 steps. Kept without accumulation: all 100 rows in bf16, twice
    at the last torch.cat; with eval_accumulation_steps 1, one step's 8 rows; the host's last move holds the 96
    rows before (fp32 arrays), the 4 new rows in bf16 and fp32, and the 100-row result."""
    model = spec_from_config(TINY_LLAMA, model_id="tiny")
    row = 64 * TINY_LLAMA["vocab_size"]
    base = dict(seq_len=64, eval_samples=100, eval_batch=8, eval_keeps_logits=True)
    whole = eval_logits(model, TrainingPlan(**base))
    assert (whole.steps, whole.kept_gpu_bytes, whole.gpu_peak_bytes) == (13, 100 * row * 2, 2 * 100 * row * 2)
    assert whole.host_bytes == 100 * row * (2 + 4)
    one = eval_logits(model, TrainingPlan(**base, eval_accumulation_steps=1))
    assert (one.kept_gpu_bytes, one.gpu_peak_bytes) == (8 * row * 2, 8 * row * 2)
    assert one.host_bytes == 4 * row * (2 + 4) + 96 * row * 4 + 100 * row * 4
    assert eval_logits(model, TrainingPlan(**base | {"eval_keeps_logits": False})).kept_gpu_bytes == 0


def test_evaluation_that_keeps_logits_is_the_peak_and_does_not_fit():
    """1,000 samples of 2,048 tokens keep 1,000 × 2,048 × 128,256 bf16 logits on the GPU: 525 GB."""
    run = run_bill(
        bill_plan(LLAMA_8B, "h100-sxm", method="lora", eval_samples=1000, eval_keeps_logits=True, eval_batch=8)
    )
    assert run.parts["eval"].gpu_bytes > 1000 * 2048 * 128_256 * 2
    assert run.peak_part() == "eval"
    assert run.fit("eval").fit.value == "does not fit"
    assert run.fit("step").fit.value == "comfortable"
    assert run.to_json()["peak_part"] == "eval"


def test_no_evaluation_by_default_and_bad_values_refused():
    assert "eval" not in run_bill(bill_plan(LLAMA_8B, "h100-sxm", method="lora")).parts
    with pytest.raises(PlanError, match="--eval-samples"):
        TrainingPlan(eval_samples=-1)
    with pytest.raises(PlanError, match="--eval-batch"):
        TrainingPlan(eval_batch=0)
    with pytest.raises(PlanError, match="--save-gather"):
        TrainingPlan.from_dict({"save_gather": "maybe"})


@pytest.mark.slow
@pytest.mark.parametrize("accumulation", [None, 1, 2])
def test_real_trainer_evaluate_keeps_what_is_billed(tmp_path, monkeypatch, accumulation):
    """A real `Trainer.evaluate` (transformers 5.24, CPU, bf16 tiny Llama, compute_metrics given): the largest
    tensor `all_preds` holds between steps, and the predictions handed to compute_metrics, against the bill."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments
    from transformers.trainer_pt_utils import EvalLoopContainer

    seq, samples, batch = 16, 10, 4
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**TINY_LLAMA)).to(torch.bfloat16)
    data = [{"input_ids": torch.randint(0, 2000, (seq,)), "labels": torch.randint(0, 2000, (seq,))}] * samples
    kept, seen = [0], {}
    add = EvalLoopContainer.add

    def spy(self, tensors):
        add(self, tensors)
        if isinstance(self.tensors, torch.Tensor) and self.tensors.dim() == 3:  # the logits container
            kept[0] = max(kept[0], self.tensors.numel() * self.tensors.element_size())

    def metrics(prediction):
        seen["predictions"] = prediction.predictions
        return {}

    monkeypatch.setattr(EvalLoopContainer, "add", spy)
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_eval_batch_size=batch,
        eval_accumulation_steps=accumulation,
        report_to=[],
        use_cpu=True,
    )
    Trainer(model=model, args=args, eval_dataset=data, compute_metrics=metrics).evaluate()
    plan = TrainingPlan(
        seq_len=seq,
        eval_samples=samples,
        eval_batch=batch,
        eval_accumulation_steps=accumulation,
        eval_keeps_logits=True,
    )
    billed = eval_logits(spec_from_config(TINY_LLAMA, model_id="tiny"), plan)
    assert kept[0] == billed.kept_gpu_bytes
    assert seen["predictions"].nbytes == samples * seq * TINY_LLAMA["vocab_size"] * 4  # bf16 → float32 arrays


def test_trainer_args_run_keys_read_as_hf_parses_them(tmp_path):
    """The evaluation's and the save's TrainingArguments keys, against `HfArgumentParser(TrainingArguments)`."""
    import yaml
    from transformers import HfArgumentParser, TrainingArguments

    from memdoc.core.model.stack import Stack
    from memdoc.resolve.user_config import read_user_configs

    cfg = {
        "output_dir": "out",
        "per_device_train_batch_size": 2,
        "per_device_eval_batch_size": 4,
        "eval_accumulation_steps": 3,
        "prediction_loss_only": True,
        "save_only_model": True,
        "eval_strategy": "steps",
        "eval_steps": 100,
    }
    path = tmp_path / "args.yaml"
    path.write_text(yaml.safe_dump(cfg))
    (args,) = HfArgumentParser(TrainingArguments).parse_dict(cfg | {"use_cpu": True})
    reading = read_user_configs([path], Stack())
    assert reading.plan["eval_batch"] == args.per_device_eval_batch_size == 4
    assert reading.plan["eval_accumulation_steps"] == args.eval_accumulation_steps == 3
    assert reading.plan["save_only_model"] is args.save_only_model is True
    assert reading.plan["eval_keeps_logits"] is (not args.prediction_loss_only) is False
    assert "eval_strategy" in [n.key for n in reading.not_billed]


def test_bill_cli_names_the_part_that_peaks():
    """The flags reach the plan and the report: JSON `run`, and a line for the evaluation that does not fit."""
    import json

    from conftest import invoke

    flags = [LLAMA_8B, "--gpu", "h100-sxm", "--method", "lora", "--eval-samples", "1000", "--eval-keeps-logits"]
    data = json.loads(invoke("bill", *flags, "--json").stdout)
    assert data["plan"]["eval_samples"] == 1000 and data["plan"]["eval_keeps_logits"] is True
    assert data["run"]["peak_part"] == "eval" and data["run"]["eval"]["fit"] == "does not fit"
    assert "eval: does not fit on rank 0" in invoke("bill", *flags).stdout
    bad = invoke("bill", LLAMA_8B, "--gpu", "h100-sxm", "--eval-batch", "0")
    assert bad.exit_code == 2 and "--eval-batch must be a positive integer" in bad.stderr
