"""Regenerate the key tables of docs/configs.md: per config format, the keys memdoc reads (and the plan
field each sets) and the memory-relevant keys it lists as not billed (with the reason).

python scripts/config_keys_table.py          # rewrite the tables (`make docs`)
python scripts/config_keys_table.py --check  # exit 1 if docs/configs.md is stale (tests/cli/test_config_docs.py)
python scripts/config_keys_table.py --print  # print the tables

The tables are what the real readers report (`ConfigReading.read` and `.not_billed`), not a list kept by
hand. They run over documents that exercise every key: the fixtures under tests/fixtures/user_configs/,
the files `memdoc emit` writes for a few plans, and probes: a small document of each format with one
setting added. The probes come from the readers' own tables where a reader has one (Axolotl's and
LLaMA-Factory's `NOT_BILLED`, DeepSpeed's `BUCKETS`), and from `PROBES` below for the keys whose meaning
depends on their value. The readers run on memdoc's latest known stack, so the tables don't depend on
the installed libraries.
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from typer.testing import CliRunner  # noqa: E402

from memdoc.cli import app  # noqa: E402
from memdoc.core.model.plan import TrainingPlan  # noqa: E402
from memdoc.core.model.stack import latest_known_stack  # noqa: E402
from memdoc.core.trainers.axolotl import read as axolotl  # noqa: E402
from memdoc.core.trainers.deepspeed import read as deepspeed  # noqa: E402
from memdoc.core.trainers.detect import FORMATS, detect_format, read_document  # noqa: E402
from memdoc.core.trainers.llamafactory import read as llamafactory  # noqa: E402
from memdoc.core.trainers.reading import ConfigReading, SourceDoc  # noqa: E402
from memdoc.resolve.user_config import load_source  # noqa: E402

PAGE = ROOT / "docs" / "configs.md"
BEGIN, END = "<!-- keys:begin (scripts/config_keys_table.py) -->", "<!-- keys:end -->"
FIXTURES = ROOT / "tests" / "fixtures" / "user_configs"

LIGER = "axolotl.integrations.liger.LigerPlugin"
CCE = "axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"

BASES = {
    "axolotl": {"base_model": "meta-llama/Llama-3.1-8B", "sequence_len": 2048, "adapter": "lora"},
    "llamafactory": {"model_name_or_path": "meta-llama/Llama-3.1-8B", "stage": "sft", "finetuning_type": "lora"},
    "deepspeed": {"zero_optimization": {"stage": 2}},
    "accelerate": {"distributed_type": "MULTI_GPU", "num_processes": 8},
    "trainer-args": {"model_name_or_path": "meta-llama/Llama-3.1-8B", "use_peft": True, "bf16": True},
}
"""The smallest document of each format that a probe adds settings to (a None value in a probe drops the key)."""

PROBES: dict[str, list[dict]] = {
    "axolotl": [
        {"adapter": "qlora", "load_in_4bit": True, "lora_target_linear": True},
        {"adapter": "ia3"},
        {"adapter": None, "load_in_4bit": True},
        {"lora_r": 8, "lora_alpha": 16, "lora_dropout": 0.1, "lora_target_modules": ["q_proj", "v_proj"]},
        {"lora_target_modules": "model.*_proj"},
        {"bf16": False, "fp16": True},
        {"bfloat16": True},
        {"bf16": False, "float16": True},
        {"bf16": False, "float32": True},
        {"micro_batch_size": 2, "batch_size": 32},
        {"optimizer": "paged_adamw_32bit"},
        {"optimizer": "sgd"},
        {"gradient_checkpointing": "offload"},
        {"attn_implementation": "eager"},
        {"attn_implementation": "some_kernel"},
        *({flag: True} for flag in ("flash_attention", "sdp_attention", "xformers_attention", "eager_attention")),
        {"plugins": [LIGER], **dict.fromkeys(("liger_fused_linear_cross_entropy", "liger_rope"), True)},
        {"plugins": [LIGER], "liger_rms_norm": True, "liger_glu_activation": True},
        {"plugins": [LIGER], "liger_cross_entropy": True},
        {"liger_fused_linear_cross_entropy": True},
        {"plugins": [CCE]},
        {"deepspeed": "zero3.json"},
        {"fsdp_version": 2, "fsdp_config": {"offload_params": True, "activation_checkpointing": True}},
        {"fsdp": ["shard_grad_op", "auto_wrap"]},
        {"context_parallel_size": 4, "tensor_parallel_size": 2, "deepspeed": "zero3.json"},
        {"sequence_parallel_degree": 2},
        {"rl": "dpo", "rl_beta": 0.1, "precompute_ref_log_probs": True},
        {"rl": "ebft"},
        {"reward_model": True},
        {
            "rl": "grpo",
            "trl": {
                "beta": 0.04,
                "num_generations": 8,
                "max_completion_length": 512,
                "generation_batch_size": 16,
                "num_iterations": 2,
                "use_vllm": True,
                "vllm_mode": "colocate",
                "vllm_enable_sleep_mode": True,
            },
            "vllm": {"gpu_memory_utilization": 0.5},
        },
        {"rl": "grpo", "trl": {"use_vllm": True}},
    ],
    "llamafactory": [
        {"stage": "dpo"},
        {"stage": "dpo", "pref_loss": "orpo", "pref_beta": 0.2},
        {"stage": "kto"},
        {"stage": "rm"},
        {"stage": "ppo", "max_new_tokens": 256},
        {"stage": "pt"},
        {"finetuning_type": "full"},
        {"finetuning_type": "freeze"},
        {"quantization_bit": 4, "double_quantization": False},
        {"quantization_bit": 8},
        {"lora_rank": 16, "lora_alpha": 32, "lora_dropout": 0.05, "lora_target": "q_proj,v_proj"},
        {"pure_bf16": True},
        {"fp16": True},
        {"bf16": True},
        {"optim": "paged_adamw_32bit"},
        {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 8, "cutoff_len": 4096},
        {"disable_gradient_checkpointing": True},
        {"gradient_checkpointing": False},
        {"flash_attn": "disabled"},
        {"enable_liger_kernel": True},
        {"deepspeed": "ds_z3_config.json"},
        {"fsdp": "full_shard offload auto_wrap", "fsdp_config": {"sharding_strategy": "FULL_SHARD"}},
    ],
    "deepspeed": [
        {
            "zero_optimization": {
                "stage": 3,
                "offload_optimizer": {"device": "nvme"},
                "offload_param": {"device": "nvme"},
            }
        },
        {"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}},
        {"bf16": {"enabled": True}},
        {"fp16": {"enabled": True}},
        {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 8},
        {"train_batch_size": 256},
        {"activation_checkpointing": {"partition_activations": True}},
        {"optimizer": {"type": "Lamb"}},
    ],
    "accelerate": [
        {"distributed_type": "FSDP", "num_machines": 2, "num_processes": 16, "fsdp_config": {}},
        {
            "distributed_type": "FSDP",
            "fsdp_config": {
                "fsdp_sharding_strategy": "HYBRID_SHARD",
                "fsdp_offload_params": True,
                "fsdp_activation_checkpointing": True,
            },
        },
        {"distributed_type": "FSDP", "fsdp_config": {"fsdp_version": 2, "fsdp_reshard_after_forward": False}},
        {
            "distributed_type": "FSDP",
            "fsdp_config": {"fsdp_version": 2},
            "parallelism_config": {"parallelism_config_cp_size": 4, "parallelism_config_tp_size": 2},
        },
        {"distributed_type": "FSDP", "parallelism_config": {"parallelism_config_sp_size": 2}},
        {"distributed_type": "DEEPSPEED", "deepspeed_config": {"deepspeed_config_file": "ds.json"}},
        {
            "distributed_type": "DEEPSPEED",
            "deepspeed_config": {
                "zero_stage": 3,
                "offload_optimizer_device": "cpu",
                "offload_param_device": "cpu",
                "gradient_accumulation_steps": 4,
            },
        },
        {"distributed_type": "DEEPSPEED", "deepspeed_config": {"zero_stage": 2, "offload_param_device": "cpu"}},
        {"distributed_type": "XLA"},
    ],
    "trainer-args": [
        {"use_peft": False, "dtype": "bfloat16"},
        {"use_peft": False, "bf16": None, "torch_dtype": "auto"},
        {"bf16": None, "output_dir": "out"},
        {"dtype": "float32"},
        {"dtype": "float16", "bf16": False, "fp16": True},
        {"load_in_4bit": True, "bnb_4bit_quant_type": "fp4"},
        {"load_in_8bit": True},
        {"lora_r": 8, "lora_alpha": 16, "lora_dropout": 0.1, "lora_target_modules": "all-linear"},
        {"use_dora": True, "lora_modules_to_save": ["lm_head"], "lora_target_parameters": ["experts"]},
        {"optim": "adamw_torch"},
        {"optim": "paged_adamw_32bit"},
        {"optim": "sgd"},
        {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 8},
        {"max_length": 4096, "packing": True, "padding_free": True},
        {"max_seq_length": 2048},
        {"gradient_checkpointing": True, "gradient_checkpointing_kwargs": {"every_n_layers": 2, "offload": True}},
        {"activation_checkpointing": False},
        {"use_liger_kernel": True},
        {"use_liger_kernel": True, "liger_kernel_config": {"rope": False, "rms_norm": False, "swiglu": False}},
        {"use_liger_kernel": True, "liger_kernel_config": {"fused_linear_cross_entropy": False}},
        {"attn_implementation": "flash_attention_2"},
        {"attn_implementation": "flex_attention"},
        {"deepspeed": "ds_config.json"},
        {"fsdp": "hybrid_shard offload", "fsdp_config": {"activation_checkpointing": True}},
        {"fsdp": "shard_grad_op"},
        {"fsdp": "full_shard", "fsdp_config": "fsdp.json"},
        {"beta": 0.1, "precompute_ref_log_probs": True},
        {"loss_type": ["ipo"]},
        {"desirable_weight": 1.0},
        {"center_rewards_coefficient": 0.01},
        {"normalize_advantages": False},
        {
            "num_generations": 8,
            "max_completion_length": 512,
            "generation_batch_size": 16,
            "num_iterations": 2,
            "steps_per_generation": 4,
            "use_vllm": True,
            "vllm_mode": "colocate",
            "vllm_gpu_memory_utilization": 0.4,
            "vllm_enable_sleep_mode": True,
            "reward_model_name_or_path": "rm",
        },
        {"num_generations": 8, "max_prompt_length": 512, "use_vllm": False},
    ],
}
"""Settings whose reading depends on their value (a value to bill, an unbilled value, a default)."""


def _reader_tables() -> dict[str, list[dict]]:
    """Probes from the readers' own tables of unbilled keys, each turned on."""
    return {
        "axolotl": [{key: True} for key in axolotl.NOT_BILLED],
        "llamafactory": [{key: True} for key in llamafactory.NOT_BILLED],
        "deepspeed": [{"zero_optimization": {"stage": 3, key: 1_000_000}} for key in deepspeed.BUCKETS],
    }


