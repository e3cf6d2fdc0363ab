"""vLLM's start-up arithmetic (`bill --inference --engine vllm`): what the engine's log prints, and whether it starts.

At start-up each rank of a vLLM V1 engine (vLLM ≥ 0.8) loads its shard of the weights, runs one profile forward
of `max_num_batched_tokens` tokens and a sampler run over `min(max_num_seqs, max_num_batched_tokens)` rows,
measures the memory outside torch, and gives the KV cache the rest of `gpu_memory_utilization` × the card
(`vllm/v1/worker/gpu_worker.py: Worker.determine_available_memory`):

    available KV = total × utilization − weights − the profile's activation peak − non-torch memory
                   [− the CUDA-graph estimate, vLLM ≥ 0.21]

The cache is paged in blocks of 16 tokens (`CacheConfig.block_size`); each layer's page is
`block_size × kv_heads × (head_size_k + head_size_v) × dtype bytes` (`vllm/v1/kv_cache_interface.py:
FullAttentionSpec.real_page_size_bytes`), MLA's one head of `kv_lora_rank + qk_rope_head_dim`
(`MLAAttentionSpec.real_page_size_bytes`); the blocks are `available // page // layers`
(`vllm/v1/core/kv_cache_utils.py: get_num_blocks`). The log prints "GPU KV cache size: blocks × 16 tokens" and
"Maximum concurrency for L tokens per request: blocks / cdiv(L, 16)" (`get_max_concurrency_for_kv_cache_config`),
and the engine refuses to start when one request of `max_model_len` tokens needs more than the available memory
(`check_enough_kv_cache_memory`: "To serve at least one request with the model's max seq len ...").
Sources read at vllm-project/vllm 001cabc1 (kv_cache_interface.py, kv_cache_utils.py) and 0012cf69
(gpu_worker.py).

With tensor parallelism each rank holds 1/tp of the weights and `max(1, kv_heads // tp)` KV heads
(`ModelConfig.get_num_kv_heads`: KV heads are replicated when tp exceeds them); MLA's latent is replicated on
every rank.

Sliding-window layers (Gemma 2 and 3, gpt-oss: `layer_types` in the config, or transformers 5.25's defaults,
`gemma2/configuration_gemma2.py` line 96 and `gemma3/configuration_gemma3.py` line 109) get vLLM's hybrid
allocator (`AttentionLayers`): the layers of each kind are cut into groups of the smaller kind's count (the larger
when the two are within 1.5×; `kv_cache_utils.py: _get_kv_cache_groups_uniform_page_size`, padding the rest),
every group draws from one pool of `available // (page × group size)` blocks, a sliding layer holds
cdiv(min(window − 1 + max_num_batched_tokens, max_model_len), 16) + 1 blocks per request
(`SlidingWindowSpec.max_memory_usage_bytes`), and the log's "GPU KV cache size" is blocks // groups × 16.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from memdoc.core.model.families import Mlp, QkvLayout
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.stack import parse_version
from memdoc.errors import PlanError

BLOCK_TOKENS = 16
"""vLLM's default `block_size` (`vllm/config/cache.py: CacheConfig`)."""
DEFAULT_UTILIZATION = 0.9
"""`EngineArgs.gpu_memory_utilization`'s default (`CacheConfig.gpu_memory_utilization = 0.9`)."""
LATEST_VLLM = "0.21.0"
"""The newest vLLM behaviour modelled (the default of `--vllm-version`)."""
GRAPH_PROFILING_SINCE = (0, 21)
"""vLLM 0.21 subtracts its CUDA-graph estimate from the KV budget: its own start-up log says "CUDA graph memory
profiling is enabled (default since v0.21.0)" (vllm-project/vllm#46462; `VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`
in `vllm/envs.py`). Before, graphs were captured after the cache was allocated, beyond the budget."""
HYBRID_SINCE = (0, 10)
"""vLLM 0.10's hybrid KV-cache manager gives sliding-window layers their own groups (before, they were paged as
full attention, `FullAttentionSpec`'s docstring: "When hybrid allocator is disabled ... regarded as full
attention")."""
V1_SINCE = (0, 8)
"""vLLM 0.8 made the V1 engine the default; V0 profiled a different batch (`profile_tokens`)."""
NON_TORCH_BYTES = int(0.30 * 2**30)
"""Calibrated: the CUDA context, cuBLAS workspaces and NCCL buffers that vLLM's profile counts outside torch.
Published logs print 0.35 GiB (RTX 3090, TP 1, vllm-project/vllm#10517) and 0.25 GiB (RTX 4090, TP 2, #13061):
0.30 is their mean. Held out: 0.20 GiB (4 × RTX 3090, TP 4, #14447) and 0.16 GiB (H100, #12126)."""
SAMPLER_BYTES_PER_LOGIT = 21
"""The sampler run's peak per logit: the fp32 logits (4), their sorted copy (4) and int64 sort indices (8), the
softmax of the sorted logits (4; the cumsum is written into it) and the top-p mask (1): vLLM's top-k/top-p path,
`vllm/v1/sample/ops/topk_topp_sampler.py: apply_top_k_top_p`, which the dummy sampler run takes."""
MAX_CAPTURE = 512
"""The largest CUDA-graph batch: `max_cudagraph_capture_size` defaults to min(2 × max_num_seqs, 512)."""
GRAPH_BYTES_PER_LAYER = 180_000
"""Calibrated: the CUDA-graph pool per captured graph and decoder layer. vLLM 0.21's log for Qwen3-8B (36 layers,
max_num_seqs 256) prints "Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=35 (largest=256)" and
"Estimated CUDA graph memory: 0.52 GiB total" (LMCache/LMCache#3430): 0.52 GiB / (86 graphs × 36 layers). A rough
figure (graphs of hybrid and speculative models in published logs range 3× either side); with --enforce-eager, 0."""


