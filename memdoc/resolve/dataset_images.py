"""The image sizes of a vision-language dataset's records (`memdoc bill --dataset` with images). I/O only: the
tokens they make are `memdoc.core.remedies.dataset_vision`'s.

Where a record's images are, in the order tried:
* ``images`` (a list) or ``image`` (one): each item a path (relative to the dataset file's directory, as
  LLaMA-Factory's ``dataset_dir`` and TRL's local image folders have them), a Hugging Face ``datasets`` Image
  as Parquet stores it (``{"bytes": ..., "path": ...}``), or an object with ``width`` and ``height``;
* else ``width`` and ``height`` fields of the record itself (one image).
A file's size is read from its header (`PIL.Image.open(...).size`, which decodes no pixels).
"""

from __future__ import annotations

import io
from pathlib import Path

from memdoc.errors import DatasetError
from memdoc.resolve.inputs import shown

IMAGE_FIELDS = ("images", "image")
"""Record fields holding a sample's images (LLaMA-Factory, TRL/HF datasets)."""
SIZE_FIELDS = (("width", "height"), ("image_width", "image_height"))
"""Record (or image object) fields holding one image's size."""


def has_images(records: list[dict]) -> bool:
    """Does any record carry images (an image field, or a width/height pair)?"""
    return any(_image_items(record) is not None for record in records)


def image_sizes(records: list[dict], root: Path) -> list[list[tuple[int, int]]]:
    """Each record's images as (width, height), in record order ([] for a record without images); paths are
    relative to `root` (the dataset file's directory)."""
    opener = _pil_open()
    sizes = []
    for number, record in enumerate(records, 1):
        items = _image_items(record) or []
        sizes.append([_size_of(item, root, opener, number) for item in items])
    return sizes


def _image_items(record: dict) -> list | None:
    """The record's image entries (None: the record names no image at all)."""
    for name in IMAGE_FIELDS:
        value = record.get(name)
        if value is None:
            continue
        return list(value) if isinstance(value, (list, tuple)) else [value]
    if _pair(record) is not None:
        return [record]
    return None


def _pair(item: dict) -> tuple[int, int] | None:
    """(width, height) from an object's size fields, or None."""
    for w_name, h_name in SIZE_FIELDS:
        width, height = item.get(w_name), item.get(h_name)
        if width is not None and height is not None:
            return width, height
    return None


def _size_of(item, root: Path, opener, number: int) -> tuple[int, int]:
    """One image entry -> (width, height); a one-line DatasetError naming the record otherwise."""
    if isinstance(item, dict) and (pair := _pair(item)) is not None:
        return _checked(pair, number)
    if isinstance(item, dict) and item.get("bytes"):
        return _checked(opener(io.BytesIO(item["bytes"]), f"record {number}'s image bytes"), number)
    path = item.get("path") if isinstance(item, dict) else item
    if not isinstance(path, str) or not path:
        raise DatasetError(f"record {number}: an image entry is neither a path, bytes nor width/height: {item!r:.80}")
    full = Path(path) if Path(path).is_absolute() else root / path
    if not full.is_file():
        raise DatasetError(
            f"record {number}: image {shown(full)} not found",
            hint="image paths are read relative to the dataset file's directory",
        )
    return _checked(opener(full, shown(full)), number)


def _checked(pair, number: int) -> tuple[int, int]:
    """Positive integer (width, height), or a one-line DatasetError."""
    width, height = pair
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (width, height)):
        raise DatasetError(f"record {number}: image width/height must be positive integers, got {width!r}×{height!r}")
    return width, height


def _pil_open():
    """`source -> (width, height)` with Pillow, reading the header only; a DatasetError if Pillow is absent."""
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError:
        raise DatasetError(
            "reading image sizes needs the pillow package, which is not installed",
            hint="pip install pillow (or memdoc[dataset]), or give width/height fields",
        ) from None

    def size(source, name: str) -> tuple[int, int]:
        try:
            with Image.open(source) as image:
                return image.size
        except (UnidentifiedImageError, OSError) as exc:
            raise DatasetError(f"cannot read the image {name}: {exc}") from None

    return size