EMIT_PLANS = (
    "--method full --shard fsdp --gpus 8 --nodes 2 --optimizer adamw-8bit --checkpointing full --loss fused",
    "--method qlora --shard zero3 --gpus 4 --offload optimizer --lora-targets all-linear",
    "--method lora --precision amp-bf16 --shard zero2 --gpus 2 --batch 4 --accum 8 --attention eager",
)
"""Plans whose files `memdoc emit` writes (every format); the readers are the emitters' inverses."""
EMIT_MODEL = "meta-llama/Llama-3.1-8B"


def probe_docs() -> Iterator[SourceDoc]:
    tables = _reader_tables()
    for fmt, base in BASES.items():
        for number, probe in enumerate([{}, *PROBES.get(fmt, []), *tables.get(fmt, [])]):
            data = {k: v for k, v in {**base, **probe}.items() if v is not None}
            yield SourceDoc(f"probe-{fmt}-{number}", data)


def fixture_docs() -> Iterator[SourceDoc]:
    for path in sorted(FIXTURES.rglob("*")):
        if path.suffix in (".yaml", ".yml", ".json"):
            yield load_source(path)


def emitted_docs() -> Iterator[SourceDoc]:
    """The main config and side files that `memdoc emit` writes, per format and plan."""
    from memdoc.core.trainers.registry import FORMATS as EMIT_FORMATS

    with tempfile.TemporaryDirectory() as tmp:
        for number, plan in enumerate(EMIT_PLANS):
            for fmt in EMIT_FORMATS:
                out = Path(tmp) / f"{fmt}-{number}"
                args = ["emit", EMIT_MODEL, "--format", fmt, *plan.split(), "-o", str(out / "config.yaml")]
                result = CliRunner().invoke(app, args)
                if result.exit_code != 0:
                    raise SystemExit(f"memdoc {' '.join(args)} failed: {result.output}")
                for path in sorted(out.iterdir()):
                    if path.suffix in (".yaml", ".yml", ".json"):
                        yield load_source(path)


