"""Read out-of-memory messages out of a log, and guess which symptom they are.

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
  the pre-1.0 "cuda runtime error (2) : out of memory", `CUDA_ERROR_OUT_OF_MEMORY`, HIP runtime OOM.

Logs are messy, so the text is normalised first: HTML tags and entities and ANSI colours are
removed, per-line log prefixes (timestamps, `[rank0]:`, `ERROR 10-11 12:27:29 engine.py:157]`,
vLLM worker tags, glog headers, `> ` quotes) are stripped, and clause patterns accept any
whitespace (including line breaks) between words, so wrapped messages still parse. If nothing is
found, the lines are joined without separators and parsed again (hard-wrapped, mid-word breaks).
The same message repeated (several ranks, a user quoting it twice) becomes one event with a
`count`. Parsing never raises.

`infer_symptom(event, log_text)` maps an event plus the surrounding traceback to one of the
symptom ids of `memdoc/data/symptoms.yaml` and says why, and what it could not tell. Its rules
are the module constants below (`FRAGMENTATION_*`, `LONG_SAMPLE_*`) and are described on the
function.

Sizes: PyTorch prints sizes with c10's `format_size`: "N bytes" up to 1 KiB, then KiB/MiB/GiB with
two decimals, all binary (1 GiB = 1024³ bytes). A parsed figure is therefore exact only to the
printed rounding (±0.005 of the unit); `size_to_bytes` rounds half-even to whole bytes.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field, replace
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

__all__ = [
    "FORMATS",
    "OomEvent",
    "SymptomGuess",
    "first_oom",
    "infer_symptom",
    "parse_oom_log",
    "size_to_bytes",
]

FORMATS = ("cuda-current", "cuda-legacy", "hip", "cublas-alloc", "cudnn", "cuda-generic")
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
    'cuda-runtime-oom', 'thc-legacy', 'driver-oom', 'hip-runtime-oom' (size-less messages)."""
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
# Text normalisation


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_TAG = re.compile(r"<[A-Za-z/!][^<>\n]{0,400}>")
# Per-line prefixes; applied repeatedly at the start of each line.
_LINE_PREFIX = re.compile(
    r"""^[ \t]*(?:
        >+                                                        # markdown quote
      | \[(?:rank|default|local_rank|worker)?\d+\]:?              # [rank0]: [default0]: [0]:
      | \d{1,4}:(?=[ \t])                                         # srun -l '0: '
      | \([\w.-]+(?:[ \t]+\w+=\w+)*\)(?=[ \t]+(?:DEBUG|INFO|WARN|WARNING|ERROR|CRITICAL|FATAL)\b)  # (VllmWorker rank=3 pid=1090)
      | (?:DEBUG|INFO|WARN|WARNING|ERROR|CRITICAL|FATAL)[ \t]+\d{1,2}-\d{1,2}[ \t]+\d{1,2}:\d{2}:\d{2}(?:\.\d+)?[ \t]+\[?[\w./-]+:\d+\]  # vLLM
      | \[?\d{4}-\d{2}-\d{2}[T \t]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\]?
        (?:[ \t]*[-|][ \t]*[\w.]+(?=[ \t]*[-|][ \t]*\[?(?:DEBUG|INFO|WARN|WARNING|ERROR|CRITICAL|FATAL)\b))?(?:[ \t]*[-|:]?[ \t]*\[?(?:DEBUG|INFO|WARN|WARNING|ERROR|CRITICAL|FATAL)\]?)?[ \t]*[-|:]?  # ISO time [- logger] [LEVEL]
      | [IWEF]\d{4}[ \t]+\d{2}:\d{2}:\d{2}\.\d+[ \t]+\d+[ \t]+[\w./-]+:\d+\]   # glog
      | \[\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\]                       # [12:00:01]
    )""",
    re.X,
)


def _strip_prefixes(line: str) -> str:
    for _ in range(6):
        m = _LINE_PREFIX.match(line)
        if not m or m.end() == 0:
            break
        line = line[m.end() :]
    return line.strip()


