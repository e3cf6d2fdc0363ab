"""Read out-of-memory messages out of a log: every figure, in bytes.

`parse_oom_log(text)` finds every CUDA/HIP out-of-memory message in arbitrary log text and
returns one `OomEvent` per distinct message, with every figure converted to integer bytes.
It understands:

- the current caching-allocator text (PyTorch ≥ 2.1): "Tried to allocate A. GPU d has a total
  capacity of T of which F is free. [Process P has X memory in use.] [Including non-PyTorch
  memory, this process has X memory in use.] Of the allocated memory M is allocated by PyTorch,
  [with X allocated in private pools (e.g., CUDA Graphs),] and R is reserved by PyTorch but
  unallocated. …", including the 2.1-era "total capacty" typo and the HIP (ROCm) spelling;
- the legacy text (PyTorch 1.x–2.0): "Tried to allocate A (GPU d; T total capacity; M already
  allocated; F free; [X allowed;] R reserved in total by PyTorch)" and the 1.0–1.3 "… ; C cached)";
- size-less failures: cuBLAS/cuDNN `*_STATUS_ALLOC_FAILED`, "CUDA error: out of memory",
  the pre-1.0 "cuda runtime error (2) : out of memory", `CUDA_ERROR_OUT_OF_MEMORY`, HIP runtime OOM;
- vLLM's KV-cache refusals, which are out-of-memory errors of the engine: "No available memory
  for the cache blocks" and "The model's max seq len (N) is larger than the maximum number of
  tokens that can be stored in KV cache (M)" (format `vllm-kv-cache`).

Logs are messy: the text is normalised first (`memdoc.core.doctor.logtext`); clause patterns accept
any whitespace between words, so wrapped messages parse; if nothing is found, lines are joined
without separators and parsed again (mid-word breaks). One message repeated (several ranks) is one
event with a `count`. Parsing never raises. What an event means: `oom_symptom`, `oom_causes`.

Sizes: PyTorch prints sizes with c10's `format_size`: "N bytes" up to 1 KiB, then KiB/MiB/GiB with
two decimals, all binary (1 GiB = 1024³ bytes), so a parsed figure is exact only to ±0.005 of the
unit (`size_to_bytes` rounds half-even to whole bytes). The request printed is the allocator's
segment-sized `alloc_size`, not the tensor's size (c10 `DeviceCachingAllocator::malloc` formats
`get_allocation_size(round_size(n))`): ≤ 1 MiB shows as 2 MiB, < 10 MiB as 20 MiB, larger ones
rounded up to 2 MiB.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

from memdoc.core.doctor.logtext import normalise_log

__all__ = [
    "FORMATS",
    "OomEvent",
    "first_oom",
    "parse_oom_log",
    "size_to_bytes",
]

FORMATS = ("cuda-current", "cuda-legacy", "hip", "cublas-alloc", "cudnn", "cuda-generic", "vllm-kv-cache")
"""Values of `OomEvent.format`. `variant` refines them (see `OomEvent.variant`)."""

_UNIT_BYTES = {
    "bytes": 1,
    "byte": 1,
    "B": 1,
    "KiB": 1024,
    "MiB": 1024**2,
    "GiB": 1024**3,
    "TiB": 1024**4,
    "kB": 10**3,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
}


def size_to_bytes(number: str, unit: str) -> int | None:
    """'23.65', 'GiB' → 25393994138. Decimal units (kB/MB/GB/TB) are powers of 1000. None if unreadable."""
    scale = _UNIT_BYTES.get(unit)
    if scale is None:
        return None
    try:
        value = Decimal(number.replace(",", ""))
    except (InvalidOperation, ValueError):
        return None
    return int((value * scale).to_integral_value(rounding=ROUND_HALF_EVEN))


@dataclass(frozen=True, kw_only=True)
class OomEvent:
    """One out-of-memory message, figures in bytes (None when the message does not state them)."""

    format: str
    """Message layout: one of `FORMATS`."""
    variant: str | None = None
    """Refinement: 'capacty-typo' (2.1-era text), 'no-advice' (legacy text without the advice
    sentence), 'legacy-cached' (1.0–1.3 text with 'cached'), 'legacy' (HIP in the legacy layout),
    'cuda-runtime-oom', 'thc-legacy', 'driver-oom', 'hip-runtime-oom' (size-less messages);
    'no-cache-blocks', 'max-seq-len', 'kv-needed' (vLLM's KV-cache refusals)."""
    backend: str | None = None
    """'CUDA', 'HIP' or 'XPU'."""
    exception_type: str | None = None
    """The exception class printed before the message ('torch.cuda.OutOfMemoryError', 'RuntimeError', …)."""
    gpu: int | None = None
    """Device index as printed (after any CUDA_VISIBLE_DEVICES remapping)."""
    requested: int | None = None
    """The single allocation that failed."""
    total: int | None = None
    """Total capacity of the device."""
    free: int | None = None
    """Free device memory according to the driver at the time of failure."""
    allocated_by_pytorch: int | None = None
    """Bytes in live tensors ('allocated by PyTorch'; the legacy 'already allocated')."""
    reserved_unallocated: int | None = None
    """Bytes the caching allocator holds but no tensor uses (current text)."""
    reserved_total: int | None = None
    """'reserved in total by PyTorch' (legacy text): allocated + cached-but-unused."""
    already_allocated: int | None = None
    """'already allocated' (legacy text only; the same quantity as `allocated_by_pytorch`)."""
    cached: int | None = None
    """'cached' (1.0–1.3 legacy text): reserved but unallocated bytes."""
    allowed: int | None = None
    """'allowed' (legacy text under `set_per_process_memory_fraction`)."""
    allocated_in_private_pools: int | None = None
    """'with X allocated in private pools (e.g., CUDA Graphs)'."""
    this_process_in_use: int | None = None
    """'Including non-PyTorch memory, this process has X memory in use' (NVML, this PID)."""
    other_processes: tuple[tuple[int, int], ...] = ()
    """('Process PID has X memory in use', …) as (pid, bytes). In a container, this process itself
    can appear here under its host PID."""
    advice: str | None = None
    """Allocator advice the message gives: 'expandable_segments' or 'max_split_size_mb'."""
    alloc_conf_var: str | None = None
    """The allocator env var the message names (PYTORCH_CUDA_ALLOC_CONF / PYTORCH_HIP_ALLOC_CONF)."""
    status: str | None = None
    """Library status for size-less messages ('CUBLAS_STATUS_ALLOC_FAILED', 'CUDA error: out of memory')."""
    call: str | None = None
    """The library call named by the message ('cublasCreate(handle)')."""
    max_model_len: int | None = None
    """vLLM: the context length the engine must serve ('max seq len (N)'), in tokens."""
    kv_cache_tokens: int | None = None
    """vLLM: tokens the KV cache could hold ('… stored in KV cache (M)')."""
    kv_cache_needed: int | None = None
    """vLLM v1: KV-cache bytes one max-length request needs."""
    kv_cache_available: int | None = None
    """vLLM v1: KV-cache bytes left under `gpu_memory_utilization` after weights and activations."""
    truncated: bool = False
    """The text ends inside the message (an excerpt cut mid-sentence)."""
    count: int = 1
    """How many times this same message occurs in the log (repeats collapsed)."""
    position: int = field(default=0, compare=False)
    """Character offset of the message in the normalised log text."""
    raw: str = field(default="", compare=False)
    """The matched message text, whitespace collapsed."""

    @property
    def unused_reserved(self) -> int | None:
        """Reserved-but-unallocated bytes, from whichever figures this format gives."""
        if self.reserved_unallocated is not None:
            return self.reserved_unallocated
        if self.cached is not None:
            return self.cached
        if self.reserved_total is not None and self.allocated_by_pytorch is not None:
            return max(0, self.reserved_total - self.allocated_by_pytorch)
        return None

    @property
    def reserved(self) -> int | None:
        """Total bytes reserved by the caching allocator (allocated + unused)."""
        if self.reserved_total is not None:
            return self.reserved_total
        unused = self.unused_reserved
        if unused is not None and self.allocated_by_pytorch is not None:
            return self.allocated_by_pytorch + unused
        return None

    @property
    def non_pytorch(self) -> int | None:
        """This process's memory outside the caching allocator (CUDA context, cuBLAS/NCCL workspaces).

        None when the message lacks the figures or they are inconsistent (NVML reporting 0 bytes for
        a process that holds tensors happens in containers)."""
        reserved = self.reserved
        if self.this_process_in_use is None or reserved is None or self.this_process_in_use < reserved:
            return None
        return self.this_process_in_use - reserved

    @property
    def has_sizes(self) -> bool:
        return self.requested is not None


# ---------------------------------------------------------------------------------------------
# Patterns. Literal spaces in these templates become `\s*` (any whitespace, line breaks included).

_NUMBER = r"(?<![\d.])(\d{1,15}(?:\.\d{1,6})?)"
_UNIT = r"(bytes|byte|KiB|MiB|GiB|TiB|kB|KB|MB|GB|TB|B)"
_SIZE = _NUMBER + " " + _UNIT


def _pat(template: str, flags: int = 0) -> re.Pattern[str]:
    return re.compile(template.replace(" ", r"\s*").replace("\\s*\\s*", "\\s*"), flags)


_ANCHOR = _pat(r"(?:(CUDA|HIP|XPU) out of memory\.? )?Tried to allocate " + _SIZE)
_LEGACY_OPEN = _pat(r" \( GPU (\d+) ;")
_CUR_CAPACITY = _pat(r"GPU (\d+) has a total capac(i?)ty of " + _SIZE)
_CUR_FREE = _pat(r"of which " + _SIZE + r" is free")
_CUR_PROCESS = _pat(r"Process (\d+) has " + _SIZE + r" memory in use")
_CUR_THIS = _pat(r"Including non-PyTorch memory, this process has " + _SIZE + r" memory in use")
_CUR_ALLOC = _pat(r"Of the allocated memory " + _SIZE + r" is allocated by PyTorch")
_CUR_ALLOWED = _pat(_SIZE + r" allowed ;")
_CUR_POOLS = _pat(r"with " + _SIZE + r" allocated in private pools")
_CUR_UNALLOC = _pat(_SIZE + r" is reserved by PyTorch but unallocated\.?")
_LEGACY_ITEM = _pat(
    r"^ " + _SIZE + r" (total capacity|already allocated|free|allowed|reserved in total by PyTorch|cached) $"
)
_DOC_SENTENCE = _pat(r"See documentation for Memory Management")
_DOC_TAIL = _pat(r" \((?:https?://)?[^\s()]{1,200}\)| and (PYTORCH_\w+_ALLOC_CONF)\.?")
_ADVICE_EXPANDABLE = _pat(r"(PYTORCH_\w+_ALLOC_CONF) ?= ?expandable_segments")
_ADVICE_SPLIT = _pat(r"try setting max_split_size_mb")
_ALLOC_CONF = _pat(r"(PYTORCH_[A-Z]+_ALLOC_CONF)")
_EXCEPTION_BEFORE = re.compile(r"([A-Za-z_][\w.]*(?:Error|Exception))\s*(?::|\(\s*['\"]?)?\s*$")

_GENERIC = (
    # (pattern, format, variant, backend, status group or literal)
    (
        _pat(r"(?:CUDA error: )?(CUBLAS_STATUS_ALLOC_FAILED)(?: when calling `([^`\n]{1,200})`)?"),
        "cublas-alloc",
        None,
        "CUDA",
    ),
    (_pat(r"(?:cuDNN error: )?(CUDNN_STATUS_ALLOC_FAILED)(?: when calling `([^`\n]{1,200})`)?"), "cudnn", None, "CUDA"),
    (_pat(r"(CUDA error: out of memory)()"), "cuda-generic", "cuda-runtime-oom", "CUDA"),
    (_pat(r"(cuda runtime error \( ?2 ?\) : out of memory)()"), "cuda-generic", "thc-legacy", "CUDA"),
    (_pat(r"(CUDA_ERROR_OUT_OF_MEMORY)()"), "cuda-generic", "driver-oom", "CUDA"),
    (_pat(r"(HIP error: out of memory|hipErrorOutOfMemory)()"), "hip", "hip-runtime-oom", "HIP"),
)

_VLLM = (
    (_pat(r"No available memory for the cache blocks"), "no-cache-blocks"),
    (
        _pat(
            r"The model'?s max seq len \( ?(\d+) ?\) is larger than the maximum number of tokens that can be "
            r"stored in KV cache \( ?(\d+) ?\)"
        ),
        "max-seq-len",
    ),
    (
        _pat(
            r"To serve at least one request with the models?'?s? max seq len \( ?(\d+) ?\) ?, \( ?"
            + _SIZE
            + r" KV cache is needed, which is larger than the available KV cache memory \( ?"
            + _SIZE
            + r" ?\)"
        ),
        "kv-needed",
    ),
)

_TAILS = tuple(
    re.sub(r"\s+", " ", t).lower()
    for var in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF")
    for t in (
        f"If reserved but unallocated memory is large try setting {var}=expandable_segments:True to avoid "
        "fragmentation. See documentation for Memory Management",
        "If reserved but unallocated memory is large try setting max_split_size_mb to avoid fragmentation. "
        f"See documentation for Memory Management and {var}",
        "If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation. "
        f"See documentation for Memory Management and {var}",
    )
)
_CLAUSE_WINDOW = 2000
"""How far after 'Tried to allocate' a clause of the same message may be found (characters)."""


def _size(m: re.Match[str], number_group: int) -> int | None:
    return size_to_bytes(m.group(number_group), m.group(number_group + 1))


def _exception_before(text: str, start: int) -> str | None:
    m = _EXCEPTION_BEFORE.search(text[max(0, start - 160) : start])
    return m.group(1) if m else None


def _looks_like_cut(rest: str) -> bool:
    """True when `rest` (what follows the last parsed clause, up to the end of the text) is empty
    or the beginning of the standard advice/documentation sentence, i.e. the excerpt stops inside it."""
    rest = re.sub(r"\s+", " ", rest).strip(" \"'`*)>]").lower()
    if not rest:
        return True
    return len(rest) < 400 and any(t.startswith(rest) for t in _TAILS)


def _parse_sized(text: str, m: re.Match[str], end_limit: int) -> OomEvent:
    backend = m.group(1)
    start = m.start()
    requested = _size(m, 2)
    window_end = min(end_limit, m.end() + _CLAUSE_WINDOW)
    fields: dict = {"requested": requested, "backend": backend or "CUDA", "position": start}
    fields["exception_type"] = _exception_before(text, start)
    last = m.end()
    complete = False
    variant = None

    legacy = _LEGACY_OPEN.match(text, m.end())
    if legacy:
        layout = "legacy"
        fields["gpu"] = int(legacy.group(1))
        close = text.find(")", legacy.end(), window_end)
        body_end = close if close != -1 else window_end
        body = text[legacy.end() : body_end]
        names = {
            "total capacity": "total",
            "already allocated": "already_allocated",
            "free": "free",
            "allowed": "allowed",
            "reserved in total by PyTorch": "reserved_total",
            "cached": "cached",
        }
        for item in body.split(";"):
            im = _LEGACY_ITEM.match(item)
            if im:
                key = re.sub(r"\s+", " ", im.group(3))
                fields[names.get(key, key)] = _size(im, 1)
        fields["allocated_by_pytorch"] = fields.get("already_allocated")
        if close != -1:
            last = close + 1
            complete = True
        else:
            last = body_end
        if fields.get("cached") is not None:
            variant = "legacy-cached"
    else:
        layout = "current"
        region = text[m.end() : window_end]
        offset = m.end()
        for name, pattern in (
            ("total", _CUR_CAPACITY),
            ("free", _CUR_FREE),
            ("this_process_in_use", _CUR_THIS),
            ("allowed", _CUR_ALLOWED),
            ("allocated_by_pytorch", _CUR_ALLOC),
            ("allocated_in_private_pools", _CUR_POOLS),
            ("reserved_unallocated", _CUR_UNALLOC),
        ):
            cm = pattern.search(region)
            if not cm:
                continue
            if name == "total":
                fields["gpu"] = int(cm.group(1))
                fields["total"] = _size(cm, 3)
                if cm.group(2) == "":
                    variant = "capacty-typo"
            else:
                fields[name] = _size(cm, 1)
            last = max(last, offset + cm.end())
        others = []
        for pm in _CUR_PROCESS.finditer(region):
            others.append((int(pm.group(1)), _size(pm, 2)))
            last = max(last, offset + pm.end())
        fields["other_processes"] = tuple(others)
        complete = fields.get("reserved_unallocated") is not None

    # Advice sentence and documentation pointer, searched just after the figures.
    tail_region_end = min(end_limit, last + 600)
    tail = text[last:tail_region_end]
    exp = _ADVICE_EXPANDABLE.search(tail)
    split = _ADVICE_SPLIT.search(tail)
    doc = _DOC_SENTENCE.search(tail)
    end = last
    if exp and (not split or exp.start() < split.start()):
        fields["advice"] = "expandable_segments"
        fields["alloc_conf_var"] = exp.group(1)
        end = last + exp.end()
    elif split:
        fields["advice"] = "max_split_size_mb"
        end = last + split.end()
    if doc:
        end = last + doc.end()
        dt = _DOC_TAIL.match(text, end)
        if dt:
            end = dt.end()
            if dt.group(1) and not fields.get("alloc_conf_var"):
                fields["alloc_conf_var"] = dt.group(1)
    if fields.get("advice") and not fields.get("alloc_conf_var"):
        cm = _ALLOC_CONF.search(text, last, min(tail_region_end, end + 80))
        if cm:
            fields["alloc_conf_var"] = cm.group(1)
    incomplete = not complete or (fields.get("advice") is not None and not doc)
    fields["truncated"] = incomplete and end_limit >= len(text) and _looks_like_cut(text[last:])
    if layout == "legacy" and complete and not fields.get("advice"):
        variant = variant or "no-advice"

    if fields["backend"] == "HIP":
        fmt = "hip"
        if layout == "legacy":
            variant = "legacy"
    else:
        fmt = "cuda-legacy" if layout == "legacy" else "cuda-current"
    fields["raw"] = re.sub(r"\s+", " ", text[start:end]).strip()
    return OomEvent(format=fmt, variant=variant, **fields)


def _parse_generic(text: str) -> list[OomEvent]:
    events = []
    for pattern, fmt, variant, backend in _GENERIC:
        for m in pattern.finditer(text):
            status = re.sub(r"\s+", " ", m.group(1))
            call = re.sub(r"\s+", "", m.group(2)) if m.group(2) else None
            events.append(
                OomEvent(
                    format=fmt,
                    variant=variant,
                    backend=backend,
                    exception_type=_exception_before(text, m.start()),
                    status=status,
                    call=call,
                    position=m.start(),
                    raw=re.sub(r"\s+", " ", m.group(0)),
                )
            )
    return events


def _parse_vllm(text: str) -> list[OomEvent]:
    events = []
    for pattern, variant in _VLLM:
        for m in pattern.finditer(text):
            fields: dict = {}
            if variant == "max-seq-len":
                fields = {"max_model_len": int(m.group(1)), "kv_cache_tokens": int(m.group(2))}
            elif variant == "kv-needed":
                fields = {
                    "max_model_len": int(m.group(1)),
                    "kv_cache_needed": _size(m, 2),
                    "kv_cache_available": _size(m, 4),
                }
            events.append(
                OomEvent(
                    format="vllm-kv-cache",
                    variant=variant,
                    backend="CUDA",
                    exception_type=_exception_before(text, m.start()),
                    status=re.sub(r"\s+", " ", m.group(0)),
                    position=m.start(),
                    raw=re.sub(r"\s+", " ", m.group(0)),
                    **fields,
                )
            )
    return events


def _identity(e: OomEvent) -> tuple:
    """What makes two messages 'the same message' (figures, not wording)."""
    return (
        e.format,
        e.backend,
        e.gpu,
        e.requested,
        e.total,
        e.free,
        e.allocated_by_pytorch,
        e.reserved_unallocated,
        e.reserved_total,
        e.cached,
        e.this_process_in_use,
        e.other_processes,
        e.status,
        e.call,
        e.max_model_len,
        e.kv_cache_tokens,
        e.kv_cache_needed,
        e.kv_cache_available,
    )


def _parse_normalised(text: str) -> list[OomEvent]:
    anchors = list(_ANCHOR.finditer(text))
    events: list[OomEvent] = []
    for i, m in enumerate(anchors):
        end_limit = anchors[i + 1].start() if i + 1 < len(anchors) else len(text)
        try:
            events.append(_parse_sized(text, m, end_limit))
        except Exception:  # pragma: no cover - defensive: one odd message must not hide the others
            continue
    try:
        events.extend(_parse_generic(text))
        events.extend(_parse_vllm(text))
    except Exception:  # pragma: no cover
        pass
    events.sort(key=lambda e: e.position)
    merged: list[OomEvent] = []
    index: dict[tuple, int] = {}
    for e in events:
        key = _identity(e)
        if key in index:
            j = index[key]
            merged[j] = replace(merged[j], count=merged[j].count + 1)
        else:
            index[key] = len(merged)
            merged.append(e)
    return merged


def parse_oom_log(text: str) -> list[OomEvent]:
    """Every distinct out-of-memory message in `text`, in order of first appearance.

    Never raises: unreadable input gives an empty list. Repeats of one message (same figures)
    are collapsed into the first, with `count` set.
    """
    try:
        if text is None:
            return []
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8", errors="replace")
        elif not isinstance(text, str):
            text = str(text)
        events = _parse_normalised(normalise_log(text, "\n"))
        if not events and ("allocat" in text or "emory" in text or "ALLOC" in text):
            # Hard-wrapped text broken mid-word: join the lines with nothing between them.
            events = _parse_normalised(normalise_log(text, ""))
        return events
    except Exception:  # pragma: no cover - the contract is "never raises"
        return []


def first_oom(text: str) -> OomEvent | None:
    """The first out-of-memory message in `text`, or None."""
    return next(iter(parse_oom_log(text)), None)
