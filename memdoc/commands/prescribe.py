"""`memdoc prescribe`: a symptom (or an OOM log) → causes and prescriptions, cheapest first."""

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from memdoc.commands.app import command
from memdoc.commands.options import JsonOpt, PlanArgs, plan_options

EXAMPLES = """
Examples:

  memdoc prescribe --list

  memdoc prescribe --symptom mid-run-oom

  memdoc prescribe --symptom startup-oom meta-llama/Llama-3.1-8B --gpu 24 --method full

  memdoc prescribe --log train.log          (or --log - to read stdin)
"""


@command("prescribe", epilog=EXAMPLES)
@plan_options
def prescribe(
    model: Annotated[Optional[str], typer.Argument(metavar="MODEL", help="Optional model: quantify each prescription with the bill.")] = None,
    *,
    plan: PlanArgs,
    symptom: Annotated[Optional[str], typer.Option("--symptom", help="Symptom id (see --list).")] = None,
    log: Annotated[Optional[str], typer.Option("--log", help="Training log with an OOM traceback; '-' reads stdin.")] = None,
    list_all: Annotated[bool, typer.Option("--list", help="List the symptoms.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Map a symptom, or the OOM message in a training log, to its causes and prescriptions.

    Prescriptions come in ladder order (cheapest first), each with what it shrinks, its time cost
    and the switch in HF/TRL, Axolotl, LLaMA-Factory, PyTorch or the environment. Given a model
    and plan flags, each is quantified with the bill: bytes saved and whether it alone fits.
    """
    from memdoc import render
    from memdoc.core.doctor.oom import first_oom, infer_symptom
    from memdoc.core.doctor.symptoms import get_symptom, list_symptoms
    from memdoc.errors import ConfigError, PlanError

    if list_all:
        symptoms = list_symptoms()
        if json_out:
            render.print_json([{"id": s.id, "title": s.title} for s in symptoms])
        else:
            render.table("Symptoms", [("id", "left"), ("what you see", "left")], [[s.id, s.title] for s in symptoms])
        return
    if (symptom is None) == (log is None):
        raise PlanError("give exactly one of --symptom NAME or --log FILE (or --list)")
    oom = guess = None
    if log is not None:
        try:
            text = _read_stdin() if log == "-" else Path(log).read_text(encoding="utf-8", errors="replace")
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read log {log}: {exc.strerror or exc}") from None
        oom = first_oom(text)
        guess = infer_symptom(oom, text)
        if guess.symptom is None:
            raise ConfigError(
                "no CUDA/HIP out-of-memory message found in the log" if oom is None
                else "found an OOM but could not tell the symptom: " + "; ".join(guess.unknowns),
                hint="pass --symptom NAME (see memdoc prescribe --list)",
            )
        symptom = guess.symptom
    chosen = get_symptom(symptom)
    quantified = base = setup = None
    if model is not None or plan.values.get("recipe"):
        setup = plan.resolve(model, need_gpu=False)
        if setup.gpu_note and not json_out:
            render.note(f"note: {setup.gpu_note}")
        from memdoc.core.doctor.quantify import quantify

        base, quantified = quantify(chosen.prescriptions, setup.model, setup.plan, setup.gpu)
    if json_out:
        render.print_json(_json(chosen, oom, guess, quantified, base))
    else:
        render.render_prescriptions(chosen, oom, guess, quantified, base)


def _read_stdin() -> str:
    """stdin as text whatever its bytes or the locale's encoding (logs mix encodings; undecodable bytes become �)."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:
        return sys.stdin.read()
    return buffer.read().decode("utf-8", errors="replace")


def _json(symptom, oom, guess, quantified, base) -> dict:
    import dataclasses

    by_id = {q.prescription.id: q for q in quantified or []}
    oom_json = None
    if oom is not None:
        oom_json = {k: v for k, v in dataclasses.asdict(oom).items() if k != "raw"}
    return {
        "symptom": symptom.id,
        "oom": oom_json,
        "diagnosis": None if guess is None else {"reasons": list(guess.reasons), "unknowns": list(guess.unknowns)},
        "bill": None if base is None else {"per_gpu": {"process_total": base.process_total}, "fits": base.fits},
        "prescriptions": [
            {
                "id": p.id,
                "action": p.action,
                "why": p.why,
                "saves_bytes": by_id[p.id].saves_bytes if p.id in by_id else None,
                "fits_alone": by_id[p.id].fits_alone if p.id in by_id else None,
                "time_cost": p.time_cost,
                "how": p.how,
            }
            for p in symptom.prescriptions
        ],
    }
