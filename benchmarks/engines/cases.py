"""The engine cases: which engine, model, precision, offload and knobs each fixture runs."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from benchmarks.engines.ds_run import ds_config

SMALL_KNOBS = {
    "reduce_bucket_size": 200_000,
    "allgather_bucket_size": 200_000,
    "stage3_prefetch_bucket_size": 100_000,
    "stage3_param_persistence_threshold": 100,
}
"""Buckets a little above the tiny models' largest tensor (the 64,000-element embedding) and a persistence
threshold that keeps only the 64-element norms unsharded, as DeepSpeed's defaults do for a 4096-wide model."""


@dataclass(frozen=True)
class Case:
    """One run: `engine` deepspeed or fsdp2 on `model` (`tiny.MODELS`)."""

    engine: str
    model: str
    variant: str
    stage: int = 0
    precision: str = "bf16"
    """DeepSpeed: the `bf16`/`fp16` block enabled; FSDP2: the MixedPrecisionPolicy param dtype or "none"."""
    offload: bool = False
    small_knobs: bool = False
    load_dtype: str = "bfloat16"
    """The dtype the model is built in (HF `from_pretrained(dtype=...)`)."""

    @property
    def name(self) -> str:
        return f"{self.engine}-{self.model}-{self.variant}"

    def ds_config(self) -> dict:
        return ds_config(
            self.stage,
            precision=self.precision,
            offload=self.offload,
            buckets=SMALL_KNOBS if self.small_knobs else None,
        )

    def describe(self) -> dict:
        out = asdict(self)
        if self.engine == "deepspeed":
            out["ds_config"] = self.ds_config()
        return out


def _cases() -> list[Case]:
    out = []
    for model in ("llama", "qwen3"):
        for stage in (1, 2, 3):
            z = f"z{stage}"
            out.append(Case("deepspeed", model, f"{z}-bf16-defaults", stage))
            out.append(Case("deepspeed", model, f"{z}-bf16", stage, small_knobs=True))
            out.append(Case("deepspeed", model, f"{z}-bf16-offload", stage, offload=True, small_knobs=True))
        out.append(Case("fsdp2", model, "fp32", precision="none", load_dtype="float32"))
        out.append(Case("fsdp2", model, "fp32-mp-bf16", precision="bf16", load_dtype="float32"))
        out.append(Case("fsdp2", model, "bf16", precision="none", load_dtype="bfloat16"))
    # No accelerate case: accelerate 1.15 sets DistributedType.FSDP only on GPU-like devices (`state.py`
    # `AcceleratorState.__init__`, the MULTI_GPU/MLU/SDAA/MUSA/NPU/XPU/HPU/NEURON branch); on the CPU it runs
    # DistributedType.NO and never shards. The fp32-mp-bf16 case is the layout its FSDP2 path makes on a GPU:
    # `utils/fsdp_utils.py` `fsdp2_prepare_model` upcasts the parameters to fp32 ("Upcast to fp32 master
    # weights") under a MixedPrecisionPolicy with param_dtype bf16.
    # No fp16 case: DeepSpeed's CPU accelerator refuses `fp16.enabled` ("Type fp16 is not supported on your
    # device", `accelerator/cpu_accelerator.py` `is_fp16_supported`: mkldnn has no fp16 on this CPU).
    return out


CASES = {c.name: c for c in _cases()}