@dataclasses.dataclass
class FormatKeys:
    """What the readings of one format's documents say, key by key."""

    read: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    """key -> the plan fields it set, in the order first seen."""
    not_billed: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    """key -> its distinct reasons."""

    def add(self, doc: SourceDoc, reading: ConfigReading) -> None:
        for key_read in reading.read:
            if key_read.file == doc.path:  # an inline file is its own format's table
                fields = self.read.setdefault(key_read.key.removesuffix(" (default)"), [])
                if key_read.field not in fields:
                    fields.append(key_read.field)
        for skipped in reading.not_billed:
            if skipped.file == doc.path:
                reasons = self.not_billed.setdefault(skipped.key, [])
                if skipped.reason not in reasons:
                    reasons.append(skipped.reason)


def collect() -> dict[str, FormatKeys]:
    """Format -> its keys, over every document (the readers see each document alone, references unread)."""
    stack = latest_known_stack()
    keys = {fmt: FormatKeys() for fmt in FORMATS}
    for doc in [*fixture_docs(), *emitted_docs(), *probe_docs()]:
        keys[detect_format(doc)].add(doc, read_document(doc, stack))
    return keys


FIELD_ORDER = ["model", *(f.name for f in dataclasses.fields(TrainingPlan))]
"""Rows follow the plan's own field order (model first), then the key name."""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _field_rank(fields: list[str]) -> int:
    return min(FIELD_ORDER.index(f) if f in FIELD_ORDER else len(FIELD_ORDER) for f in fields)


