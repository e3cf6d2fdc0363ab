"""OOM log parser: the public-issue corpus, generated messages, and arbitrary text."""

from __future__ import annotations

import re

import pytest
import yaml
from conftest import FIXTURES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memdoc.core.doctor.oom import first_oom, parse_oom_log
from memdoc.core.doctor.oom_event import OomEvent, size_to_bytes
from memdoc.core.doctor.oom_symptom import infer_symptom

CORPUS = yaml.safe_load((FIXTURES / "oom-corpus.yaml").read_text(encoding="utf-8"))

# corpus (format, variant) -> OomEvent (format, variant)
FORMAT_MAP = {
    ("current", None): ("cuda-current", None),
    ("typo", None): ("cuda-current", "capacty-typo"),
    ("legacy", None): ("cuda-legacy", None),
    ("legacy", "no-advice"): ("cuda-legacy", "no-advice"),
    ("legacy", "legacy-cached"): ("cuda-legacy", "legacy-cached"),
    ("hip", None): ("hip", None),
    ("cublas", None): ("cublas-alloc", None),
    ("other", "cuda-runtime-oom"): ("cuda-generic", "cuda-runtime-oom"),
    ("other", "thc-legacy"): ("cuda-generic", "thc-legacy"),
}
# corpus figure -> OomEvent attribute
SIZE_FIELDS = {
    "requested": "requested",
    "total_capacity": "total",
    "free": "free",
    "allocated_by_pytorch": "allocated_by_pytorch",
    "reserved_unallocated": "reserved_unallocated",
    "reserved_total_by_pytorch": "reserved_total",
    "cached": "cached",
    "this_process_in_use": "this_process_in_use",
    "allowed": "allowed",
    "allocated_in_private_pools": "allocated_in_private_pools",
}
PLAIN_FIELDS = {
    "exception_type": "exception_type",
    "backend": "backend",
    "gpu_index": "gpu",
    "advice": "advice",
    "alloc_conf_var": "alloc_conf_var",
    "truncated": "truncated",
    "status": "status",
    "call": "call",
}


def _bytes(text: str) -> int:
    number, unit = text.split()
    return size_to_bytes(number, unit)


def _id(entry: dict) -> str:
    return entry["source"].split("github.com/")[-1]


def test_corpus_has_every_entry():
    assert len(CORPUS) == 24


@pytest.mark.parametrize("entry", CORPUS, ids=_id)
def test_corpus_entry(entry):
    exp = entry["expected"]
    events = parse_oom_log(entry["text"])
    assert len(events) == 1, "one OOM event per corpus entry (repeats collapsed)"
    event = events[0]
    assert (event.format, event.variant) == FORMAT_MAP[(exp["format"], exp.get("variant"))]
    for key, attr in SIZE_FIELDS.items():
        if key in exp:
            want = None if exp[key] is None else _bytes(exp[key])
            assert getattr(event, attr) == want, key
    for key, attr in PLAIN_FIELDS.items():
        if key in exp:
            assert getattr(event, attr) == exp[key], key
    if "other_processes" in exp:
        want = tuple((p["pid"], _bytes(p["in_use"])) for p in exp["other_processes"] or ())
        assert event.other_processes == want
    assert event.raw and event.raw in re.sub(r"\s+", " ", event.raw)


# corpus format -> kind: the caching allocator's sized message is cuda-oom; size-less library/runtime
# statuses are cuda-error (memdoc.core.doctor.oom_event.KINDS)
KIND_OF_CORPUS_FORMAT = {
    "current": "cuda-oom",
    "typo": "cuda-oom",
    "legacy": "cuda-oom",
    "hip": "cuda-oom",
    "cublas": "cuda-error",
    "other": "cuda-error",
}


@pytest.mark.parametrize("entry", CORPUS, ids=_id)
def test_corpus_entry_kind(entry):
    (event,) = parse_oom_log(entry["text"])
    assert event.kind == KIND_OF_CORPUS_FORMAT[entry["expected"]["format"]]
    assert event.on_device and first_oom(entry["text"]) == event


