"""The pieces of a VLM trace (issue 26, item 4): index values kept inside fake tensors, the vision tower's repeat
period read from the checkpoint's config, LoRA on the language model only. The whole trace against the bill is
tests/fidelity/test_vlm_trace.py."""

from __future__ import annotations

import json

import pytest
import torch
import torch._subclasses.fake_tensor as fake_tensor
from conftest import CATALOG
from torch._subclasses.fake_tensor import DataDependentOutputException, FakeTensorMode

from memdoc.probe.fake_index import index_fake_mode
from memdoc.probe.vlm_depth import tower_depth, tower_period, with_tower_depth


def _config(model: str) -> dict:
    return json.loads((CATALOG / (model.replace("/", "--") + ".json")).read_text())


def test_plain_fake_mode_refuses_what_a_vlm_forward_reads():
    """The reason for `index_fake_mode`: torch's own fake mode cannot read a grid's values (Qwen-VL's
    `image_grid_thw.tolist()`) once arithmetic touched it."""
    with FakeTensorMode(), pytest.raises(DataDependentOutputException):
        (torch.arange(4) * 2).tolist()


def test_index_fake_mode_computes_index_values_for_real_and_keeps_floats_fake():
    limit = fake_tensor.CONSTANT_NUMEL_LIMIT
    with index_fake_mode():
        grid = torch.tensor([[1, 32, 32], [1, 16, 24]])
        assert (grid.prod(-1) // 4).tolist() == [256, 96]
        assert (torch.arange(6).reshape(2, 3) * 2).sum().item() == 30
        mask = torch.tensor([[5, 7, 7, 5]]) == 7
        assert mask.sum().item() == 2
        pixels = torch.randn(4, 3)
        assert isinstance(pixels, fake_tensor.FakeTensor) and pixels.constant is None
        with pytest.raises(DataDependentOutputException):
            pixels.sum().item()
    assert fake_tensor.CONSTANT_NUMEL_LIMIT == limit


def test_tower_period_and_cut_follow_the_checkpoints_config():
    """Qwen2.5-VL-7B's `fullatt_block_indexes` [7, 15, 23, 31] of 32 blocks: period 8, cut with the depth; SigLIP
    (Gemma 3, 27 identical layers): period 1; Qwen3-VL's DeepStack taps [8, 16, 24] of 27: not periodic."""
    qwen = _config("Qwen/Qwen2.5-VL-7B-Instruct")
    assert qwen["vision_config"]["fullatt_block_indexes"] == [7, 15, 23, 31]
    assert (tower_depth(qwen), tower_period(qwen)) == (32, 8)
    cut = with_tower_depth(qwen, 16)
    assert cut["vision_config"]["depth"] == 16 and cut["vision_config"]["fullatt_block_indexes"] == [7, 15]
    assert qwen["vision_config"]["fullatt_block_indexes"] == [7, 15, 23, 31]  # the original untouched
    gemma = _config("google/gemma-3-4b-it")
    assert (tower_depth(gemma), tower_period(gemma)) == (gemma["vision_config"]["num_hidden_layers"], 1)
    assert with_tower_depth(gemma, 2)["vision_config"]["num_hidden_layers"] == 2
    assert tower_period(_config("Qwen/Qwen3-VL-8B-Instruct")) is None


def _pixtral_meta():
    """Pixtral-12B cut to 2 layers and 2 vision blocks, built by transformers on the meta device (no memdoc code)."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    config = _config("mistral-community/pixtral-12b")
    config["text_config"]["num_hidden_layers"] = 2
    config["vision_config"]["num_hidden_layers"] = 2
    data = {k: v for k, v in config.items() if k not in ("model_type", "transformers_version")}
    with torch.device("meta"):
        return config, AutoModelForImageTextToText.from_config(AutoConfig.for_model("llava", **data))


@pytest.mark.slow
def test_lora_goes_where_peft_reaches_by_default():
    """LoRA on q_proj/v_proj with the default (auto) policies: peft's suffix match, which reaches the Pixtral tower's
    attention too (as TRL runs it): the adapted modules are exactly those of transformers' meta model ending so."""
    from memdoc.core.model.plan import parse_plan
    from memdoc.probe.build import build_model

    config, meta = _pixtral_meta()
    expected = {n for n, _ in meta.named_modules() if n.endswith((".q_proj", ".v_proj"))}
    assert len(expected) == 8 and sum("vision_tower" in n for n in expected) == 4
    with FakeTensorMode():
        model = build_model(config, parse_plan(method="lora"), layers=2)
    adapted = {n.removeprefix("base_model.model.") for n, m in model.named_modules() if hasattr(m, "lora_A")}
    assert adapted == expected


def test_part_policies_pick_the_linears():
    """A frozen tower takes no adapter, a trained projector takes one on each of its linears, the language model
    keeps the plan's names (the Pixtral projector's linears: linear_1, linear_2; `modeling_llava.py`)."""
    from torch import nn

    from memdoc.probe.vlm_freeze import part_of, part_targets

    _, meta = _pixtral_meta()
    assert part_targets(meta, ["q_proj"], "auto", "auto") == ["q_proj"]
    names = set(part_targets(meta, ["q_proj", "v_proj"], "frozen", "trained"))
    linears = {n for n, m in meta.named_modules() if isinstance(m, nn.Linear)}
    language = {n for n in linears if ".language_model." in n and n.endswith((".q_proj", ".v_proj"))}
    projector = {n for n in linears if ".multi_modal_projector." in n}
    assert projector == {"model.multi_modal_projector.linear_1", "model.multi_modal_projector.linear_2"}
    assert names == language | projector
    assert part_of("model.visual.merger.mlp.0") == "projector" and part_of("model.visual.blocks.0.attn.qkv") == (
        "vision_tower"
    )
