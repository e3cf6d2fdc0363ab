"""`emit_files`: build a plan's trainer config (and side files) and write them, all or none."""

from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path

from memdoc.core.billing.bill import compute_bill
from memdoc.core.reports.emit import EmitResult, emit_result, plan_to_emit
from memdoc.core.trainers.registry import default_filename
from memdoc.core.trainers.text import check_fill_in
from memdoc.errors import OutputError
from memdoc.output.files import check_length, write_all
from memdoc.output.read_back import RUNTIME_FIELDS, as_run, billed_as_note
from memdoc.resolve.setup import Setup, card_as_emit_sees_it
from memdoc.resolve.stack import stack_in_use


def emit_files(
    setup: Setup,
    fmt: str,
    *,
    output: str | None = None,
    force: bool = False,
    fit: bool = False,
    dataset: str | None = None,
    output_dir: str | None = None,
) -> EmitResult | None:
    """The config of `setup`'s plan in format `fmt`, written to `output` (-o as typed, `output_path`) with its side
    files when given.

    With `fit`, a plan that is not a comfortable fit is replaced by the ladder's plan that is, keeping the values
    the user set while it can; None when no plan on the ladder fits (nothing is written). Existing files are
    replaced only with `force` (OutputExistsError otherwise).
    """
    check_fill_in("--dataset", dataset)
    check_fill_in("--output-dir", output_dir)
    path = output_path(output, fmt, setup.plan.task.value)
    chosen = plan_to_emit(setup.model, setup.plan, setup.gpu, fit=fit, fixed=setup.explicit)
    if chosen is None:
        return None
    options = {"fmt": fmt, "output": path, "dataset": dataset, "output_dir": output_dir}
    result = _emit_as_run(setup, chosen[0], chosen[1], options)
    if fit and result.bill.comfortable is False:  # the trainer runs more than the ladder priced: climb from that
        again = plan_to_emit(setup.model, result.runs, setup.gpu, fit=True, fixed=setup.explicit | set(RUNTIME_FIELDS))
        if again is None:
            return None
        chosen = again
        result = _emit_as_run(setup, again[0], again[1], options)
    result = dataclasses.replace(result, fit_message=chosen[2])
    if path is None:
        return result
    write_all(result.files, force=force)
    return dataclasses.replace(result, written=True)


def _emit_as_run(setup: Setup, plan, the_bill, options: dict) -> EmitResult:
    """The files of `plan`, headed with the bill of the plan the trainer runs from them (`read_back.as_run`)."""
    stack = setup.stack or stack_in_use()
    asked_id = setup.model_arg if setup.model.source == "catalog" else None
    emit_as = functools.partial(emit_result, setup.model, plan, setup.gpu, asked_id=asked_id, stack=stack, **options)
    relative = emit_as(the_bill, output=None)  # side files named as the main file references them
    runs = as_run(plan, relative.files, stack, setup.model.id)
    if runs == plan:
        return dataclasses.replace(relative if options["output"] is None else emit_as(the_bill), runs=plan)
    note = billed_as_note(plan, runs, options["fmt"])
    return dataclasses.replace(emit_as(compute_bill(setup.model, runs, setup.gpu), billed_as=note), runs=runs)


def output_path(raw: str | None, fmt: str, task: str = "sft") -> Path | None:
    """-o as typed → the main config's path: a directory (one that exists, or any path ending in a separator, made
    when missing) gets the format's default file name inside it. Refused (one line): an empty value, control
    characters (`check_fill_in`), a name or path longer than the kernel takes (`check_length`)."""
    if raw is None:
        return None
    check_fill_in("-o", raw, if_left_out="the config on stdout")
    path = Path(raw)
    check_length(path)
    try:
        is_dir = path.is_dir()
    except OSError as exc:
        raise OutputError(f"cannot write {raw}: {exc.strerror or exc}") from None
    if is_dir or raw.endswith(os.sep) or (os.altsep and raw.endswith(os.altsep)):
        path = path / default_filename(fmt, task)
        check_length(path)
    return path


def emit_plan(setup: Setup, plan, fmt: str, *, output: str | None, force: bool) -> tuple[EmitResult | None, str | None]:
    """Emit `plan` (the one `memdoc plan` chose for `setup`) as `memdoc emit --gpu ID` would: (the EmitResult, the
    note a loose GPU id carries)."""
    emit_setup = card_as_emit_sees_it(dataclasses.replace(setup, plan=plan))
    return emit_files(emit_setup, fmt, output=output, force=force), emit_setup.gpu_note
