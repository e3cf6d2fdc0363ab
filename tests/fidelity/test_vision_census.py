"""The vision encoder's activation model against autograd itself: a census of what a real CPU forward saves.

Tiny random VLMs of transformers 5.24 (Qwen2.5-VL: RMSNorm blocks with window attention; Gemma 3: SigLIP;
Idefics3: its SigLIP-like tower) run their vision tower and projector forward under
`torch.autograd.graph.saved_tensors_hooks` (`conftest.saved_storages`), at two image sizes each. Each encoder
block's distinct saved storages must equal `activations.vision.block_saved` exactly; the whole tower and projector
(a second forward, one census, no per-block hooks: shared tensors counted once) must equal the blocks plus
`outside_blocks_saved` (patch embedding's input, final norm, rotary tables, projector) within 3%, the issue's bound
(the tiny towers have 3-4 blocks, so the outside part weighs more here than in a 24-32-block tower).
The SigLIP-like cases run in fp32: on the CPU, LayerNorm saves its mean and rstd in the input's dtype (bf16), on
CUDA in fp32 (its accumulation type), which the bill follows; Qwen2.5-VL has no LayerNorm and runs in bf16.
"""

import pytest
from conftest import saved_storages

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # six tiny VLM forwards, twice each: ~15 s

from memdoc.core.billing.activations.saved import FP32  # noqa: E402
from memdoc.core.billing.activations.vision import block_saved, outside_blocks_saved  # noqa: E402
from memdoc.core.model.vision.vlm import model_spec  # noqa: E402

TEXT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
TEXT |= dict(vocab_size=300, head_dim=16)
SIGLIP = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4)


def _qwen(size: tuple[int, int]):
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    vision = dict(depth=4, hidden_size=64, intermediate_size=96, num_heads=4, out_hidden_size=64, window_size=56)
    config = Qwen2_5_VLConfig(text_config=TEXT, vision_config=vision | dict(fullatt_block_indexes=[3]))
    model = Qwen2_5_VLForConditionalGeneration(config).to(torch.bfloat16)
    gh, gw = size[1] // 14, size[0] // 14
    pixels = torch.randn(gh * gw, 3 * 2 * 14 * 14, dtype=torch.bfloat16)

    def run():
        return model.model.visual(pixels, grid_thw=torch.tensor([[1, gh, gw]]))

    return config, model, model.model.visual.blocks, run, gh * gw


