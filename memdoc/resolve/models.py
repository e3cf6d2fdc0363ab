"""MODEL → config dict → `ModelSpec`.

Resolution order (first hit wins):
1. a local path: a model directory holding `config.json`, or a `.json` file;
2. the local Hugging Face cache (`$HF_HUB_CACHE`, else `$HF_HOME/hub`, else
   `~/.cache/huggingface/hub`), read directly — never the network;
3. the bundled catalog (`memdoc/data/catalog/`), case-insensitive, with aliases such as Meta's
   original `meta-llama/Llama-2-7b` → `meta-llama/Llama-2-7b-hf`;
4. a fine-tuned variant of a catalog model (`…-Instruct`, `…-chat-hf`, `…-it`): billed with its
   base's config (same layer shapes; the few sizing fields known to differ are in `variants.json`)
   but keeping the id as given — the id is what a trainer loads (`ModelSpec.config_of` names the base);
5. the Hub, only when `HF_HUB_OFFLINE` is unset and the Hub answers within a few seconds;
6. a mirror of a catalog model (`NousResearch/Meta-Llama-3-8B`, `unsloth/Meta-Llama-3.1-8B`): an id whose
   repository name (after the org) is, case-insensitively, exactly one catalog model's (or alias's)
   repository name is taken as that model (`mirror_of`; `mirror_note` says so). No other fuzzy matching.
"""

from __future__ import annotations

import dataclasses
import difflib
import errno
import functools
import json
import os
import re
import threading
from importlib import resources
from pathlib import Path

from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.params import UnsupportedArchitecture
from memdoc.core.model.vision.vlm import model_spec
from memdoc.errors import ConfigError, UnknownModelError, quoted
from memdoc.resolve.inputs import MiB, read_text, shown

_CATALOG_PACKAGE = "memdoc.data.catalog"


@functools.cache
def catalog_ids() -> dict[str, str]:
    """Lowercased id → catalog id, for every bundled config and alias."""
    folder = resources.files(_CATALOG_PACKAGE)
    ids = {}
    for entry in folder.iterdir():
        if entry.name.endswith(".json") and "--" in entry.name:
            model_id = entry.name[: -len(".json")].replace("--", "/", 1)
            ids[model_id.lower()] = model_id
    aliases = folder / "aliases.json"
    if aliases.is_file():
        for alias, target in json.loads(aliases.read_text()).items():
            if not alias.startswith("_") and target.lower() in ids:
                ids[alias.lower()] = ids[target.lower()]
    return ids


def catalog_config(model_id: str) -> dict:
    """The bundled config.json of a catalog id (exact spelling, as `catalog_ids` gives it)."""
    entry = resources.files(_CATALOG_PACKAGE) / (model_id.replace("/", "--", 1) + ".json")
    return json.loads(entry.read_text())


_VARIANT_SUFFIX = re.compile(r"[-_](instruct|chat|it|deduped)(?=$|[-_])", re.IGNORECASE)
"""The variant marker in Hub ids: Qwen2.5-7B-Instruct, Mistral-7B-Instruct-v0.3, Llama-2-7b-chat-hf, gemma-2-9b-it
(fine-tunes), pythia-1b-deduped (same architecture, other training data)."""


def variant_base(model: str) -> str | None:
    """The catalog id a fine-tuned variant (instruct/chat/it) shares its architecture with, else None."""
    base = _VARIANT_SUFFIX.sub("", model, count=1)
    return catalog_ids().get(base.lower()) if base != model else None


def mirror_of(model: str) -> str | None:
    """The catalog id an `org/name` id mirrors: the one catalog model whose repository name is `name`
    (case-insensitive). None for a catalog id or alias, an id without exactly one org, or a name that no
    catalog model, or more than one, has."""
    ids = catalog_ids()
    if model.count("/") != 1 or model.lower() in ids:
        return None
    name = model.split("/")[1].lower()
    targets = {target for key, target in ids.items() if key.rsplit("/", 1)[-1] == name}
    return targets.pop() if len(targets) == 1 else None


def mirror_note(model: str, resolved: ModelSpec) -> str | None:
    """What a command says when MODEL was resolved as a mirror of a catalog model (`mirror_of`), else None."""
    if resolved.source != "catalog" or mirror_of(model) != resolved.id:
        return None
    return f"{model} taken as {resolved.id}: the catalog's model of the same name"


def _variant_config(model: str, base: str) -> dict:
    overrides = json.loads((resources.files(_CATALOG_PACKAGE) / "variants.json").read_text())
    return {**catalog_config(base), **overrides.get(model.lower(), {})}


MAX_MODEL_CONFIG_BYTES = 16 * MiB
"""A model's config.json is a few KiB; anything over 16 MiB is not one (and is not parsed)."""


def _read_config_file(path: Path, model: str) -> dict:
    text = read_text(path, what="model config", limit=MAX_MODEL_CONFIG_BYTES, error=ConfigError)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON ({exc})") from None
    except RecursionError:
        raise ConfigError(f"{path} is nested too deeply to be a model config") from None


