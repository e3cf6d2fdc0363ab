"""Read a training dataset and count each sample's tokens (`memdoc bill --dataset`).

I/O only; the statistics and the fit are `memdoc.core.remedies.dataset_fit`. transformers is
imported when a tokenizer is loaded, never on the plain `bill` path.

Files: ``.jsonl`` (one JSON object a line), ``.json`` (a list of objects, an object holding one
such list, or JSON lines), ``.parquet`` (needs pyarrow), ``.csv`` (a header row).

The text of a sample, unless ``--text-field`` names it: the first of ``messages`` /
``conversations`` (chat: a list of {role, content}, or ShareGPT's {from, value}), ``text``,
``content``, ``prompt`` + ``completion``, ``instruction`` + ``input`` + ``output``, ``question`` +
``answer`` that the first record has. Chat samples go through the tokenizer's chat template
(`apply_chat_template`), so role markers and special tokens count; plain text is tokenized with
the tokenizer's special tokens (BOS/EOS) added. Field pairs are joined (prompt + completion
directly, the others with a newline); a trainer's own prompt template, if any, is not counted.
Samples without the field are skipped and counted.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from memdoc.core.model.gpu import GpuSpec
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import TrainingPlan
from memdoc.core.model.vision.registry import RULES
from memdoc.core.remedies.dataset_fit import dataset_fit, packed_rows
from memdoc.core.remedies.dataset_vision import image_report, sample_images, sample_lengths
from memdoc.errors import DatasetError, PlanError
from memdoc.resolve.dataset_images import has_images, image_sizes
from memdoc.resolve.inputs import MiB, open_regular, read_text, shown, size_text

FORMATS = (".jsonl", ".json", ".parquet", ".csv")
CHAT_FIELDS = ("messages", "conversations")
TEXT_FIELDS = ("text", "content")
JOINED_FIELDS = (("prompt", "completion"), ("instruction", "input", "output"), ("question", "answer"))
BATCH = 1000
"""Samples per tokenizer call (fast tokenizers parallelise within a batch)."""
_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}


@dataclass(frozen=True)
class TokenCounts:
    counts: list[int]
    """Tokens per sample, in file order (skipped samples left out)."""
    field: str
    """The field(s) read, e.g. 'messages (chat template)' or 'prompt+completion'."""
    skipped: int
    """Records without the field."""
    rows: tuple[int, ...] = ()
    """The record index of each count (records without text are skipped)."""


# ------------------------------------------------------------------ reading
MAX_DATASET_BYTES = 1024 * MiB
"""The largest dataset file read (1 GiB): each record is tokenized, in memory; the lengths of a sample of a larger
dataset fit the plan as well."""


def read_records(path: Path) -> list[dict]:
    """The records of a dataset file, as dicts."""
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise DatasetError(
            f"--dataset {path}: unknown format {suffix or '(no extension)'!r}; use one of {', '.join(FORMATS)}"
        )
    if suffix == ".parquet":
        return _read_parquet(path)
    text = read_text(path, what="--dataset", limit=MAX_DATASET_BYTES, error=DatasetError)
    if suffix == ".csv":
        csv.field_size_limit(sys.maxsize)
        return list(csv.DictReader(text.splitlines()))
    if suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            return _json_lines(path, text)  # JSON lines saved as .json
        return _records_in(path, data)
    return _json_lines(path, text)


def _json_lines(path: Path, text: str) -> list[dict]:
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}:{number}: not a JSON object ({exc.msg})") from None
        if not isinstance(record, dict):
            raise DatasetError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
        out.append(record)
    return out


def _records_in(path: Path, data) -> list[dict]:
    if isinstance(data, dict):
        lists = [v for v in data.values() if isinstance(v, list) and v and isinstance(v[0], dict)]
        if len(lists) != 1:
            raise DatasetError(f"{path}: expected a list of records (or an object holding exactly one such list)")
        data = lists[0]
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise DatasetError(f"{path}: expected a list of JSON objects")
    return data


def _read_parquet(path: Path) -> list[dict]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DatasetError(
            "reading Parquet needs the pyarrow package, which is not installed",
            hint="pip install pyarrow (or memdoc[dataset]), or convert the file to JSONL",
        ) from None
    with open_regular(path, what="--dataset", error=DatasetError) as fh:
        if os.fstat(fh.fileno()).st_size > MAX_DATASET_BYTES:
            raise DatasetError(f"--dataset {shown(path)} is larger than {size_text(MAX_DATASET_BYTES)}")
        try:
            return pq.read_table(fh).to_pylist()
        except (OSError, ValueError) as exc:  # pyarrow.ArrowInvalid is a ValueError
            raise DatasetError(f"cannot read Parquet file {shown(path)}: {exc}") from None


# ------------------------------------------------------------------ the text of a sample
def pick_field(record: dict, text_field: str | None) -> tuple[str, ...]:
    """The field(s) holding a sample's text: `text_field`, or the first known one in `record`."""
    if text_field is not None:
        if text_field not in record:
            raise DatasetError(
                f"--text-field {text_field!r} is not in the dataset (fields: {', '.join(map(str, record))})"
            )
        return (text_field,)
    for name in CHAT_FIELDS + TEXT_FIELDS:
        if name in record:
            return (name,)
    for names in JOINED_FIELDS:
        if all(n in record for n in names[:2]):
            return names
    raise DatasetError(f"no text field found (fields: {', '.join(map(str, record))})", hint="pass --text-field NAME")