def test_repeated_message_is_collapsed_with_count():
    entry = next(e for e in CORPUS if "MMed-RAG" in e["source"])
    (event,) = parse_oom_log(entry["text"])
    assert event.count == 2 and event.advice == "max_split_size_mb"


def test_truncated_only_where_the_text_stops_mid_message():
    assert [_id(e) for e in CORPUS if parse_oom_log(e["text"])[0].truncated] == ["unslothai/unsloth/issues/1144"]


# ---------------------------------------------------------------------------------------------
# Hand-made layouts the corpus lacks

CURRENT = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of "
    "79.19 GiB of which 1.02 GiB is free. Process 4242 has 10.00 GiB memory in use. Process 4343 has 512.00 MiB "
    "memory in use. Including non-PyTorch memory, this process has 67.50 GiB memory in use. Of the allocated "
    "memory 60.00 GiB is allocated by PyTorch, and 6.00 GiB is reserved by PyTorch but unallocated. If reserved "
    "but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
    "fragmentation.  See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)


def _wrap(text: str, width: int) -> list[str]:
    lines, line = [], ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return lines + [line]


@pytest.mark.parametrize(
    "prefix",
    [
        "[rank0]: ",
        "[default3]:",
        "2024-05-01 12:00:00,123 - ERROR - ",
        "ERROR 10-11 12:27:29 engine.py:157] ",
        "(VllmWorker rank=1 pid=77) ERROR 06-05 06:18:13 [multiproc_executor.py:470] ",
        "> ",
        "0: ",
        "E0501 12:00:00.123456 1234 trainer.py:88] ",
    ],
)
def test_wrapped_lines_with_log_prefixes(prefix):
    text = "\n".join(prefix + line for line in _wrap(CURRENT, 60))
    event = first_oom(text)
    assert event is not None
    assert event.gpu == 3
    assert event.requested == 2 * 1024**3
    assert event.total == size_to_bytes("79.19", "GiB")
    assert event.other_processes == ((4242, 10 * 1024**3), (4343, 512 * 1024**2))
    assert event.this_process_in_use == size_to_bytes("67.50", "GiB")
    assert event.reserved_unallocated == 6 * 1024**3
    assert event.non_pytorch == size_to_bytes("67.50", "GiB") - 66 * 1024**3
    assert not event.truncated


def test_hard_wrap_mid_word():
    flat = CURRENT
    text = "\n".join(flat[i : i + 70] for i in range(0, len(flat), 70))
    event = first_oom(text)
    assert event is not None and event.requested == 2 * 1024**3 and event.reserved_unallocated == 6 * 1024**3


def test_ranks_repeating_the_same_message_collapse():
    text = "\n".join(f"[rank{r}]: {CURRENT}" for r in range(4))
    (event,) = parse_oom_log(text)
    assert event.count == 4


def test_different_messages_stay_apart():
    other = CURRENT.replace("Tried to allocate 2.00 GiB", "Tried to allocate 4.00 GiB")
    events = parse_oom_log(CURRENT + "\n" + other)
    assert [e.requested for e in events] == [2 * 1024**3, 4 * 1024**3]


def test_legacy_allowed_clause_and_cudnn():
    text = (
        "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 14.76 GiB total capacity; "
        "12.57 GiB already allocated; 3.69 MiB free; 2.40 GiB allowed; 12.66 GiB reserved in total by PyTorch)\n"
        "later: RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED"
    )
    legacy, cudnn = parse_oom_log(text)
    assert legacy.allowed == size_to_bytes("2.40", "GiB") and legacy.reserved_total == size_to_bytes("12.66", "GiB")
    assert legacy.unused_reserved == size_to_bytes("12.66", "GiB") - size_to_bytes("12.57", "GiB")
    assert cudnn.format == "cudnn" and cudnn.status == "CUDNN_STATUS_ALLOC_FAILED"


def test_html_and_ansi_are_removed():
    text = "<td>\x1b[31mtorch.OutOfMemoryError\x1b[0m</td><td>: " + CURRENT.split(": ", 1)[1] + "</td>"
    event = first_oom(text)
    assert event.exception_type == "torch.OutOfMemoryError" and event.gpu == 3