@dataclass(frozen=True, kw_only=True)
class VllmArgs:
    """`vllm serve`'s memory flags, as given (None: vLLM's default for the card and the model)."""

    gpu_memory_utilization: float = DEFAULT_UTILIZATION
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enforce_eager: bool = False
    tp: int = 1
    version: str = LATEST_VLLM

    def __post_init__(self):
        if not 0 < self.gpu_memory_utilization <= 1:
            raise PlanError(f"--gpu-memory-utilization {self.gpu_memory_utilization} must be in (0, 1]")
        if self.tp < 1:
            raise PlanError(f"--tp {self.tp} must be at least 1")
        for name in ("max_model_len", "max_num_seqs", "max_num_batched_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise PlanError(f"--{name.replace('_', '-')} {value} must be at least 1")
        try:
            parse_version(self.version)
        except PlanError:
            raise PlanError(f"--vllm-version {self.version!r} is not a version (e.g. 0.21.0)") from None

    @property
    def v1(self) -> bool:
        return parse_version(self.version)[:2] >= V1_SINCE

    @property
    def graphs_in_budget(self) -> bool:
        return not self.enforce_eager and parse_version(self.version)[:2] >= GRAPH_PROFILING_SINCE


def batch_defaults(memory_bytes: int, gpu_id: str) -> tuple[int, int]:
    """`vllm serve`'s `max_num_batched_tokens` and `max_num_seqs`: 8192 and 1024 on a card of ≥ 70 GiB
    that is not an A100, else 2048 and 256 (`vllm/engine/arg_utils.py: EngineArgs.get_batch_defaults`)."""
    if memory_bytes >= 70 * 1024**3 and "a100" not in gpu_id:
        return 8192, 1024
    return 2048, 256


def profile_tokens(args: VllmArgs, max_model_len: int, default_batched: int) -> int:
    """The tokens of the profile forward: `max_num_batched_tokens` (V1 always chunks its prefill). V0 (< 0.8)
    profiled max(max_model_len, 2048) tokens without chunked prefill, and 512 with it, which it turned on above a
    32K context (the 35K run of vllm-project/vllm#10517 peaks 0.06 GiB above its weights: a 512-token forward)."""
    if args.max_num_batched_tokens is not None:
        return args.max_num_batched_tokens
    if args.v1:
        return default_batched
    return 512 if max_model_len > 32768 else max(max_model_len, 2048)


def kv_bytes_per_token(model: ModelSpec, tp: int, element_bytes: float) -> int:
    """One rank's cache per token over all layers: MLA's latent (replicated), else K and V of
    `max(1, kv_heads // tp)` heads (see the module docstring)."""
    if model.arch.attention is QkvLayout.MLA:
        width = int(model.config["kv_lora_rank"]) + int(model.config["qk_rope_head_dim"])
        return int(model.num_layers * width * element_bytes)
    heads = max(1, model.num_kv_heads // tp)
    return int(2 * model.num_layers * heads * model.head_dim * element_bytes)


def forward_peak_bytes(model: ModelSpec, tokens: int, compute_bytes: int, tp: int) -> int:
    """One rank's transient peak of a no-grad forward of `tokens` tokens, inside a decoder layer.

    The MLP: `gate_up_proj`'s output (2 × I/tp) and `SiluAndMul`'s (I/tp) alive together; a fused MoE holds
    top-k × (2I + I)/tp per token (`fused_moe`'s intermediate caches) and its top-k × hidden output. Beside it
    three hidden-sized tensors: the residual, the layer's output and the normed input (vLLM's fused add-norm
    works in place). Checked against vLLM 0.6's profile of Llama-3.1-8B on an RTX 3090 at 20,000 and 29,000
    tokens (vllm-project/vllm#10517: peak − weights = 2.07 and 2.99 GiB; this gives 2.06 and 2.99)."""
    hidden = model.hidden_size
    if model.is_moe:
        k = max(model.experts_per_token, 1)
        mlp = k * (3 * model.moe_intermediate_size // tp + hidden)
        mlp = max(mlp, 3 * model.intermediate_size // tp if model.intermediate_size else 0)
    else:
        mlp = (4 if model.arch.mlp is Mlp.FUSED_GATE_UP else 3) * model.intermediate_size // tp
    attention = (2 * model.q_dim + 2 * model.kv_dim) // tp
    return compute_bytes * tokens * (max(mlp, attention) + 3 * hidden)


def capture_sizes(max_size: int) -> list[int]:
    """vLLM's default CUDA-graph batch sizes up to `max_size`: 1, 2, 4, then every 8 below 256, then every 16
    (`CompilationConfig` defaults; 51 sizes up to 512, as the logs print "PIECEWISE=51 (largest=512)")."""
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, max_size + 1, 16)]
    return [s for s in sizes if s <= max_size]


def cuda_graph_bytes(model: ModelSpec, max_num_seqs: int) -> int:
    """The graphs vLLM captures (mixed prefill-decode graphs up to min(2 × max_num_seqs, 512) tokens, and full
    decode graphs up to max_num_seqs) × `GRAPH_BYTES_PER_LAYER` × the decoder layers."""
    largest = min(2 * max_num_seqs, MAX_CAPTURE)
    graphs = len(capture_sizes(largest)) + len(capture_sizes(min(max_num_seqs, largest)))
    return graphs * model.num_layers * GRAPH_BYTES_PER_LAYER


@dataclass(frozen=True)
class AttentionLayers:
    """The model's attention layers as vLLM's KV-cache manager groups them (see the module docstring)."""

    full: int
    sliding: int
    window: int | None

    @property
    def group_size(self) -> int:
        kinds = [n for n in (self.full, self.sliding) if n]
        small, large = min(kinds), max(kinds)
        return large if large < 1.5 * small else small

    @property
    def full_groups(self) -> int:
        return math.ceil(self.full / self.group_size) if self.full else 0

    @property
    def sliding_groups(self) -> int:
        return math.ceil(self.sliding / self.group_size) if self.sliding else 0

    def sliding_blocks(self, max_model_len: int, batched_tokens: int) -> int:
        """Blocks one request holds in a sliding-window layer."""
        tokens = min((self.window or max_model_len) - 1 + batched_tokens, max_model_len)
        return math.ceil(tokens / BLOCK_TOKENS) + 1

    def request_blocks(self, max_model_len: int, batched_tokens: int) -> int:
        """Blocks of the shared pool one request of max_model_len holds, over all groups."""
        full = self.full_groups * math.ceil(max_model_len / BLOCK_TOKENS)
        return full + self.sliding_groups * self.sliding_blocks(max_model_len, batched_tokens)

    def layer_blocks(self, max_model_len: int, batched_tokens: int) -> int:
        """Pages one request needs over the real layers (`check_enough_kv_cache_memory` sums every layer's)."""
        full = self.full * math.ceil(max_model_len / BLOCK_TOKENS)
        return full + self.sliding * self.sliding_blocks(max_model_len, batched_tokens)


def attention_layers(model: ModelSpec, version: str = LATEST_VLLM) -> AttentionLayers:
    """Full and sliding-window layers (all full before vLLM 0.10, whose hybrid allocator is modelled here)."""
    config, n = model.config, model.num_layers
    window = config.get("sliding_window")
    types = config.get("layer_types")
    if types:
        sliding = sum(1 for t in types[:n] if t == "sliding_attention")
    elif model.arch.sliding_window_pattern:
        pattern = int(config.get("sliding_window_pattern") or model.arch.sliding_window_pattern)
        sliding = sum(1 for i in range(n) if (i + 1) % pattern)
    else:
        sliding = 0
    if not window or sliding == 0 or parse_version(version)[:2] < HYBRID_SINCE:
        return AttentionLayers(full=n, sliding=0, window=None)
    return AttentionLayers(full=n - sliding, sliding=sliding, window=int(window))


def sampler_peak_bytes(model: ModelSpec, rows: int) -> int:
    """The dummy sampler run over `rows` rows of the full vocabulary (`SAMPLER_BYTES_PER_LOGIT`)."""
    return rows * model.vocab_size * SAMPLER_BYTES_PER_LOGIT


__all__ = [
    "AttentionLayers",
    "BLOCK_TOKENS",
    "DEFAULT_UTILIZATION",
    "LATEST_VLLM",
    "NON_TORCH_BYTES",
    "VllmArgs",
    "attention_layers",
    "batch_defaults",
    "capture_sizes",
    "cuda_graph_bytes",
    "forward_peak_bytes",
    "kv_bytes_per_token",
    "profile_tokens",
    "sampler_peak_bytes",
]
