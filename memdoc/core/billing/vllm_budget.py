"""What one vLLM rank does with the card at start-up: the budget, the KV blocks, the log lines, whether it starts.

The rules and their sources are in `vllm_startup`; this module adds them up for a model, a plan and a card.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from memdoc.core.billing.inference import InferencePlan, KvCache, Weights, inference_weight_bytes
from memdoc.core.billing.vllm_startup import (
    BLOCK_TOKENS,
    NON_TORCH_BYTES,
    AttentionLayers,
    VllmArgs,
    attention_layers,
    batch_defaults,
    cuda_graph_bytes,
    forward_peak_bytes,
    kv_bytes_per_token,
    profile_tokens,
    sampler_peak_bytes,
)
from memdoc.core.model.gpu import GpuSpec
from memdoc.core.model.model_spec import ModelSpec

GIB = 2**30


@dataclass(frozen=True, kw_only=True)
class VllmStartup:
    """One rank of `vllm serve` on the card: every figure in bytes, per rank."""

    args: VllmArgs
    total_bytes: int
    weights: int
    profile_tokens: int
    activation_peak: int
    non_torch: int
    cuda_graphs: int
    """The CUDA-graph pool (0 with --enforce-eager); inside the budget from vLLM 0.21, beyond it before."""
    kv_bytes_per_token: int
    """Over all layers, as if every layer held every token (a sliding-window layer holds fewer)."""
    layers: AttentionLayers
    available_kv: int
    blocks: int
    """Blocks of the shared pool: available // (one layer's page × the group size)."""
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int

    @property
    def page_bytes(self) -> int:
        """One layer's page: 16 tokens of its K and V."""
        return BLOCK_TOKENS * self.kv_bytes_per_token // self.model_layers

    @property
    def model_layers(self) -> int:
        return self.layers.full + self.layers.sliding

    @property
    def groups(self) -> int:
        return self.layers.full_groups + self.layers.sliding_groups

    @property
    def kv_cache_tokens(self) -> int:
        """The log's "GPU KV cache size: N tokens": blocks // groups × 16 (`_report_kv_cache_config`)."""
        return self.blocks // self.groups * BLOCK_TOKENS

    def needed_bytes_at(self, max_model_len: int) -> int:
        """The memory one request of `max_model_len` needs over every layer (`max_memory_usage_bytes`)."""
        return self.layers.layer_blocks(max_model_len, self.max_num_batched_tokens) * self.page_bytes

    @property
    def needed_bytes(self) -> int:
        return self.needed_bytes_at(self.max_model_len)

    @property
    def starts(self) -> bool:
        return self.blocks > 0 and self.needed_bytes <= self.available_kv

    @property
    def max_model_len_that_starts(self) -> int:
        """The longest max_model_len whose one request fits the available memory (vLLM's binary search,
        `estimate_max_model_len`); 0 when no block fits."""
        if self.blocks == 0:
            return 0
        low, high = 0, max(self.max_model_len, self.available_kv // max(1, self.page_bytes) * BLOCK_TOKENS)
        while low < high:
            middle = (low + high + 1) // 2
            if self.needed_bytes_at(middle) <= self.available_kv:
                low = middle
            else:
                high = middle - 1
        return low

    @property
    def max_concurrency(self) -> float:
        """The log's "Maximum concurrency for max_model_len tokens per request": blocks / the blocks one request
        holds over the groups (`get_max_concurrency_for_kv_cache_config`)."""
        return self.blocks / self.layers.request_blocks(self.max_model_len, self.max_num_batched_tokens)

    @property
    def graphs_in_budget(self) -> bool:
        return self.args.graphs_in_budget

    @property
    def kv_used(self) -> int:
        """The bytes of the blocks allocated (a block of the pool is a page in every layer of a group)."""
        return self.blocks * self.page_bytes * self.layers.group_size

    @property
    def process_bytes(self) -> int:
        """What the rank holds once serving: weights, the activations of a full batch, memory outside torch, the
        CUDA graphs and the allocated cache (nvidia-smi's figure, up to the allocator's rounding)."""
        return self.weights + self.activation_peak + self.non_torch + self.cuda_graphs + self.kv_used

    def log_lines(self) -> list[str]:
        """What vLLM's start-up log would print (the figures of its own messages)."""
        lines = [
            f"Model loading took {self.weights / GIB:.2f} GiB memory",
            f"Available KV cache memory: {self.available_kv / GIB:.2f} GiB",
        ]
        if not self.starts:
            lines.append(self.refusal())
            return lines
        lines.append(f"GPU KV cache size: {self.kv_cache_tokens:,} tokens")
        lines.append(f"Maximum concurrency for {self.max_model_len:,} tokens per request: {self.max_concurrency:.2f}x")
        return lines

    def refusal(self) -> str:
        """vLLM's error when it does not start (`check_enough_kv_cache_memory`)."""
        if self.available_kv <= 0:
            return (
                "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                "when initializing the engine."
            )
        return (
            f"ValueError: To serve at least one request with the model's max seq len ({self.max_model_len}), "
            f"({self.needed_bytes / GIB:.2f} GiB KV cache is needed, which is larger than the available KV cache "
            f"memory ({self.available_kv / GIB:.2f} GiB). Based on the available memory, the estimated maximum "
            f"model length is {self.max_model_len_that_starts}."
        )

    def to_json(self) -> dict:
        return {
            "engine": "vllm",
            "version": self.args.version,
            "tensor_parallel_size": self.args.tp,
            "gpu_memory_utilization": self.args.gpu_memory_utilization,
            "max_model_len": self.max_model_len,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "enforce_eager": self.args.enforce_eager,
            "per_rank": {
                "total_bytes": self.total_bytes,
                "weights_bytes": self.weights,
                "activation_peak_bytes": self.activation_peak,
                "non_torch_bytes": self.non_torch,
                "cuda_graphs_bytes": self.cuda_graphs,
                "available_kv_cache_bytes": self.available_kv,
            },
            "cuda_graphs_in_budget": self.graphs_in_budget,
            "profile_tokens": self.profile_tokens,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "layers": {"full": self.layers.full, "sliding": self.layers.sliding, "window": self.layers.window},
            "kv_cache_groups": self.groups,
            "blocks": self.blocks,
            "kv_cache_tokens": self.kv_cache_tokens,
            "starts": self.starts,
            "max_model_len_that_starts": self.max_model_len_that_starts,
            "max_concurrency": round(self.max_concurrency, 2),
            "log": self.log_lines(),
        }


def kv_element_bytes(inference: InferencePlan) -> float:
    """vLLM's `kv_cache_dtype`: auto = the model dtype, fp8 = 1 byte (`get_dtype_size` of fp8_e4m3/e5m2);
    vLLM has no 4-bit cache, so transformers' int4 cache is read as auto."""
    if inference.kv_cache is KvCache.FP8:
        return 1.0
    return float(inference.plan.precision.compute_bits // 8)


def vllm_startup(model: ModelSpec, inference: InferencePlan, gpu: GpuSpec, args: VllmArgs) -> VllmStartup:
    """One rank of `vllm serve MODEL` with `args` on `gpu` (see `vllm_startup` module for each rule)."""
    dt = inference.plan.precision.compute_bits // 8
    batched, seqs = batch_defaults(gpu.memory_bytes, gpu.id)
    max_model_len = args.max_model_len or model.max_positions or inference.context
    max_seqs = args.max_num_seqs or seqs
    tokens = profile_tokens(args, max_model_len, batched)
    weight_format = Weights.AUTO if inference.weight_format is Weights.AUTO else inference.weight_format
    weights = math.ceil(inference_weight_bytes(model, weight_format, dt) / args.tp)
    forward = forward_peak_bytes(model, tokens, dt, args.tp)
    activation = max(forward, sampler_peak_bytes(model, min(max_seqs, tokens))) if args.v1 else forward
    graphs = 0 if args.enforce_eager else cuda_graph_bytes(model, max_seqs)
    budget = int(gpu.memory_bytes * args.gpu_memory_utilization)
    available = budget - weights - activation - NON_TORCH_BYTES - (graphs if args.graphs_in_budget else 0)
    per_token = kv_bytes_per_token(model, args.tp, kv_element_bytes(inference))
    layers = attention_layers(model, args.version)
    blocks = max(0, available) // (BLOCK_TOKENS * per_token // model.num_layers * layers.group_size)
    return VllmStartup(
        args=args,
        total_bytes=gpu.memory_bytes,
        weights=weights,
        profile_tokens=tokens,
        activation_peak=activation,
        non_torch=NON_TORCH_BYTES,
        cuda_graphs=graphs,
        kv_bytes_per_token=per_token,
        layers=layers,
        available_kv=available,
        blocks=blocks,
        max_model_len=max_model_len,
        max_num_seqs=max_seqs,
        max_num_batched_tokens=tokens if args.v1 else (args.max_num_batched_tokens or tokens),
    )


__all__ = ["VllmStartup", "kv_element_bytes", "vllm_startup"]
