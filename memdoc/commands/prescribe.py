"""`memdoc prescribe`: a symptom (or an OOM log) → causes and prescriptions, cheapest first."""

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from memdoc.commands.app import command
from memdoc.commands.options import JsonOpt, KvCacheOpt, PlanArgs, PrefillChunkOpt, WeightsOpt, plan_options

EXAMPLES = """
Examples:

  memdoc prescribe --list

  memdoc prescribe --symptom mid-run-oom

  memdoc prescribe --symptom startup-oom meta-llama/Llama-3.1-8B --gpu 24 --method full

  memdoc prescribe --log train.log          (or --log - to read stdin)

  memdoc prescribe --log oom.txt meta-llama/Llama-3.1-8B --method lora --seq 4096

  memdoc prescribe --symptom inference-oom meta-llama/Llama-3.1-8B --gpu 24 --batch 8 --seq 16384
"""


@command("prescribe", epilog=EXAMPLES)
@plan_options
def prescribe(
    model: Annotated[
        Optional[str], typer.Argument(metavar="MODEL", help="Optional model: quantify each prescription with the bill.")
    ] = None,
    *,
    plan: PlanArgs,
    symptom: Annotated[Optional[str], typer.Option("--symptom", help="Symptom id (see --list).")] = None,
    log: Annotated[
        Optional[str], typer.Option("--log", help="Training log with an OOM traceback; '-' reads stdin.")
    ] = None,
    list_all: Annotated[bool, typer.Option("--list", help="List the symptoms.")] = False,
    json_out: JsonOpt = False,
    kv_cache: KvCacheOpt = "auto",
    weights: WeightsOpt = "auto",
    prefill_chunk: PrefillChunkOpt = None,
) -> None:
    """Map a symptom, or the OOM message in a training log, to its causes and prescriptions.

    With --log, the figures of the OOM are read first: a memory-fraction cap, other processes,
    fragmentation, non-PyTorch memory each come as a cause with its evidence, before the
    symptom's ladder. A log without a traceback is still diagnosed (the assumption is printed);
    --symptom overrides the guess. Given a model and plan, "Tried to allocate X" is matched to
    the plan's tensor of that size (oom.culprit), prescriptions that shrink it come first, and
    each prescription is quantified with the bill (the card from the log when --gpu is absent);
    for inference-oom, with the inference bill (--batch sequences of --seq tokens).
    """
    from memdoc import render
    from memdoc.core.doctor.oom import first_oom
    from memdoc.core.doctor.oom_symptom import infer_symptom
    from memdoc.core.doctor.symptoms import get_symptom, list_symptoms
    from memdoc.errors import ConfigError, PlanError

    if list_all:
        symptoms = list_symptoms()
        if json_out:
            render.print_json([{"id": s.id, "title": s.title} for s in symptoms])
        else:
            render.table("Symptoms", [("id", "left"), ("what you see", "left")], [[s.id, s.title] for s in symptoms])
        return
    if symptom is None and log is None:
        raise PlanError("give --symptom NAME or --log FILE (or --list)")
    oom = guess = None
    if log is not None:
        try:
            text = _read_stdin() if log == "-" else Path(log).read_text(encoding="utf-8", errors="replace")
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read log {log}: {exc.strerror or exc}") from None
        oom = first_oom(text)
        if oom is None and symptom is None:
            raise ConfigError(
                "no CUDA/HIP out-of-memory message found in the log",
                hint="pass --symptom NAME (see memdoc prescribe --list)",
            )
        guess = infer_symptom(oom, text)
    chosen = get_symptom(symptom or guess.symptom)
    quantified = base = setup = culprit = None
    if model is not None or plan.values.get("recipe"):
        setup = plan.resolve(model, need_gpu=False)
        gpu = setup.gpu
        if oom is not None:
            from memdoc.core.doctor.culprit import find_culprit, plan_tensors, symptom_for_culprit

            tensors = plan_tensors(setup.model, setup.plan, inference=chosen.id == "inference-oom")
            culprit = find_culprit(oom.requested, tensors, guess.phase)
            if culprit is not None:
                import dataclasses

                from memdoc.core.doctor.oom_symptom import LARGE_BLOCK_UNKNOWN

                guess = dataclasses.replace(
                    guess, unknowns=tuple(u for u in guess.unknowns if u != LARGE_BLOCK_UNKNOWN)
                )
            if symptom is None:
                chosen = get_symptom(symptom_for_culprit(chosen.id, culprit))
            if gpu is None and oom.total:
                from memdoc.core.doctor.oom_causes import card_from_capacity

                gpu = card_from_capacity(oom.allowed if oom.allowed and oom.allowed < oom.total else oom.total)[0]
        if setup.gpu_note and not json_out:
            render.note(f"note: {setup.gpu_note}")
        if chosen.id == "inference-oom":
            from memdoc.core.billing.inference import InferencePlan, KvCache, Weights
            from memdoc.core.doctor.quantify import quantify_inference

            inference = InferencePlan(
                plan=setup.plan, kv_cache=KvCache(kv_cache), weights=Weights(weights), prefill_chunk=prefill_chunk
            )
            base, quantified = quantify_inference(chosen.prescriptions, setup.model, inference, gpu)
        else:
            from memdoc.core.doctor.quantify import quantify

            base, quantified = quantify(chosen.prescriptions, setup.model, setup.plan, gpu)
    from memdoc.core.doctor.culprit import culprit_first, shrinks

    order = culprit_first(chosen.prescriptions, culprit)
    if json_out:
        render.print_json(_json(chosen, order, oom, guess, quantified, base, culprit, symptom is not None, shrinks))
    else:
        render.render_prescriptions(chosen, oom, guess, quantified, base, order=order, culprit=culprit)


def _read_stdin() -> str:
    """stdin as text whatever its bytes or the locale's encoding (logs mix encodings; undecodable bytes become �)."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:
        return sys.stdin.read()
    return buffer.read().decode("utf-8", errors="replace")


def _json(symptom, order, oom, guess, quantified, base, culprit, from_flag: bool, shrinks) -> dict:
    import dataclasses

    by_id = {q.prescription.id: q for q in quantified or []}
    oom_json = None
    if oom is not None:
        oom_json = {k: v for k, v in dataclasses.asdict(oom).items() if k != "raw"}
        oom_json["culprit"] = None if culprit is None else culprit.to_json()
    diagnosis = None
    if guess is not None:
        from memdoc.core.doctor.oom_causes import card_from_capacity

        card, names = card_from_capacity(oom.total if oom is not None else None)
        diagnosis = {
            "symptom_from": "flag" if from_flag else ("assumption" if guess.assumptions else "log"),
            "guessed_symptom": guess.symptom,
            "phase": guess.phase,
            "causes": [dataclasses.asdict(c) for c in guess.causes],
            "reasons": list(guess.reasons),
            "assumptions": list(guess.assumptions),
            "unknowns": list(guess.unknowns),
            "card": None if card is None else {"memory_bytes": card.memory_bytes, "matches": list(names)},
        }
    return {
        "symptom": symptom.id,
        "oom": oom_json,
        "diagnosis": diagnosis,
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
                "shrinks_culprit": shrinks(p, culprit),
            }
            for p in order
        ],
    }
