"""Emit a training plan as a config its trainer runs as is (pure mapping; no I/O here).

`emit(fmt, ctx)` returns an `Emitted` (main config dict, side files, launch command, notes);
`render_main` / `render_side` turn it into file text. One module per target format.
"""

DEFAULT_FILENAMES = {
    "trl": "sft.yaml",
    "hf": "training_args.yaml",
    "axolotl": "axolotl.yaml",
    "llamafactory": "llamafactory.yaml",
}
"""Each target format and the config file name written by default: the one list of formats. The emitters are in
`dispatch.py` (`emit`), imported only where a config is written, so that `bill` and `plan` start without them."""
FORMATS = tuple(DEFAULT_FILENAMES)


def default_filename(fmt: str, task: str = "sft") -> str:
    """The config file name written by default for `fmt` and the plan's task: TRL's is named after the script
    that runs it (`trl dpo --config dpo.yaml`, `trl reward --config reward.yaml`: `trl_post.TRL_SCRIPTS`)."""
    if fmt == "trl" and task != "sft":
        from memdoc.core.model.plan_post import Task
        from memdoc.core.trainers.trl.post import TRL_SCRIPTS

        return f"{TRL_SCRIPTS.get(Task(task), task)}.yaml"
    return DEFAULT_FILENAMES[fmt]


__all__ = ["DEFAULT_FILENAMES", "FORMATS", "default_filename"]
