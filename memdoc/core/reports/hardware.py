"""`memdoc plan --gpu A --gpu B …`: the hardware choice, one row per card (or node) the user names.

Each option gets the plan search of `memdoc plan` (`memdoc.core.remedies.search.search`, its fit rule
and ranking, fastest plan first), run once on that card with the user's plan. From the fastest plan:

    tokens per step = micro-batch × accumulation × sequence length × GPUs   (one optimizer step)
    hours           = tokens / tokens per step × step seconds / 3600        (wall clock)
    cost            = hours × GPUs × price                                  (price: USD per GPU-hour)

The recommendation is the cheapest option when prices are given, else the fastest. The two
articles behind memdoc close on when to change hardware rather than optimise: offloading most of
the model states to the host to squeeze onto a card is often slower than renting a bigger one. That
rule is made concrete here: an option whose plan relies on heavy offload (`heavy_offload`) gets a
note when an option without offload finishes the same tokens sooner, with the factor. No prices are
built in: they are the user's (`--price NAME=USD`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from memdoc.core.billing.bill import Bill
from memdoc.core.billing.bill_json import row_per_gpu_json
from memdoc.core.billing.verdict import row_fit_json
from memdoc.core.model.gpu import GpuSpec, gpu_json, resolve_gpu
from memdoc.core.model.model_spec import ModelSpec, model_json
from memdoc.core.model.plan import Offload, TrainingPlan
from memdoc.core.remedies.search import Candidate, search
from memdoc.core.remedies.time_band import time_json
from memdoc.errors import PlanError, UnknownGpuError

DEFAULT_TOKENS = 1e9
"""Tokens priced and timed when `--tokens` is not given (the plan table's "per 1B tokens")."""
HEAVY_OFF_GPU_FRACTION = 0.5
"""A plan relies on heavy offload when more than this fraction of its model states (weights,
gradients, optimizer states, per GPU) lives off the GPU, or when it offloads the weights too."""
FORMULA = "hours = tokens / (tokens per step) × step time; cost = hours × GPUs × price per GPU-hour"


@dataclass(frozen=True)
class HardwareOption:
    """One `--gpu` of `memdoc plan`: the card, the user's plan on it, and the plan fields the user set."""

    label: str
    """The --gpu text as given ("8xh100"): rows, notes and prices name the option by it."""
    gpu: GpuSpec
    plan: TrainingPlan
    """The user's plan on this card (its GPU count from "8x…" or --gpus)."""
    fixed: frozenset[str] = frozenset()
    """Plan fields the user set: kept by the search."""
    price: float | None = None
    """USD per GPU-hour (None: not priced)."""


def off_gpu_fraction(bill: Bill) -> float:
    """The fraction of the per-GPU model states (weights, gradients, optimizer states) the bill keeps
    off the GPU: host bytes over host plus the states of the optimizer phase left on the GPU."""
    on_gpu = bill.phases["optimizer"]
    total = bill.host_bytes + on_gpu.weights + on_gpu.gradients + on_gpu.optimizer
    return bill.host_bytes / total if total else 0.0


def heavy_offload(bill: Bill) -> bool:
    """True when the plan offloads the weights (ZeRO-Infinity: every layer crosses the host link each
    step) or more than `HEAVY_OFF_GPU_FRACTION` of its model states."""
    return bill.plan.offload is Offload.OPTIMIZER_PARAMS or off_gpu_fraction(bill) > HEAVY_OFF_GPU_FRACTION


@dataclass(frozen=True)
class HardwareRow:
    """One option with the fastest plan the search found on it (None: nothing fits)."""

    option: HardwareOption
    best: Candidate | None
    tokens: float
    note: str | None = None
    """"heavy offload: N× slower than <option>" when that holds (see `offload_notes`)."""

    @property
    def fits(self) -> bool:
        return self.best is not None

    @property
    def count(self) -> int:
        """GPUs of the option (all nodes)."""
        return self.option.plan.world_size

    @property
    def step_seconds(self) -> float | None:
        return None if self.best is None else self.best.time.seconds

    @property
    def tokens_per_step(self) -> int | None:
        """Tokens of one optimizer step over all GPUs: micro-batch × accumulation × sequence × GPUs."""
        if self.best is None:
            return None
        p = self.best.plan
        return p.micro_batch * p.grad_accum * p.seq_len * p.world_size

    @property
    def hours(self) -> float | None:
        """Wall-clock hours for `tokens`: tokens / tokens per step × step seconds / 3600."""
        if self.best is None:
            return None
        return self.tokens / self.tokens_per_step * self.best.time.seconds / 3600

    @property
    def cost(self) -> float | None:
        """USD for `tokens`: hours × GPUs × price per GPU-hour (None without a price or a plan)."""
        if self.hours is None or self.option.price is None:
            return None
        return self.hours * self.count * self.option.price

    @property
    def heavy_offload(self) -> bool:
        return self.best is not None and heavy_offload(self.best.bill)

    def to_json(self) -> dict:
        best = self.best
        return {
            "option": self.option.label,
            "gpu": gpu_json(self.option.gpu, self.count),
            "name": self.option.gpu.name,
            "count": self.count,
            **row_fit_json(self.fits, None if best is None else best.bill.fit.fit),
            "plan": None if best is None else best.plan.to_dict(),
            "changes": [] if best is None else best.to_json()["changes"],
            "per_gpu": None if best is None else row_per_gpu_json(best.bill.peak_allocated, best.bill.process_total),
            "time": None if best is None else time_json(best.time, best.plan.world_size, best.band),
            "step_seconds": None if best is None else round(best.time.seconds, 4),
            "tokens_per_step": self.tokens_per_step,
            "hours": None if self.hours is None else round(self.hours, 4),
            "price_per_gpu_hour": self.option.price,
            "cost": None if self.cost is None else round(self.cost, 2),
            "heavy_offload": self.heavy_offload,
            "note": self.note,
        }


@dataclass(frozen=True)
class HardwareReport:
    """The rows in the order the options were given, the recommended one and why."""

    model: ModelSpec
    rows: list[HardwareRow]
    tokens: float
    recommended: HardwareRow | None
    why: str

    @property
    def priced(self) -> bool:
        return any(r.option.price is not None for r in self.rows)

    @property
    def trainable_params(self) -> int | None:
        """The parameters the rows' plans train, when they all train the same (None otherwise)."""
        counts = {r.best.bill.states.trainable_params for r in self.rows if r.best is not None}
        return counts.pop() if len(counts) == 1 else None

    def to_json(self) -> dict:
        """The JSON of `memdoc plan --gpu A --gpu B … --json`."""
        return {
            "model": model_json(self.model, self.trainable_params),
            "tokens": self.tokens,
            "formula": FORMULA,
            "hardware": [r.to_json() for r in self.rows],
            "recommended": None if self.recommended is None else self.recommended.to_json(),
            "why": self.why,
        }


def hardware_report(
    model: ModelSpec,
    options: list[HardwareOption],
    *,
    tokens: float = DEFAULT_TOKENS,
    global_batch: int | None = None,
    **search_options,
) -> HardwareReport:
    """One row per option: the fastest plan `search` finds on it (`search_options` pass through), its
    time and cost for `tokens`; the offload notes and the recommendation."""
    rows = []
    for option in options:
        found = search(
            model, option.plan, option.gpu, fixed=option.fixed, global_batch=global_batch, top=1, **search_options
        )
        rows.append(HardwareRow(option=option, best=found[0] if found else None, tokens=tokens))
    rows = offload_notes(rows)
    recommended, why = recommend(rows)
    return HardwareReport(model=model, rows=rows, tokens=tokens, recommended=recommended, why=why)


def offload_notes(rows: list[HardwareRow]) -> list[HardwareRow]:
    """`rows`, each heavy-offload row noted "heavy offload: N× slower than X" when X, the fastest option
    whose plan offloads nothing, finishes the tokens sooner (N = its hours over X's)."""
    clean = [r for r in rows if r.fits and r.best.plan.offload is Offload.NONE]
    if not clean:
        return rows
    fastest = min(clean, key=lambda r: r.hours)
    return [
        dataclasses.replace(r, note=f"heavy offload: {r.hours / fastest.hours:.1f}× slower than {fastest.option.label}")
        if r.heavy_offload and r.hours > fastest.hours
        else r
        for r in rows
    ]


def recommend(rows: list[HardwareRow]) -> tuple[HardwareRow | None, str]:
    """(the recommended row, why): the cheapest option that fits when prices are given (ties: the
    faster), else the fastest; None when nothing fits anywhere."""
    fitting = [r for r in rows if r.fits]
    if not fitting:
        return None, "no option fits: free a fixed flag, add GPUs or name a bigger card"
    priced = all(r.cost is not None for r in fitting)
    ranked = sorted(fitting, key=(lambda r: (r.cost, r.hours)) if priced else (lambda r: r.hours))
    best = ranked[0]
    tokens = tokens_text(best.tokens)
    if priced:
        why = f"cheapest for {tokens} tokens: ${best.cost:,.2f} in {hours_text(best.hours)}"
    else:
        why = f"fastest for {tokens} tokens: {hours_text(best.hours)}"
    if len(ranked) == 1:
        why += "; the only option that fits"
    else:
        runner = ranked[1]
        cost = f"${runner.cost:,.2f} in " if priced else ""
        why += f"; next {runner.option.label}, {cost}{hours_text(runner.hours)}"
    fastest = min(fitting, key=lambda r: r.hours)
    if priced and fastest is not best and fastest is not ranked[1]:
        why += f"; fastest {fastest.option.label}, ${fastest.cost:,.2f} in {hours_text(fastest.hours)}"
    if best.note:
        why += f"; {best.note}"
    return best, why


def hours_text(hours: float) -> str:
    """'37.1 min', '26.3 h', '2.2 days': a training time as the hardware table prints it (the unit
    switches at twice its size, as `memdoc.render.common.duration` does; the JSON keeps the hours)."""
    seconds = hours * 3600
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:,.1f} {unit}"
    return f"{seconds:.0f} s"