def _normalise(text: str, joiner: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _ANSI.sub("", text)
    text = _TAG.sub("", text)
    text = html.unescape(text)
    return joiner.join(_strip_prefixes(line) for line in text.split("\n"))


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
    (_pat(r"(?:CUDA error: )?(CUBLAS_STATUS_ALLOC_FAILED)(?: when calling `([^`\n]{1,200})`)?"), "cublas-alloc", None, "CUDA"),
    (_pat(r"(?:cuDNN error: )?(CUDNN_STATUS_ALLOC_FAILED)(?: when calling `([^`\n]{1,200})`)?"), "cudnn", None, "CUDA"),
    (_pat(r"(CUDA error: out of memory)()"), "cuda-generic", "cuda-runtime-oom", "CUDA"),
    (_pat(r"(cuda runtime error \( ?2 ?\) : out of memory)()"), "cuda-generic", "thc-legacy", "CUDA"),
    (_pat(r"(CUDA_ERROR_OUT_OF_MEMORY)()"), "cuda-generic", "driver-oom", "CUDA"),
    (_pat(r"(HIP error: out of memory|hipErrorOutOfMemory)()"), "hip", "hip-runtime-oom", "HIP"),
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
        events = _parse_normalised(_normalise(text, "\n"))
        if not events and ("allocat" in text or "emory" in text or "ALLOC" in text):
            # Hard-wrapped text broken mid-word: join the lines with nothing between them.
            events = _parse_normalised(_normalise(text, ""))
        return events
    except Exception:  # pragma: no cover - the contract is "never raises"
        return []


def first_oom(text: str) -> OomEvent | None:
    """The first out-of-memory message in `text`, or None."""
    events = parse_oom_log(text)
    return events[0] if events else None


# ---------------------------------------------------------------------------------------------
# Symptom inference

FRAGMENTATION_MIN_SHARE_OF_TOTAL = 0.05
"""Fragmentation needs reserved-but-unallocated ≥ this share of the card (smaller amounts are the
caching allocator's normal rounding slack)."""
LONG_SAMPLE_SHARE_OF_TOTAL = 1 / 8
"""A single request ≥ this share of the card is a 'large block'."""
LONG_SAMPLE_SHARE_WITH_FRAMES = 1 / 32
"""With attention/softmax/loss frames in the traceback, ≥ this share already counts as large."""
LONG_SAMPLE_NO_TOTAL_BYTES = 2 * 1024**3
"""'Large block' threshold when the message does not state the capacity."""
LONG_SAMPLE_MIN_BYTES = 512 * 1024**2
"""…and never below this (on small cards an ordinary feature map is already 1/8 of the card)."""


@dataclass(frozen=True, kw_only=True)
class SymptomGuess:
    """Which symptom an OOM looks like, with the evidence and the gaps."""

    symptom: str | None
    """A symptom id from symptoms.yaml, or None when the evidence does not decide."""
    phase: str | None = None
    """What the traceback shows was running: 'startup', 'training-step', 'forward', 'inference' or None."""
    fragmentation: bool = False
    """True when the fragmentation rule fires (see `infer_symptom`)."""
    also: tuple[str, ...] = ()
    """Other symptom ids that fit the evidence too."""
    reasons: tuple[str, ...] = ()
    """Why, one sentence each, citing the figures used."""
    unknowns: tuple[str, ...] = ()
    """What the log does not say and would change the answer."""


_FRAME = re.compile(r'File "([^"\n]*)", line \d+, in ([<>\w.]+)[^\n]*(?:\n[ \t]*(?![ \t]*File ")([^\n]*))?')

_INFERENCE_FUNCS = {
    "generate", "_sample", "sample", "greedy_search", "beam_search", "_beam_search",
    "_assisted_decoding", "contrastive_search", "_contrastive_search", "generate_until",
    "run_engine_loop", "engine_step", "execute_model", "capture_model", "profile_run",
}
_INFERENCE_CODE = re.compile(r"\.generate\(|\bpipeline\(|\bLLM\(|llm\.generate|inference_mode")
_INFERENCE_PATH = re.compile(r"/generation/|/vllm/|/sglang/|/text_generation")
_STARTUP_FUNCS = {
    "from_pretrained", "_load_pretrained_model", "load_state_dict", "_load_state_dict_into_meta_model",
    "load_checkpoint_in_model", "set_module_tensor_to_device", "dispatch_model", "_move_model_to_device",
    "prepare_model_for_kbit_training", "initialize_optimizer_states", "_configure_zero_optimizer",
    "_configure_optimizer", "_configure_distributed_model", "cuda", "to", "_apply", "load_model",
    "_prepare_deepspeed", "prepare_model", "_wrap_model", "_create_model", "init_device_mesh",
}
_STARTUP_CODE = re.compile(
    r"from_pretrained\(|\b(?:model|module|net|self\.model)\.(?:to|cuda)\(|\.cuda\(\)|deepspeed\.initialize\(|"
    r"accelerator\.prepare\(|load_state_dict\("
)
_STEP_FUNCS = {
    "backward", "_engine_run_backward", "run_backward", "step", "_optimizer_step", "optimizer_step",
    "training_step", "_inner_training_loop", "train_step", "compute_loss", "_foreach_add_", "_multi_tensor_adamw",
    "_single_tensor_adamw", "adamw", "_fused_adamw", "clip_grad_norm_", "reduce_gradients",
}
_STEP_CODE = re.compile(r"\.backward\(|optimizer\.step\(|\.step\(\)|accelerator\.backward\(|autograd\.backward\(")
_STEP_PATH = re.compile(r"torch/autograd/|torch/optim/")
_BIG_BLOCK_CODE = re.compile(
    r"softmax|scaled_dot_product|attn_weights|attention_probs|\battn\b|attention\(|matmul\(query|"
    r"cross_entropy|nll_loss|log_softmax|lm_head|logits|\.float\(\)",
    re.I,
)
_BIG_BLOCK_FUNCS = {"eager_attention_forward", "sdpa_attention_forward", "flash_attention_forward",
                    "cross_entropy", "ForCausalLMLoss", "fixed_cross_entropy", "loss_function",
                    "log_softmax", "softmax", "_log_softmax"}


def _frames(log_text: str) -> list[tuple[str, str, str]]:
    norm = _normalise(log_text, "\n")
    return [(m.group(1), m.group(2), (m.group(3) or "").strip()) for m in _FRAME.finditer(norm)]


def _phase(frames: list[tuple[str, str, str]]) -> tuple[str | None, str | None]:
    """(phase, the frame that decided it). Priority: inference > startup > training-step > forward."""
    def find(funcs, code, path=None):
        for p, fn, src in frames:
            if fn in funcs or (code is not None and code.search(src)) or (path is not None and path.search(p)):
                return f"{fn} ({p.rsplit('/', 1)[-1]}){': ' + src if src else ''}"
        return None

    hit = find(_INFERENCE_FUNCS, _INFERENCE_CODE, _INFERENCE_PATH)
    if hit:
        return "inference", hit
    hit = find(_STARTUP_FUNCS, _STARTUP_CODE)
    if hit:
        return "startup", hit
    hit = find(_STEP_FUNCS, _STEP_CODE, _STEP_PATH)
    if hit:
        return "training-step", hit
    hit = find({"forward", "_call_impl", "_wrapped_call_impl"}, None)
    if hit:
        return "forward", hit
    return None, None


def _gib(n: int) -> str:
    from memdoc.units import format_bytes

    return format_bytes(n)


def infer_symptom(event: OomEvent | None, log_text: str = "") -> SymptomGuess:
    """Guess the symptom of `event`, using the traceback in `log_text` (the whole log is fine).

    Rules, in order (each firing one adds a reason; each missing input adds an unknown):

    1. Fragmentation: reserved-but-unallocated R (current text; legacy: reserved − allocated, or
       'cached') is at least the request A **and** at least 5% of the card's capacity T
       (`FRAGMENTATION_MIN_SHARE_OF_TOTAL`; of allocated + R when T is missing). The allocator then
       held enough idle bytes for the request but in no block large enough.
    2. Phase from the traceback frames (function names, source lines, file paths), priority
       inference > startup > training step > forward:
       inference = `generate`/decoding loops, `/generation/`, vLLM/SGLang engine frames;
       startup = `from_pretrained`, state-dict loading, `model.to(`/`.cuda()`/`Module._apply`,
       DeepSpeed/accelerate initialisation, optimizer-state creation (`initialize_optimizer_states`);
       training step = `backward`/autograd, `optimizer.step`/torch.optim, `training_step`;
       forward = only `forward` frames.
    3. Large attention/logits block (long-sample-oom): A ≥ T/8 (`LONG_SAMPLE_SHARE_OF_TOTAL`), or
       A ≥ T/32 when a frame mentions attention/softmax/cross-entropy/logits/lm_head; 2 GiB
       stands in for T/8 when T is missing; and always A ≥ 512 MiB (`LONG_SAMPLE_MIN_BYTES`).
       One tensor that large in a decoder is a sequence²-sized score matrix (eager attention) or
       a tokens × vocabulary logits/loss tensor, both set by the longest sample; outside startup
       nothing else in training is allocated that large at once.
    4. Decision: inference → inference-oom; startup → startup-oom; rule 3 → long-sample-oom
       (also mid-run-oom); training step or forward → mid-run-oom; fragmentation alone →
       mid-run-oom (fragmentation builds up over many steps); otherwise None with the candidates
       in `also`.
    """
    reasons: list[str] = []
    unknowns: list[str] = []
    also: list[str] = []
    if event is None:
        return SymptomGuess(
            symptom=None,
            unknowns=("no out-of-memory message was found in the log",),
        )
    try:
        frames = _frames(log_text or event.raw)
    except Exception:  # pragma: no cover
        frames = []
    phase, decided_by = _phase(frames)

    A, T = event.requested, event.total
    R = event.unused_reserved
    fragmentation = False
    if not event.has_sizes:
        reasons.append(
            f"{event.status or 'the error'} reports no sizes: a library could not allocate its handle or "
            "workspace, usually because the GPU was already full (this process or another one); a driver "
            "or library mismatch can produce the same text"
        )
        unknowns.append("how much memory was in use (the message has no figures): run `memdoc diagnose` or nvidia-smi")
    else:
        if T is not None and A is not None and A > T:
            reasons.append(
                f"the single request ({_gib(A)}) is larger than the whole card ({_gib(T)}): no memory setting "
                "can fit it; look for a shape bug or an unbounded sequence length"
            )
        if event.free is not None and A is not None and event.free >= A:
            reasons.append(
                f"the driver reported {_gib(event.free)} free, more than the {_gib(A)} requested: the limit is "
                "elsewhere (a per-process memory fraction, other processes racing, or unified-memory/driver "
                "reporting on this platform)"
            )
        if R is None:
            unknowns.append("reserved-but-unallocated memory (the message does not give it): fragmentation not assessed")
        elif A is not None:
            base = T if T is not None else (event.allocated_by_pytorch or 0) + R
            floor = FRAGMENTATION_MIN_SHARE_OF_TOTAL * base
            if R >= A and R >= floor and base > 0:
                fragmentation = True
                reasons.append(
                    f"{_gib(R)} was reserved by PyTorch but unallocated, more than the {_gib(A)} requested and "
                    f"≥ {FRAGMENTATION_MIN_SHARE_OF_TOTAL:.0%} of {'the card' if T is not None else 'reserved memory'}: "
                    "the free space is fragmented; set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
                )
            else:
                reasons.append(
                    f"reserved-but-unallocated is {_gib(R)} against a {_gib(A)} request: not fragmentation "
                    f"(rule: ≥ the request and ≥ {FRAGMENTATION_MIN_SHARE_OF_TOTAL:.0%} of the card)"
                )
        if event.this_process_in_use == 0 and (event.allocated_by_pytorch or 0) > 0:
            unknowns.append(
                "the per-process figure says 0 bytes while PyTorch holds memory: NVML cannot see this process "
                "(containers), so other-process usage is unknown"
            )
        for pid, used in event.other_processes:
            reserved = event.reserved
            if reserved is not None and used >= reserved:
                unknowns.append(
                    f"process {pid} holds {_gib(used)}: probably this process seen under its host PID (containers); "
                    "if it is another job, free the GPU first"
                )
            else:
                reasons.append(f"another process ({pid}) holds {_gib(used)} of this GPU")

    big_frames = any(fn in _BIG_BLOCK_FUNCS or _BIG_BLOCK_CODE.search(src) for _, fn, src in frames)
    large = False
    if A is not None:
        if T is not None:
            large = A >= LONG_SAMPLE_MIN_BYTES and (
                A >= LONG_SAMPLE_SHARE_OF_TOTAL * T or (big_frames and A >= LONG_SAMPLE_SHARE_WITH_FRAMES * T)
            )
            share = f"{A / T:.0%} of the card" if T else "?"
        else:
            large = A >= LONG_SAMPLE_NO_TOTAL_BYTES
            share = "card size unknown"
            unknowns.append("the card's capacity (not in the message): the large-block rule used 2 GiB instead")
        if large and phase == "startup":
            reasons.append(
                f"one request of {_gib(A)} ({share}) during startup: a flattened weight, gradient or "
                "optimizer-state buffer, not an activation"
            )
        elif large:
            what = "a frame in attention/softmax/loss/logits" if big_frames else "no attention/loss frame to confirm it"
            reasons.append(
                f"one request of {_gib(A)} ({share}) is a large block, typical of a sequence² attention score "
                f"matrix or a tokens × vocabulary logits tensor ({what})"
            )
            if not big_frames:
                unknowns.append("whether the large block is attention or logits (no such frame in the traceback)")

    if phase is None:
        unknowns.append("what was running (no traceback frames in the log): startup, a training step, or generation")
    else:
        reasons.append(f"the traceback shows {phase.replace('-', ' ')}: {decided_by}")

    if phase == "inference":
        symptom = "inference-oom"
    elif phase == "startup":
        symptom = "startup-oom"
    elif large and event.has_sizes:
        symptom = "long-sample-oom"
        also.append("mid-run-oom")
    elif phase in ("training-step", "forward"):
        symptom = "mid-run-oom"
        if phase == "forward":
            also.append("inference-oom")
            unknowns.append("whether the forward pass was training or evaluation/generation")
    elif fragmentation:
        symptom = "mid-run-oom"
        reasons.append("fragmentation builds up over many steps, so this is most likely a mid-run OOM")
    else:
        symptom = None
        also.extend(["startup-oom", "mid-run-oom"])
    if symptom == "long-sample-oom" and phase is None:
        unknowns.append("whether the OOM happened in a training step or in generation")
    return SymptomGuess(
        symptom=symptom,
        phase=phase,
        fragmentation=fragmentation,
        also=tuple(a for a in also if a != symptom),
        reasons=tuple(reasons),
        unknowns=tuple(unknowns),
    )