def _hf_cache_config(model: str) -> Path | None:
    if "/" not in model:
        return None
    cache = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface"), "hub"
    )
    snapshots = Path(cache) / ("models--" + model.replace("/", "--")) / "snapshots"
    if not _safe(snapshots.is_dir):
        return None
    candidates = sorted(snapshots.glob("*/config.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    return candidates[0] if candidates else None


HUB_TIMEOUT_S = 3.0
"""How long MODEL's config.json may take from the Hub: one try, then MODEL is unknown."""


def _hub_config(model: str) -> dict | None:
    """config.json from the Hub, or None when offline, unreachable, absent or slower than HUB_TIMEOUT_S (one try,
    quietly: huggingface_hub's own retries and their log lines are cut off by the deadline and its logger)."""
    if os.environ.get("HF_HUB_OFFLINE") or os.environ.get("MEMDOC_OFFLINE") or model.count("/") != 1:
        return None
    found: list[str] = []

    def download() -> None:
        try:
            import logging

            from huggingface_hub import hf_hub_download

            logging.getLogger("huggingface_hub").setLevel(logging.ERROR)  # no "Retrying in 1s" lines
            found.append(hf_hub_download(model, "config.json", etag_timeout=HUB_TIMEOUT_S))
        except Exception:  # any network, auth or not-found failure means: not on the Hub for us
            pass

    worker = threading.Thread(target=download, daemon=True, name="memdoc-hub")
    worker.start()
    worker.join(HUB_TIMEOUT_S)  # a resolver or a retry loop that outlasts it is left behind (a daemon thread)
    return _read_config_file(Path(found[0]), model) if found else None


def suggest(model: str, n: int = 3) -> list[str]:
    """Closest catalog ids to a mistyped model name."""
    ids = catalog_ids()
    key = model.lower()
    names = difflib.get_close_matches(key, list(ids), n=n, cutoff=0.4)
    if len(names) < n:  # match on the part after the org as well
        by_name = {k.split("/")[-1]: k for k in ids}
        names += [by_name[m] for m in difflib.get_close_matches(key.split("/")[-1], list(by_name), n=n, cutoff=0.5)]
    return list(dict.fromkeys(ids[name] for name in names))[:n]


MAX_MODEL_ARG = 4096
"""Longest MODEL argument accepted (PATH_MAX on Linux); longer text is neither an id nor a path."""


def _safe(check) -> bool:
    """A filesystem test that answers False where the OS refuses the name (too long, bad bytes)."""
    try:
        return check()
    except (OSError, ValueError):
        return False


def _absent(path: Path) -> bool:
    """Nothing is at `path` (a name the OS refuses counts as absent; a directory that may not be searched, as
    present: reading it then says "Permission denied")."""
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return True
    except OSError as exc:
        return exc.errno == errno.ENAMETOOLONG
    return False


def load_config(model: str) -> tuple[str, dict, str]:
    """(canonical id, config dict, source) for MODEL, in the documented resolution order."""
    if not model or len(model) > MAX_MODEL_ARG or "\0" in model:
        raise UnknownModelError(
            f"model {quoted(model, 80)} is not a model id or a path ({len(model)} characters; ids "
            f"and paths are at most {MAX_MODEL_ARG})"
            if model
            else "MODEL is empty (pass a model id, a config.json path, or --recipe FILE)"
        )
    path = Path(model).expanduser()
    if _safe(path.is_dir):
        config_file = path / "config.json"
        if _absent(config_file):
            raise ConfigError(f"{shown(path)} is a directory without config.json")
        return str(path), _read_config_file(config_file, model), "local"
    if path.suffix == ".json" or not _absent(path):  # an existing path is what the user meant, whatever it is
        return str(path), _read_config_file(path, model), "local"
    cached = _hf_cache_config(model)
    if cached is not None:
        return model, _read_config_file(cached, model), "cache"
    catalog_id = catalog_ids().get(model.lower())
    if catalog_id is not None:
        return catalog_id, catalog_config(catalog_id), "catalog"
    base = variant_base(model)
    if base is not None:
        return model, _variant_config(model, base), "catalog"
    hub = _hub_config(model)
    if hub is not None:
        return model, hub, "hub"
    mirrored = mirror_of(model)
    if mirrored is not None:
        return mirrored, catalog_config(mirrored), "catalog"
    close = suggest(model)
    hint = f"did you mean {' or '.join(close)}?" if close else "see `memdoc models` for the bundled catalog"
    raise UnknownModelError(
        f"unknown model {quoted(model, 80)}: not a local path, not in the HF cache or the "
        f"catalog, and the Hub is unreachable; {hint}"
    )


def resolve_model(model: str) -> ModelSpec:
    """MODEL (id, directory or config.json) → ModelSpec; unknown architectures are counted on the meta device."""
    model_id, config, source = load_config(model)
    try:
        spec = model_spec(config, model_id=model_id, source=source)
    except UnsupportedArchitecture:
        from memdoc.resolve.meta_count import spec_with_meta_count

        spec = spec_with_meta_count(config, model_id=model_id, source=source)
    base = variant_base(model_id) if source == "catalog" and model_id.lower() not in catalog_ids() else None
    return dataclasses.replace(spec, config_of=base) if base else spec