def tokens_text(tokens: float) -> str:
    """'200M', '1B', '1.5K': a token count as people write it."""
    for suffix, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if tokens >= size:
            return f"{tokens / size:.3g}{suffix}"
    return f"{tokens:.3g}"


def parse_price(item: str) -> tuple[str, float]:
    """`--price NAME=USD` → (NAME, USD per GPU-hour); a one-line PlanError for anything else."""
    name, sep, usd = item.partition("=")
    try:
        value = float(usd)
    except ValueError:
        value = math.nan
    if not sep or not name.strip() or not math.isfinite(value) or value < 0:
        raise PlanError(f"--price {item!r}: expected NAME=USD, a --gpu and its price per GPU-hour (a100-80=1.20)")
    return name.strip(), value


def with_prices(options: list[HardwareOption], items: list[str]) -> list[HardwareOption]:
    """`options` with the prices of `--price NAME=USD` items. NAME is an option's --gpu text or names
    the same card ("h100" prices "8xh100"). Every option gets a price or none does: a cost comparison
    with an unpriced option would be no comparison."""
    prices: dict[int, float] = {}
    for item in items:
        name, usd = parse_price(item)
        matched = [i for i, option in enumerate(options) if _names(name, option)]
        if not matched:
            given = ", ".join(o.label for o in options)
            raise PlanError(f"--price {name}={usd:g}: no --gpu {name} was given (given: {given})")
        prices.update(dict.fromkeys(matched, usd))
    if prices and len(prices) < len(options):
        missing = ", ".join(o.label for i, o in enumerate(options) if i not in prices)
        raise PlanError(f"no --price for {missing}: price every --gpu, or none")
    return [dataclasses.replace(o, price=prices.get(i)) for i, o in enumerate(options)]


def _names(name: str, option: HardwareOption) -> bool:
    """True when a --price NAME means this option: its --gpu text, or a name of the same card."""
    if name == option.label:
        return True
    try:
        return resolve_gpu(name).id == option.gpu.id
    except UnknownGpuError:
        return False