def _chat(value) -> list[dict] | None:
    """A list of {role, content} messages, or None when `value` is not a conversation."""
    if not isinstance(value, list) or not value or not all(isinstance(m, dict) for m in value):
        return None
    if all("role" in m for m in value):
        return [{"role": m["role"], "content": m.get("content") or ""} for m in value]
    if all("from" in m and "value" in m for m in value):
        return [
            {"role": _SHAREGPT_ROLES.get(str(m["from"]).lower(), str(m["from"])), "content": m["value"] or ""}
            for m in value
        ]
    return None


def sample_of(record: dict, fields: tuple[str, ...]):
    """A sample's text (str), its conversation (list of messages), or None when the record lacks it."""
    values = [record.get(f) for f in fields]
    if values[0] is None:
        return None
    if len(fields) == 1:
        value = values[0]
        if isinstance(value, str) and fields[0] in CHAT_FIELDS and value.lstrip().startswith("["):
            try:  # a conversation stored as a JSON string (CSV columns)
                value = json.loads(value)
            except json.JSONDecodeError:
                pass
        if isinstance(value, str):
            return value
        if isinstance(value, list):
            return _chat(value)
        return None
    chats = [_chat(v) for v in values]
    if all(c is not None for c in chats):  # conversational prompt/completion (TRL)
        return [m for c in chats for m in c]
    joiner = "" if fields[0] == "prompt" else "\n"
    return joiner.join(str(v) for v in values if v not in (None, ""))


# ------------------------------------------------------------------ tokenizing
def load_tokenizer(name: str):
    """A fast tokenizer from a directory or a Hub id (offline: the local HF cache only)."""
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(name, use_fast=True)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DatasetError(
            f"cannot load the tokenizer {name!r}: {first}",
            hint="pass --tokenizer DIR (a directory with tokenizer.json / tokenizer_config.json)",
        ) from None
    tokenizer.model_max_length = 1 << 62  # count, never truncate (and no "longer than the maximum" warning)
    return tokenizer


def count_tokens(
    path: Path,
    tokenizer_name: str,
    text_field: str | None = None,
    progress: Callable[[str, float], None] | None = None,
    records: list[dict] | None = None,
) -> TokenCounts:
    """Tokens per sample of the dataset at `path` (its `records` when already read), tokenized in batches of
    `BATCH`."""
    records = read_records(path) if records is None else records
    if not records:
        raise DatasetError(f"--dataset {path} has no records")
    fields = pick_field(records[0], text_field)
    samples = [sample_of(r, fields) for r in records]
    rows = tuple(i for i, s in enumerate(samples) if s is not None and s != "")
    kept = [samples[i] for i in rows]
    skipped = len(samples) - len(kept)
    if not kept:
        raise DatasetError(f"no record of {path} has text in {'+'.join(fields)!r}", hint="pass --text-field NAME")
    tokenizer = load_tokenizer(tokenizer_name)
    chat = any(isinstance(s, list) for s in kept)
    if chat and not getattr(tokenizer, "chat_template", None):
        raise DatasetError(
            f"{'+'.join(fields)} holds conversations but the tokenizer {tokenizer_name!r} has no chat template",
            hint="pass --tokenizer of the chat model you fine-tune, or --text-field with plain text",
        )
    counts: list[int] = []
    for start in range(0, len(kept), BATCH):
        batch = kept[start : start + BATCH]
        texts = [s for s in batch if isinstance(s, str)]
        convs = [s for s in batch if isinstance(s, list)]
        lengths = {}
        if texts:
            ids = tokenizer(texts, add_special_tokens=True, return_attention_mask=False)["input_ids"]
            lengths.update(zip((i for i, s in enumerate(batch) if isinstance(s, str)), map(len, ids)))
        if convs:
            rendered = tokenizer.apply_chat_template(convs, tokenize=False)
            ids = tokenizer(rendered, add_special_tokens=False, return_attention_mask=False)["input_ids"]
            lengths.update(zip((i for i, s in enumerate(batch) if isinstance(s, list)), map(len, ids)))
        counts.extend(lengths[i] for i in range(len(batch)))
        if progress is not None:
            progress(
                f"{min(start + BATCH, len(kept)):,} / {len(kept):,} samples", min(1.0, (start + BATCH) / len(kept))
            )
    name = "+".join(fields) + (" (chat template)" if chat else "")
    return TokenCounts(counts=counts, field=name, skipped=skipped, rows=rows)


