"""`emit_files`: build a plan's trainer config (and side files) and write them, all or none."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from memdoc.core.emit import DEFAULT_FILENAMES
from memdoc.core.reports.emit import EmitResult, emit_result, plan_to_emit
from memdoc.errors import PlanError
from memdoc.output.files import write_all
from memdoc.resolve.setup import Setup


def emit_files(
    setup: Setup,
    fmt: str,
    *,
    output: Path | None = None,
    force: bool = False,
    fit: bool = False,
    dataset: str | None = None,
    output_dir: str | None = None,
) -> EmitResult | None:
    """The config of `setup`'s plan in format `fmt`, written to `output` with its side files when given.

    With `fit`, a plan that is not a comfortable fit is replaced by the ladder's plan that is, keeping the values
    the user set while it can; None when no plan on the ladder fits (nothing is written). Existing files are
    replaced only with `force` (OutputExistsError otherwise).
    """
    chosen = plan_to_emit(setup.model, setup.plan, setup.gpu, fit=fit, fixed=setup.explicit)
    if chosen is None:
        return None
    plan, the_bill, fit_message = chosen
    result = emit_result(
        setup.model,
        plan,
        setup.gpu,
        the_bill,
        fmt,
        output=output,
        dataset=dataset,
        output_dir=output_dir,
        asked_id=setup.model_arg if setup.model.source == "catalog" else None,
    )
    result = dataclasses.replace(result, fit_message=fit_message)
    if output is None:
        return result
    if output.is_dir():
        raise PlanError(f"-o {output} is a directory; give a file name such as {output / DEFAULT_FILENAMES[fmt]}")
    write_all(result.files, force=force)
    return dataclasses.replace(result, written=True)