@pytest.mark.parametrize(
    "text", ["", "all good", "Tried to allocate", "CUDA out of memory.", "Tried to allocate 99999999999999999999 GiB"]
)
def test_no_event(text):
    assert parse_oom_log(text) == [] and first_oom(text) is None


def test_non_string_input_does_not_raise():
    assert parse_oom_log(None) == []  # type: ignore[arg-type]
    assert parse_oom_log(CURRENT.encode())[0].gpu == 3  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Property tests: generated messages

_SCALES = {"bytes": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}


def _torch_format(n: int) -> str:
    """c10::format_size as PyTorch prints it."""
    if n <= 1024:
        return f"{n} bytes"
    if n <= 1024**2:
        return f"{n / 1024:.2f} KiB"
    if n <= 1024**3:
        return f"{n / 1024**2:.2f} MiB"
    return f"{n / 1024**3:.2f} GiB"


@st.composite
def sizes(draw):
    """(bytes, printed text, tolerance in bytes) in torch's own format or a random unit."""
    n = draw(st.integers(min_value=0, max_value=300 * 1024**4))
    if draw(st.booleans()):
        text = _torch_format(n)
    else:
        unit = draw(st.sampled_from(list(_SCALES)))
        text = f"{n} bytes" if unit == "bytes" else f"{n / _SCALES[unit]:.2f} {unit}"
    unit = text.split()[1]
    tolerance = 0 if unit == "bytes" else _SCALES[unit] // 200 + 1  # half of the last printed digit
    return n, text, tolerance


def _close(got, want):
    n, _, tol = want
    return got is not None and abs(got - n) <= tol


_SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(
    gpu=st.integers(0, 15),
    a=sizes(),
    t=sizes(),
    f=sizes(),
    m=sizes(),
    r=sizes(),
    p=sizes(),
    typo=st.booleans(),
    with_process=st.booleans(),
    backend=st.sampled_from(["CUDA", "HIP"]),
)
def test_generated_current_messages(gpu, a, t, f, m, r, p, typo, with_process, backend):
    process = f"Including non-PyTorch memory, this process has {p[1]} memory in use. " if with_process else ""
    text = (
        f"torch.OutOfMemoryError: {backend} out of memory. Tried to allocate {a[1]}. GPU {gpu} has a total "
        f"capac{'' if typo else 'i'}ty of {t[1]} of which {f[1]} is free. {process}Of the allocated memory {m[1]} "
        f"is allocated by PyTorch, and {r[1]} is reserved by PyTorch but unallocated. If reserved but unallocated "
        f"memory is large try setting PYTORCH_{backend}_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
        "  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )
    (event,) = parse_oom_log(text)
    assert event.gpu == gpu and event.backend == backend
    assert event.format == ("hip" if backend == "HIP" else "cuda-current")
    assert _close(event.requested, a) and _close(event.total, t) and _close(event.free, f)
    assert _close(event.allocated_by_pytorch, m) and _close(event.reserved_unallocated, r)
    assert (_close(event.this_process_in_use, p)) if with_process else event.this_process_in_use is None
    assert not event.truncated


@_SETTINGS
@given(
    gpu=st.integers(0, 15),
    a=sizes(),
    t=sizes(),
    m=sizes(),
    f=sizes(),
    r=sizes(),
    cached=st.booleans(),
    prefix=st.sampled_from(["", "RuntimeError: ", "[rank1]: "]),
)
def test_generated_legacy_messages(gpu, a, t, m, f, r, cached, prefix):
    last = f"{r[1]} cached" if cached else f"{r[1]} reserved in total by PyTorch"
    text = (
        f"{prefix}CUDA out of memory. Tried to allocate {a[1]} (GPU {gpu}; {t[1]} total capacity; "
        f"{m[1]} already allocated; {f[1]} free; {last})"
    )
    (event,) = parse_oom_log(text)
    assert event.format == "cuda-legacy" and event.gpu == gpu
    assert _close(event.requested, a) and _close(event.total, t) and _close(event.free, f)
    assert _close(event.already_allocated, m) and event.allocated_by_pytorch == event.already_allocated
    assert _close(event.cached if cached else event.reserved_total, r)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.text())
