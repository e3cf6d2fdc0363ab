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
  tokens that can be stored in KV cache (M)" (format `vllm-kv-cache`);
- NCCL's "Cuda failure 'out of memory'" and host-RAM kills (SIGKILL: the kernel's oom-killer,
  torchrun's `exitcode: -9`, a DataLoader worker killed by signal, a shell's "Killed"), read by
  `memdoc.core.doctor.oom_kinds`.

Every event has a `kind` (`oom_event.KINDS`): cuda-oom, cuda-error, nccl-oom, host-oom, vllm-kv.

Logs are messy: the text is normalised first (`memdoc.core.doctor.logtext`); clause patterns accept
any whitespace between words, so wrapped messages parse; if nothing is found, lines are joined
without separators and parsed again (mid-word breaks). One message repeated (several ranks) is one
event with a `count`. Parsing never raises. What an event means: `oom_symptom`, `oom_causes`.

Figures and their precision: `memdoc.core.doctor.oom_event`.
"""

from __future__ import annotations

import re
from dataclasses import replace

from memdoc.core.doctor.logtext import normalise_log
from memdoc.core.doctor.oom_event import OomEvent, size_to_bytes
from memdoc.core.doctor.oom_kinds import parse_host_kills, parse_nccl
from memdoc.core.doctor.oom_vllm import with_log_figures

__all__ = ["first_oom", "parse_oom_log"]


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
    (re.compile(r"#\s*(?:GPU|CUDA) blocks:\s*0\b"), "no-cache-blocks"),
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


_LEGACY_NAMES = {
    "total capacity": "total",
    "already allocated": "already_allocated",
    "free": "free",
    "allowed": "allowed",
    "reserved in total by PyTorch": "reserved_total",
    "cached": "cached",
}
"""The legacy text's figure names → `OomEvent` fields."""

_CURRENT_CLAUSES = (
    ("total", _CUR_CAPACITY),
    ("free", _CUR_FREE),
    ("this_process_in_use", _CUR_THIS),
    ("allowed", _CUR_ALLOWED),
    ("allocated_by_pytorch", _CUR_ALLOC),
    ("allocated_in_private_pools", _CUR_POOLS),
    ("reserved_unallocated", _CUR_UNALLOC),
)
"""The current text's clauses: `OomEvent` field and pattern (the capacity also gives the GPU index)."""


def _legacy_figures(text: str, legacy: re.Match[str], window_end: int, fields: dict) -> tuple[int, bool, str | None]:
    """The legacy '(GPU d; T total capacity; …)' figures into `fields`.

    Returns (where the figures end, whether the parenthesis closed, the variant)."""
    fields["gpu"] = int(legacy.group(1))
    close = text.find(")", legacy.end(), window_end)
    body_end = close if close != -1 else window_end
    for item in text[legacy.end() : body_end].split(";"):
        im = _LEGACY_ITEM.match(item)
        if im:
            key = re.sub(r"\s+", " ", im.group(3))
            fields[_LEGACY_NAMES.get(key, key)] = _size(im, 1)
    fields["allocated_by_pytorch"] = fields.get("already_allocated")
    variant = "legacy-cached" if fields.get("cached") is not None else None
    if close != -1:
        return close + 1, True, variant
    return body_end, False, variant


def _current_figures(text: str, offset: int, window_end: int, fields: dict) -> tuple[int, bool, str | None]:
    """The current text's clauses after `offset` (the end of 'Tried to allocate A') into `fields`.

    Returns (where the last clause found ends, whether the closing 'reserved … but unallocated'
    clause is there, the variant)."""
    region = text[offset:window_end]
    last, variant = offset, None
    for name, pattern in _CURRENT_CLAUSES:
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
    return last, fields.get("reserved_unallocated") is not None, variant


def _advice(text: str, last: int, end_limit: int, fields: dict) -> tuple[int, bool]:
    """The advice sentence and documentation pointer, searched just after the figures (which end at
    `last`), into `fields`. Returns (where the message ends, whether the documentation sentence is there)."""
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
    return end, doc is not None


def _parse_sized(text: str, m: re.Match[str], end_limit: int) -> OomEvent:
    """The message whose 'Tried to allocate' is `m`, read no further than `end_limit` (the next message)."""
    start = m.start()
    window_end = min(end_limit, m.end() + _CLAUSE_WINDOW)
    fields: dict = {"requested": _size(m, 2), "backend": m.group(1) or "CUDA", "position": start}
    fields["exception_type"] = _exception_before(text, start)
    legacy = _LEGACY_OPEN.match(text, m.end())
    if legacy:
        last, complete, variant = _legacy_figures(text, legacy, window_end, fields)
    else:
        last, complete, variant = _current_figures(text, m.end(), window_end, fields)
    end, doc = _advice(text, last, end_limit, fields)
    incomplete = not complete or (fields.get("advice") is not None and not doc)
    fields["truncated"] = incomplete and end_limit >= len(text) and _looks_like_cut(text[last:])
    if legacy and complete and not fields.get("advice"):
        variant = variant or "no-advice"
    if fields["backend"] == "HIP":
        fmt = "hip"
        if legacy:
            variant = "legacy"
    else:
        fmt = "cuda-legacy" if legacy else "cuda-current"
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
            event = OomEvent(
                format="vllm-kv-cache",
                variant=variant,
                backend="CUDA",
                exception_type=_exception_before(text, m.start()),
                status=re.sub(r"\s+", " ", m.group(0)),
                position=m.start(),
                raw=re.sub(r"\s+", " ", m.group(0)),
                **fields,
            )
            events.append(with_log_figures(event, text))
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
        e.variant if e.kind == "host-oom" else None,
        e.pid,
        e.rank,
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
        events.extend(parse_nccl(text))
        events.extend(parse_host_kills(text))
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
    """The first out-of-memory message in `text`, or None.

    The GPU's own message comes first when there is one: a host kill in the same log (torchrun
    killing the other ranks, the scheduler reaping the job) is then a consequence, not the cause."""
    events = parse_oom_log(text)
    return next((e for e in events if e.on_device), next(iter(events), None))