def render(keys: dict[str, FormatKeys]) -> str:
    """The generated part of docs/configs.md: one section per format, a table of read keys and one of
    not-billed keys."""
    parts = []
    for fmt, found in keys.items():
        parts.append(f"### {fmt}\n\nRead ({len(found.read)} keys):\n")
        parts.append("| key | sets |\n|---|---|")
        for key in sorted(found.read, key=lambda k: (_field_rank(found.read[k]), k)):
            parts.append(f"| `{key}` | {', '.join(f'`{f}`' for f in found.read[key])} |")
        parts.append(f"\nNot billed ({len(found.not_billed)} keys), listed whenever a file sets them:\n")
        parts.append("| key | why |\n|---|---|")
        for key in sorted(found.not_billed):
            parts.append(f"| `{key}` | {_cell('; '.join(found.not_billed[key]))} |")
        parts.append("")
    return "\n".join(parts)


def main(argv: list[str]) -> int:
    tables = render(collect())
    if "--print" in argv:
        print(tables)
        return 0
    text = PAGE.read_text(encoding="utf-8")
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    new = text[:start] + "\n\n" + tables + "\n" + text[end:]
    if "--check" in argv:
        if new != text:
            print(f"{PAGE.relative_to(ROOT)} is stale: run `make docs`", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(new, encoding="utf-8")
    print(f"wrote the key tables of {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