def _siglip_like(family: str, size: int):
    from transformers import (
        Gemma3Config,
        Gemma3ForConditionalGeneration,
        Idefics3Config,
        Idefics3ForConditionalGeneration,
    )

    if family == "gemma3":
        vision = SIGLIP | dict(image_size=size, patch_size=14, vision_use_head=False)
        config = Gemma3Config(text_config=TEXT, vision_config=vision, mm_tokens_per_image=16)
        model = Gemma3ForConditionalGeneration(config)
        tower, projector = model.model.vision_tower, model.model.multi_modal_projector
    else:
        config = Idefics3Config(text_config=TEXT, vision_config=SIGLIP | dict(image_size=size, patch_size=16))
        model = Idefics3ForConditionalGeneration(config)
        tower, projector = model.model.vision_model, model.model.connector
    pixels = torch.randn(2, 3, size, size)

    def run():
        return projector(tower(pixel_values=pixels).last_hidden_state)

    blocks = next(m for name, m in tower.named_modules() if name.endswith("encoder.layers"))
    return config, model, blocks, run, 2 * (size // config.vision_config.patch_size) ** 2


def census(model, blocks, run) -> list[int]:
    """The bytes each block saves, from autograd's own saved tensors."""
    per_block = []
    for block in blocks:
        forward = block.forward

        def counted(*args, _forward=forward, **kwargs):
            with saved_storages(model) as seen:  # the innermost hooks win: the outer census skips the block
                out = _forward(*args, **kwargs)
            per_block.append(sum(seen.values()))
            return out

        block.forward = counted
    run()
    for block in blocks:
        del block.forward
    return per_block


def whole(model, run) -> int:
    """The bytes the tower and projector save in all, each storage once."""
    with saved_storages(model) as seen:
        run()
    return sum(seen.values())


CASES = [("qwen2_5_vl", (224, 224)), ("qwen2_5_vl", (448, 308))]
CASES += [("gemma3", 224), ("gemma3", 112), ("idefics3", 128), ("idefics3", 64)]


@pytest.mark.parametrize(("family", "size"), CASES)
def test_vision_blocks_save_what_the_bill_says(family, size):
    torch.manual_seed(0)
    built = _qwen(size) if family == "qwen2_5_vl" else _siglip_like(family, size)
    config, model, blocks, run, tokens = built
    model.train()
    vision = model_spec(config.to_dict(), model_id=f"tiny-{family}").vision
    dt = 2 if family == "qwen2_5_vl" else FP32
    expected = block_saved(vision, tokens, dt=dt)
    rotary = 2 * FP32 * tokens * (vision.hidden_size // vision.num_heads) if family == "qwen2_5_vl" else 0
    assert census(model, blocks, run) == [expected + rotary] * len(blocks)  # a block's census sees the shared cos/sin
    billed = len(blocks) * expected + outside_blocks_saved(family, vision, tokens, dt=dt)
    assert billed == pytest.approx(whole(model, run), rel=0.03)


LORA_CASES = [
    ("gemma3", 112, ["q_proj", "v_proj"]),  # peft matches SigLIP's q_proj/v_proj too: the tower gets adapters
    ("idefics3", 64, ["q_proj", "k_proj", "v_proj", "fc1"]),
    ("qwen2_5_vl", (224, 224), "all-linear"),  # every nn.Linear but lm_head: the tower's and the merger's
    ("qwen2_5_vl", (224, 224), ["q_proj", "v_proj", "gate_proj", "down_proj"]),  # the vision MLP's names match
]


@pytest.mark.parametrize(("family", "size", "targets"), LORA_CASES)
def test_lora_reaches_the_vision_linears_peft_adapts_and_saves_what_the_bill_says(family, size, targets):
    from peft import LoraConfig, get_peft_model

    from memdoc.core.billing.vision_parts import part_training
    from memdoc.core.model.plan import parse_plan

    torch.manual_seed(0)
    built = _qwen(size) if family == "qwen2_5_vl" else _siglip_like(family, size)
    config, model, blocks, run, tokens = built
    spec = model_spec(config.to_dict(), model_id=f"tiny-{family}")
    model = get_peft_model(model, LoraConfig(r=8, target_modules=targets))  # peft's default: fp32 adapters
    model.train()
    lora_targets = targets if isinstance(targets, list) else [targets]
    parts = part_training(spec, parse_plan(method="lora", lora_rank=8, lora_targets=lora_targets))
    adapted = {name.split(".")[-1] for name, module in blocks.named_modules() if hasattr(module, "lora_A")}
    assert parts.tower_adapted == adapted
    merger = getattr(model.base_model.model.model.visual, "merger", None) if family == "qwen2_5_vl" else None
    in_merger = {n.split(".")[-1] for n, m in merger.named_modules() if hasattr(m, "lora_A")} if merger else set()
    assert parts.projector_adapted == in_merger
    dt, cast = (2, FP32) if family == "qwen2_5_vl" else (FP32, 0)  # bf16 weights: peft casts x to fp32 for lora_A
    expected = block_saved(spec.vision, tokens, dt=dt, adapted=frozenset(adapted), rank=8, cast=cast)
    rotary = 2 * FP32 * tokens * (spec.vision.hidden_size // spec.vision.num_heads) if family == "qwen2_5_vl" else 0
    # block 0's input needs no gradient (its norm keeps nothing): the blocks above save the bill's per-block bytes
    assert census(model, blocks, run)[1:] == [expected + rotary] * (len(blocks) - 1)


@pytest.mark.parametrize(("family", "size"), [("qwen2_5_vl", (224, 224)), ("gemma3", 112), ("idefics3", 64)])
def test_a_frozen_tower_under_gradient_checkpointing_still_saves_its_block_inputs(family, size):
    # gradient_checkpointing_enable -> enable_input_require_grads: the patch embedding's output requires grad, so
    # the frozen tower's checkpointed blocks keep their inputs and the frozen projector what its backward needs
    from memdoc.core.billing.activations.vision import vision_activations
    from memdoc.core.model.plan import parse_plan

    torch.manual_seed(0)
    built = _qwen(size) if family == "qwen2_5_vl" else _siglip_like(family, size)
    config, model, blocks, run, tokens = built
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    model.train()
    assert whole(model, run) == 0  # frozen, no checkpointing: nothing saved
    model.gradient_checkpointing_enable()
    spec = model_spec(config.to_dict(), model_id=f"tiny-{family}")
    dtype = "bf16" if family == "qwen2_5_vl" else "fp32"
    width, height = size if isinstance(size, tuple) else (size, size)
    frozen = dict(method="lora", lora_targets=["down_proj"], vision_tower="frozen", projector="frozen")
    plan = parse_plan(
        precision=dtype, checkpointing="full", images_per_sample=1, image_size=f"{width}x{height}", **frozen
    )
    billed = vision_activations(spec, plan, encoder=tokens)
    assert billed.saved == pytest.approx(whole(model, run), rel=0.03)


@pytest.mark.parametrize("family", ["qwen2_5_vl", "gemma3", "idefics3"])
def test_qlora_quantises_the_vision_linears_transformers_converts(family):
    # transformers 5.24 `quantizers/base.py` `get_keys_to_not_convert`: bitsandbytes replaces every nn.Linear but
    # tied weights, the last parameter's module and the output embedding — the vision tower's and projector's too
    from transformers.quantizers.base import get_keys_to_not_convert

    from memdoc.core.billing.kbit import quantised_params

    built = _qwen((224, 224)) if family == "qwen2_5_vl" else _siglip_like(family, 64)
    config, model = built[0], built[1]
    skipped = get_keys_to_not_convert(model)
    converted = sum(
        m.weight.numel()
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and not any(name == k or name.endswith("." + k) for k in skipped)
    )
    assert quantised_params(model_spec(config.to_dict(), model_id=f"tiny-{family}")) == converted


def test_mllama_cross_attention_layers_save_what_the_bill_says():
    from transformers import MllamaConfig, MllamaForConditionalGeneration

    from memdoc.core.billing.activations.cross_attention import cross_layer_saved

    torch.manual_seed(0)
    text = TEXT | dict(num_hidden_layers=4, cross_attention_layers=[1, 3], pad_token_id=0)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_global_layers=1, attention_heads=4)
    vision |= dict(image_size=56, patch_size=14, max_num_tiles=4, vision_output_dim=64, intermediate_layers_indices=[0])
    vision |= dict(supported_aspect_ratios=[[1, 1], [1, 2], [2, 1], [2, 2]])
    config = MllamaConfig(text_config=text, vision_config=vision, image_token_index=299)
    config._attn_implementation = "sdpa"
    model = MllamaForConditionalGeneration(config).to(torch.bfloat16)
    model.train()
    seq = 40
    ids = torch.randint(0, 200, (1, seq))
    ids[0, 1] = 299
    layers = [layer for layer in model.model.language_model.layers if type(layer).__name__.startswith("MllamaCross")]

    def run():
        pixels = torch.randn(1, 1, 4, 3, 56, 56, dtype=torch.bfloat16)
        ratio = dict(aspect_ratio_ids=torch.tensor([[4]]), aspect_ratio_mask=torch.ones(1, 1, 4, dtype=torch.long))
        mask = torch.ones(1, seq, 1, 4, dtype=torch.long)
        model(input_ids=ids, pixel_values=pixels, cross_attention_mask=mask, **ratio)

    spec = model_spec(config.to_dict(), model_id="tiny-mllama")
    cross = 4 * ((56 // 14) ** 2 + 1)  # 4 tiles × (16 patches + the class token), padding sliced off
    gates = 2 * 2  # the two tanh'd bf16 gate scalars
    assert census(model, layers, run) == [cross_layer_saved(spec, seq, cross, dt=2) + gates] * 2
