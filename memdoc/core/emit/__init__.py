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

__all__ = ["DEFAULT_FILENAMES", "FORMATS"]
