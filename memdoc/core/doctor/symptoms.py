"""The symptom knowledge base: `memdoc/data/symptoms.yaml`, loaded, validated and typed.

Each `Symptom` has an ordered list of `Prescription`s, cheapest first. A prescription's `lever` is
the plan change the bill can evaluate (`{checkpointing: full}`, `{method: qlora}`, …); its
vocabulary (`remedies.levers.LEVERS`) and its rank on the cost ladder (`remedies.levers.LADDER_RANK`,
derived from the ladder's rungs) live with the ladder. A symptom with `ladder: ascending` must follow
the ranks (and `descending` must follow them backwards).

Texts may hold placeholders `{name|generic words}` (`HINTS`): filled from the user's bill and plan
(`memdoc.core.doctor.hints`) with `Symptom.filled` / `Prescription.filled`, and by the generic
words otherwise, so no text states a figure that the bill for the same plan contradicts. Texts
without placeholders load as before (the keys are unchanged).
Everything here is plain data: no torch.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

from memdoc.core.remedies.levers import LEVERS, ladder_rank
from memdoc.errors import KnowledgeBaseError, UnknownSymptomError

__all__ = [
    "HINTS",
    "HOW_KEYS",
    "Prescription",
    "Symptom",
    "WHY",
    "fill",
    "get_prescription",
    "get_symptom",
    "list_symptoms",
    "load_symptoms",
    "time_cost_rank",
]

WHY = (
    "weights",
    "gradients",
    "optimizer",
    "activations",
    "logits",
    "temporaries",
    "fragmentation",
    "kv_cache",
    "time",
    "correctness",
)
"""Bill line items a prescription can shrink (`time` and `correctness` for non-memory symptoms)."""

HOW_KEYS = ("hf", "trl", "axolotl", "llamafactory", "deepspeed", "vllm", "pytorch", "env")
"""Where a prescription's switch lives: HF TrainingArguments, TRL SFTConfig/ModelConfig, Axolotl,
LLaMA-Factory, DeepSpeed JSON, vLLM engine args (mappings); a PyTorch call (text); env vars (mapping)."""


HINTS = (
    "model_states_per_param",
    "optimizer_per_param",
    "micro_batch_half",
    "grad_accum_keep",
    "micro_batch_double",
    "grad_accum_double",
    "max_length",
    "batch_half",
    "context_half",
)
"""Placeholder names a text may use (`{name|generic words}`); `memdoc.core.doctor.hints` computes them."""

_PLACEHOLDER = re.compile(r"\{([a-z_]+)\|([^{}]*)\}")


def fill(value: Any, values: dict[str, str] | None = None) -> Any:
    """`value` (text, or a mapping/list of them) with each `{name|generic}` replaced by `values[name]`,
    or by the generic words when `values` lacks it. A text that is one placeholder filled with an
    integer becomes that integer (a switch value)."""
    if isinstance(value, dict):
        return {k: fill(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, values) for v in value]
    if not isinstance(value, str) or "{" not in value:
        return value
    whole = _PLACEHOLDER.fullmatch(value.strip())
    if whole and values and whole.group(1) in values and str(values[whole.group(1)]).isdigit():
        return int(values[whole.group(1)])
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]) if values and m.group(1) in values else m.group(2), value)


def _placeholders(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set().union(*(_placeholders(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(_placeholders(v) for v in value)) if value else set()
    return {m.group(1) for m in _PLACEHOLDER.finditer(value)} if isinstance(value, str) else set()


def _templated(raw: dict, keys: tuple[str, ...], where: str) -> dict:
    """The raw values of `keys` that hold placeholders (to fill again with a plan's values)."""
    out = {}
    for key in keys:
        names = _placeholders(raw.get(key))
        unknown = names - set(HINTS)
        if unknown:
            raise _fail(where, f"unknown placeholder {sorted(unknown)}; known: {', '.join(HINTS)}")
        if names:
            out[key] = raw[key]
    return out


_PERCENT = re.compile(r"\+?(\d+(?:\.\d+)?)(?:\s*-\s*(\d+(?:\.\d+)?))?\s*%")
_TIMES = re.compile(r"(\d+(?:\.\d+)?)(?:\s*-\s*(\d+(?:\.\d+)?))?\s*x\s+slower")
UNSTATED_COST = 20.0
"""Rank of a time cost stated without a figure ('lower throughput', 'slower per token'): after every
free row and the few-percent ones, before checkpointing's +33%."""


def time_cost_rank(text: str) -> float:
    """A prescription's `time_cost` text as a number to sort by (percent of step time, midpoint of a
    range): 'none …' → 0, 'faster …' → −1, 'about +0-10%' → 5, '+33%' → 33, '5-10x slower' → 650;
    the first clause decides ('none for LoRA; about +20-30% for QLoRA' → 0); a cost without a figure
    ranks `UNSTATED_COST`."""
    first = text.split(";")[0].strip().lower()
    if first.startswith(("none", "negligible")):
        return 0.0
    if first.startswith("faster") or ("faster" in first and "%" not in first and "slower" not in first):
        return -1.0
    times = _TIMES.search(first)
    if times:
        low, high = float(times.group(1)), float(times.group(2) or times.group(1))
        return ((low + high) / 2 - 1) * 100
    percent = _PERCENT.search(first)
    if percent:
        low, high = float(percent.group(1)), float(percent.group(2) or percent.group(1))
        return -(low + high) / 2 if "faster" in first else (low + high) / 2
    if "a few %" in first:
        return 3.0
    return UNSTATED_COST


@dataclass(frozen=True, kw_only=True)
class Prescription:
    """One thing to try for a symptom."""

    id: str
    """Kebab-case, unique across all symptoms."""
    action: str
    """What to do, one sentence."""
    why: str
    """The bill line item it shrinks (one of `WHY`)."""
    time_cost: str
    """Its cost in step time, as text ('+33% compute')."""
    lever: dict[str, Any] | None
    """The plan change the bill can evaluate, or None."""
    how: dict[str, Any]
    """Switches per tool (keys from `HOW_KEYS`)."""
    detail: str | None = None
    """Caveats and reasoning."""
    template: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The raw values of the fields that hold `{name|generic}` placeholders."""

    def filled(self, values: dict[str, str] | None) -> Prescription:
        """This prescription with its placeholders filled from `values` (generic words where missing)."""
        if not self.template:
            return self
        return dataclasses.replace(self, **{k: fill(v, values) for k, v in self.template.items()})

    @property
    def rank(self) -> int | None:
        """Ladder rank of the lever (see `remedies.levers.LADDER_RANK`), None when off the ladder."""
        return ladder_rank(self.lever)


@dataclass(frozen=True, kw_only=True)
class Symptom:
    """A symptom, its causes and its prescriptions in the order to try them."""

    id: str
    title: str
    description: str
    ladder: str
    """'ascending', 'descending' or 'none': how prescriptions with ranked levers are ordered."""
    causes: tuple[str, ...]
    prescriptions: tuple[Prescription, ...]
    template: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The raw description/causes when they hold `{name|generic}` placeholders."""

    def filled(self, values: dict[str, str] | None) -> Symptom:
        """This symptom, its texts and its prescriptions filled from `values` (generic words where missing)."""
        changes: dict[str, Any] = {"prescriptions": tuple(p.filled(values) for p in self.prescriptions)}
        if "description" in self.template:
            changes["description"] = " ".join(fill(self.template["description"], values).split())
        if "causes" in self.template:
            changes["causes"] = tuple(fill(c, values).strip() for c in self.template["causes"])
        return dataclasses.replace(self, **changes)


_KEBAB = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


def _fail(where: str, problem: str) -> KnowledgeBaseError:
    return KnowledgeBaseError(f"symptoms.yaml, {where}: {problem}")


def _text(entry: dict, key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise _fail(where, f"'{key}' must be a non-empty string")
    return value.strip()


def _prescription(raw: Any, where: str) -> Prescription:
    if not isinstance(raw, dict):
        raise _fail(where, "a prescription must be a mapping")
    known = {"id", "action", "why", "time_cost", "lever", "how", "detail"}
    extra = set(raw) - known
    if extra:
        raise _fail(where, f"unknown keys {sorted(extra)}")
    pid = _text(raw, "id", where)
    where = f"{where} ({pid})"
    if not _KEBAB.match(pid):
        raise _fail(where, "id must be kebab-case")
    why = _text(raw, "why", where)
    if why not in WHY:
        raise _fail(where, f"why {why!r} is not one of {', '.join(WHY)}")
    lever = raw.get("lever")
    if lever is not None:
        if not isinstance(lever, dict) or not lever:
            raise _fail(where, "lever must be a non-empty mapping or null")
        for key, value in lever.items():
            if key not in LEVERS:
                raise _fail(where, f"unknown lever {key!r}; known: {', '.join(LEVERS)}")
            if value not in LEVERS[key]:
                raise _fail(where, f"lever {key}: {value!r} is not one of {list(LEVERS[key])}")
    how = raw.get("how")
    if how is None:
        how = {}
    if not isinstance(how, dict):
        raise _fail(where, "how must be a mapping")
    for key, value in how.items():
        if key not in HOW_KEYS:
            raise _fail(where, f"unknown how key {key!r}; known: {', '.join(HOW_KEYS)}")
        if key == "pytorch":
            if not isinstance(value, str) or not value.strip():
                raise _fail(where, "how.pytorch must be a call written as text")
        elif not isinstance(value, dict) or not value:
            raise _fail(where, f"how.{key} must be a non-empty mapping of setting to value")
    detail = raw.get("detail")
    if detail is not None and not isinstance(detail, str):
        raise _fail(where, "detail must be text")
    template = _templated(raw | {"how": how}, ("action", "time_cost", "how", "detail"), where)
    return Prescription(
        id=pid,
        action=fill(_text(raw, "action", where)),
        why=why,
        time_cost=fill(_text(raw, "time_cost", where)),
        lever=dict(lever) if lever else None,
        how=fill(dict(how)),
        detail=fill(detail),
        template=template,
    )


def _symptom(name: Any, raw: Any) -> Symptom:
    where = f"symptom {name!r}"
    if not isinstance(name, str) or not _KEBAB.match(name):
        raise _fail(where, "symptom names must be kebab-case strings")
    if not isinstance(raw, dict):
        raise _fail(where, "must be a mapping")
    extra = set(raw) - {"title", "description", "ladder", "causes", "prescriptions"}
    if extra:
        raise _fail(where, f"unknown keys {sorted(extra)}")
    ladder = raw.get("ladder", "none")
    if ladder not in ("ascending", "descending", "none"):
        raise _fail(where, "ladder must be ascending, descending or none")
    causes = raw.get("causes")
    if not isinstance(causes, list) or not causes or not all(isinstance(c, str) and c.strip() for c in causes):
        raise _fail(where, "causes must be a non-empty list of strings")
    items = raw.get("prescriptions")
    if not isinstance(items, list) or len(items) < 3:
        raise _fail(where, "needs at least 3 prescriptions")
    prescriptions = tuple(_prescription(p, f"{where}, prescription {i + 1}") for i, p in enumerate(items))
    ranks = [p.rank for p in prescriptions if p.rank is not None]
    ordered = sorted(ranks) if ladder == "ascending" else sorted(ranks, reverse=True)
    if ladder != "none" and ranks != ordered:
        raise _fail(where, f"prescriptions break the {ladder} cost ladder (ranks {ranks})")
    template = _templated(raw, ("description", "causes"), where)
    return Symptom(
        id=name,
        title=_text(raw, "title", where),
        description=" ".join(fill(_text(raw, "description", where)).split()),
        ladder=ladder,
        causes=tuple(fill(c).strip() for c in causes),
        prescriptions=prescriptions,
        template=template,
    )


def load_symptoms(text: str | None = None) -> dict[str, Symptom]:
    """Parse and validate the knowledge base (the bundled file unless `text` is given).

    Raises KnowledgeBaseError naming the entry on malformed data.
    """
    if text is None:
        text = resources.files("memdoc").joinpath("data", "symptoms.yaml").read_text(encoding="utf-8")
    try:
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise KnowledgeBaseError(f"symptoms.yaml is not valid YAML: {exc}") from None
    if not isinstance(data, dict) or not data:
        raise KnowledgeBaseError("symptoms.yaml must map symptom names to entries")
    symptoms = {name: _symptom(name, raw) for name, raw in data.items()}
    seen: dict[str, str] = {}
    for symptom in symptoms.values():
        for p in symptom.prescriptions:
            if p.id in seen:
                raise _fail(f"symptom {symptom.id!r}", f"prescription id {p.id!r} is already used by {seen[p.id]!r}")
            seen[p.id] = symptom.id
    return symptoms


@lru_cache(maxsize=1)
def _bundled() -> dict[str, Symptom]:
    return load_symptoms()


def list_symptoms() -> list[Symptom]:
    """All symptoms, in file order."""
    return list(_bundled().values())


def get_prescription(pid: str) -> Prescription:
    """The prescription with id `pid`, from whichever symptom holds it (ids are unique across the file)."""
    for symptom in _bundled().values():
        for p in symptom.prescriptions:
            if p.id == pid:
                return p
    raise KnowledgeBaseError(f"symptoms.yaml has no prescription {pid!r}")


def get_symptom(name: str) -> Symptom:
    """The symptom called `name` (case and '_' vs '-' forgiven); UnknownSymptomError otherwise."""
    symptoms = _bundled()
    key = str(name).strip().lower().replace("_", "-").replace(" ", "-")
    if key in symptoms:
        return symptoms[key]
    close = difflib.get_close_matches(key, list(symptoms), n=3, cutoff=0.5)
    hint = f"did you mean {' or '.join(close)}?" if close else None
    raise UnknownSymptomError(
        f"unknown symptom {name!r}; known symptoms: {', '.join(symptoms)}",
        hint=hint,
    )