def test_never_raises_on_arbitrary_text(text):
    events = parse_oom_log(text)
    assert isinstance(events, list) and all(isinstance(e, OomEvent) for e in events)
    for e in events:
        infer_symptom(e, text)


@settings(max_examples=100, deadline=None)
@given(
    st.text(
        alphabet=st.sampled_from(
            list("Tried to allocate GiB MiB (GPU 0; 1.5 ) of which is free CUDA out of memory.\n[rank0]: <>")
        )
    )
)
def test_never_raises_on_near_miss_text(text):
    for e in parse_oom_log(text):
        infer_symptom(e, text)


# ---------------------------------------------------------------------------------------------
# infer_symptom


def _entry(fragment: str) -> dict:
    return next(e for e in CORPUS if fragment in e["source"])


def test_no_event_is_not_a_guess():
    guess = infer_symptom(None, "")
    assert guess.symptom is None and guess.unknowns


def test_fragmentation_rule():
    e = _entry("minerva-benchmarks")
    guess = infer_symptom(first_oom(e["text"]), e["text"])
    assert guess.fragmentation and guess.symptom == "mid-run-oom"
    assert any("what was running" in u for u in guess.unknowns)
    clean = _entry("pytorch/issues/16417")
    assert not infer_symptom(first_oom(clean["text"]), clean["text"]).fragmentation


def test_inference_from_vllm_frames():
    e = _entry("vllm/issues/9290")
    assert infer_symptom(first_oom(e["text"]), e["text"]).symptom == "inference-oom"


def test_startup_from_optimizer_state_creation():
    e = _entry("DeepSpeed/issues/237")
    guess = infer_symptom(first_oom(e["text"]), e["text"])
    assert guess.symptom == "startup-oom" and guess.phase == "startup"


def test_optimizer_step_is_mid_run():
    e = _entry("LlamaFactory/issues/7532")
    guess = infer_symptom(first_oom(e["text"]), e["text"])
    assert guess.symptom == "mid-run-oom" and guess.phase == "optimizer"
    assert any("host PID" in u for u in guess.unknowns)


TRACE = (
    'Traceback (most recent call last):\n  File "train.py", line 10, in <module>\n    '
    '{code}\n  File "/x/{path}", line 5, in {func}\n    return f(x)\n'
)


@pytest.mark.parametrize(
    ("code", "path", "func", "symptom"),
    [
        ("model = AutoModelForCausalLM.from_pretrained(name)", "modeling_utils.py", "from_pretrained", "startup-oom"),
        ("model.cuda()", "torch/nn/modules/module.py", "_apply", "startup-oom"),
        ("loss.backward()", "torch/autograd/__init__.py", "backward", "mid-run-oom"),
        ("optimizer.step()", "torch/optim/adamw.py", "step", "mid-run-oom"),
        ("out = model.generate(**inputs)", "transformers/generation/utils.py", "generate", "inference-oom"),
    ],
)
def test_phase_rules(code, path, func, symptom):
    log = TRACE.format(code=code, path=path, func=func) + (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of "
        "23.65 GiB of which 11.06 MiB is free. Of the allocated memory 22.90 GiB is allocated by PyTorch, and "
        "194.87 MiB is reserved by PyTorch but unallocated."
    )
    assert infer_symptom(first_oom(log), log).symptom == symptom


def test_large_logits_block_is_long_sample():
    log = TRACE.format(
        code="loss = outputs.loss", path="transformers/loss/loss_utils.py", func="fixed_cross_entropy"
    ) + (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 0 has a total capacity of "
        "79.19 GiB of which 1.00 GiB is free. Of the allocated memory 70.00 GiB is allocated by PyTorch, and "
        "1.00 GiB is reserved by PyTorch but unallocated."
    )
    guess = infer_symptom(first_oom(log), log)
    assert guess.symptom == "long-sample-oom" and "mid-run-oom" in guess.also


def test_sizeless_message_is_diagnosed_with_its_assumption():
    e = _entry("RFB_ESRGAN")
    guess = infer_symptom(first_oom(e["text"]), e["text"])
    assert guess.symptom == "startup-oom" and any("no figures" in u for u in guess.unknowns)
    assert guess.assumptions and "--symptom" in guess.assumptions[0]