def dataset_section(
    path: Path,
    tokenizer: str,
    text_field: str | None,
    model: ModelSpec,
    plan: TrainingPlan,
    gpu: GpuSpec | None,
    *,
    seq_cap: int | None,
    progress: Callable[[str, float], None] | None = None,
) -> dict:
    """`memdoc bill --dataset`: tokenize the dataset and fit its lengths to the plan; the JSON `dataset` object,
    with an `images` object when a vision-language model's dataset carries images: then the fit is of the language
    model's sequences (text + image tokens, `dataset_vision.sample_lengths`) and `images.peak.bill` bills the
    sample that peaks, its vision encoder included (`peak_sample_bill`)."""
    records = read_records(path)
    tokens = count_tokens(path, tokenizer, text_field, progress=progress, records=records)
    images, counts = dataset_images(path, records, tokens, model.image_family, plan)
    if images is not None:
        if "peak" in images and gpu is not None:
            images["peak"]["bill"] = peak_sample_bill(model, plan, gpu, images["peak"])
    fit = dataset_fit(counts, model, plan.replace(images_per_sample=0, video_frames=0), gpu, seq_cap=seq_cap)
    return {
        "file": str(path),
        "tokenizer": tokenizer,
        "text_field": tokens.field,
        "skipped": tokens.skipped,
        "micro_batch": plan.micro_batch,
        **fit.to_json(),
        "packed": packed_rows(tokens.counts, plan.seq_len),
        **({"images": images} if images is not None else {}),
    }


def peak_sample_bill(model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec, peak: dict) -> dict:
    """The bill of micro-batches of the dataset's peak sample: the language model at its text + image tokens, the
    vision encoder at its patches (`billing.vision_bill.vision_bill` with the sample's tokens)."""
    from memdoc.core.billing.bill import compute_bill
    from memdoc.core.billing.vision_bill import vision_bill

    sample = plan.replace(seq_len=peak["text_tokens"], images_per_sample=max(peak["images"], 1), video_frames=0)
    lm = compute_bill(model, plan.replace(seq_len=peak["total_tokens"], images_per_sample=0, video_frames=0), gpu)
    bill = vision_bill(model, sample, lm, (peak["image_tokens"], peak["encoder_tokens"]))
    return {
        "peak_allocated": bill.peak_allocated,
        "process_total": bill.process_total,
        "fits": bill.fits,
        "vision_saved": bill.acts.vision.saved,
        "encoder_tokens": bill.acts.vision.encoder_tokens,
    }


def dataset_images(
    path: Path, records: list[dict], tokens: TokenCounts, model_type: str, plan
) -> tuple[dict | None, list[int]]:
    """(the `images` object of `bill --dataset` (`dataset_vision.image_report`), each sample's language-model
    sequence: text + image tokens (`dataset_vision.sample_lengths`)); (None, the text counts) when the model takes
    no images (`vision.registry.RULES`) or no record has any."""
    if model_type not in RULES or not has_images(records):
        return None, tokens.counts
    sizes = image_sizes([records[i] for i in tokens.rows], path.parent)
    images = sample_images(sizes, model_type, plan)
    return image_report(tokens.counts, images, list(tokens.rows)), sample_lengths(tokens.counts, images)


def with_dataset_documents(setup, section: dict | None):
    """The setup (`memdoc.resolve.setup.Setup`) of `bill --dataset`: with `--packing` and no
    `--document-tokens`, the dataset's length-weighted mean document (`dataset_fit.packed_rows`) sets the packed
    rows' attention; otherwise `setup` as it is."""
    if section is None or not setup.plan.packing or setup.plan.document_tokens is not None:
        return setup
    documents = section["packed"]["document_tokens"]
    return dataclasses.replace(setup, plan=setup.plan.replace(document_tokens=documents)) if documents else setup


def check_dataset_flags(dataset: Path | None, *, tokenizer_given: bool, inference: bool) -> None:
    """Before any work: --tokenizer and --text-field need --dataset FILE, which fits training samples only."""
    if dataset is None and tokenizer_given:
        raise PlanError("--tokenizer and --text-field go with --dataset FILE")
    if dataset is not None and inference:
        raise PlanError("--dataset fits training samples; it does not apply to --inference")
