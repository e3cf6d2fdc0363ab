"""`memdoc bill --dataset`: the dataset's token lengths against the plan (the glue: tokenize, fit, JSON)."""

from pathlib import Path


def dataset_section(
    path: Path, tokenizer: str, text_field: str | None, setup, *, seq_cap: int | None, quiet: bool
) -> dict:
    """Tokenize the dataset (a progress bar unless `quiet`) and fit its lengths to `setup`; the JSON `dataset` object."""
    from memdoc import render
    from memdoc.core.remedies.dataset_fit import dataset_fit
    from memdoc.resolve.dataset import count_tokens

    if quiet:
        tokens = count_tokens(path, tokenizer, text_field)
    else:
        with render.progress_reporter(f"tokenizing {path.name}") as progress:
            tokens = count_tokens(path, tokenizer, text_field, progress=progress)
    fit = dataset_fit(tokens.counts, setup.model, setup.plan, setup.gpu, seq_cap=seq_cap)
    return {
        "file": str(path),
        "tokenizer": tokenizer,
        "text_field": tokens.field,
        "skipped": tokens.skipped,
        "micro_batch": setup.plan.micro_batch,
        **fit.to_json(),
    }
