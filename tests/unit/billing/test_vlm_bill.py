"""A vision-language model's bill counts the weights and states of every part: vision encoder, projector and
language model (cross-attention layers included), against published exact counts and the LoRA arithmetic."""

from conftest import bill_plan, invoke

from memdoc.resolve.models import catalog_config

LLAMA_32_11B_VISION = 10_670_220_835
"""meta-llama/Llama-3.2-11B-Vision-Instruct's model card: 10,670,220,835 parameters."""


def test_full_fine_tuning_trains_every_part():
    b = bill_plan("meta-llama/Llama-3.2-11B-Vision-Instruct", optimizer="adamw-foreach")
    opt = b.phases["optimizer"]
    assert opt.weights == 2 * LLAMA_32_11B_VISION and opt.gradients == 2 * LLAMA_32_11B_VISION
    assert opt.optimizer == 4 * LLAMA_32_11B_VISION  # exp_avg + exp_avg_sq in bf16
    assert b.states.trainable_params == LLAMA_32_11B_VISION


def test_lora_adapts_the_language_model_and_loads_every_part():
    config = catalog_config("Qwen/Qwen2.5-VL-7B-Instruct")  # the language model's sizes are top-level keys
    h, layers = config["hidden_size"], config["num_hidden_layers"]
    kv = config["num_key_value_heads"] * h // config["num_attention_heads"]
    b = bill_plan("Qwen/Qwen2.5-VL-7B-Instruct", method="lora", lora_rank=16)
    # peft's q_proj (h → h) and v_proj (h → kv) adapters: A is r × in, B is out × r, on every decoder layer
    assert b.states.trainable_params == layers * 16 * ((h + h) + (h + kv))
    assert b.phases["optimizer"].weights >= 2 * 8_290_000_000  # 8.29B published, all parts loaded in bf16


def test_bill_notes_the_parts_and_no_longer_says_not_billed_yet():
    # issue 26 item 3 bills image tokens and the vision encoder's activations: the round-1 "not billed yet" note goes
    notes = bill_plan("google/gemma-3-4b-it").notes
    assert any("vision encoder" in n and "projector" in n for n in notes)
    assert not any("not billed yet" in n for n in notes)
    assert not any("vision" in n for n in bill_plan("Qwen/Qwen2.5-7B").notes)
    with_images = bill_plan("google/gemma-3-4b-it", images_per_sample=2, seq_len=512).notes
    assert any("512 text + 512 image tokens" in n for n in with_images)  # 2 × Gemma 3's mm_tokens_per_image 256


QWEN_MAX_PIXELS = 12_845_056
"""Qwen/Qwen2.5-VL-7B-Instruct's preprocessor_config.json `max_pixels`."""


def _qwen_1024_tokens() -> tuple[int, int]:
    """(language-model tokens, encoder patches) of one 1024×1024 image, by transformers' own `smart_resize`."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    h, w = smart_resize(1024, 1024, factor=28, max_pixels=QWEN_MAX_PIXELS)
    return (h // 28) * (w // 28), (h // 14) * (w // 14)


def test_language_model_runs_at_text_plus_image_tokens():
    from dataclasses import replace

    text_tokens, _ = _qwen_1024_tokens()
    flags = dict(method="lora", seq_len=512, micro_batch=2)
    b = bill_plan("Qwen/Qwen2.5-VL-7B-Instruct", images_per_sample=1, image_size="1024x1024", **flags)
    text = bill_plan("Qwen/Qwen2.5-VL-7B-Instruct", **(flags | {"seq_len": 512 + text_tokens}))
    assert replace(b.acts, vision=None) == text.acts  # the language model's activations at 512 + 1,369 tokens
    assert b.plan.seq_len == 512 and b.plan.images_per_sample == 1  # the user's plan stays on the bill
    # LoRA on the language model: the tower is frozen, saves nothing, and the step's phases are the text step's
    assert b.acts.vision.saved == 0 and b.phases["backward"] == text.phases["backward"]


def test_full_fine_tuning_keeps_the_towers_activations_for_backward():
    _, patches = _qwen_1024_tokens()
    flags = dict(method="full", seq_len=512, images_per_sample=1, optimizer="adamw-foreach")
    b = bill_plan("Qwen/Qwen2.5-VL-7B-Instruct", **flags)
    text = bill_plan("Qwen/Qwen2.5-VL-7B-Instruct", **(flags | {"images_per_sample": 0, "seq_len": 512}))
    assert b.acts.vision.encoder_tokens == patches  # 74 × 74 patches of 14 px
    assert b.acts.vision.trained and b.acts.vision.saved > 32 * b.acts.vision.encoder_tokens * 1280 * 2
    lm = bill_plan("Qwen/Qwen2.5-VL-7B-Instruct", **(flags | {"images_per_sample": 0, "seq_len": 512 + patches // 4}))
    assert b.phases["forward"].activations == lm.phases["forward"].activations + b.acts.vision.saved
    assert b.phases["forward"].activations > text.phases["forward"].activations
    checkpointed = bill_plan("Qwen/Qwen2.5-VL-7B-Instruct", checkpointing="full", **flags)
    # every Qwen2_5_VLVisionBlock is a GradientCheckpointingLayer: each keeps its bf16 input
    assert checkpointed.acts.vision.saved < b.acts.vision.saved / 10


def test_catalog_lists_vlms_with_their_parts():
    import json

    result = invoke("models", "--json")
    assert result.exit_code == 0
    rows = {row["id"]: row for row in json.loads(result.stdout)}
    smol = rows["HuggingFaceTB/SmolVLM-Instruct"]
    assert smol["model_type"] == "idefics3"
    assert smol["vision_params"] + smol["projector_params"] + smol["language_params"] == smol["params"]
    assert "vision_params" not in rows["Qwen/Qwen2.5-7B"]


def test_local_vlm_config_resolves(tmp_path):
    import json

    (tmp_path / "config.json").write_text(json.dumps(catalog_config("HuggingFaceTB/SmolVLM-Instruct")))
    result = invoke("bill", str(tmp_path), "--gpu", "24", "--json")
    assert result.exit_code == 0, result.output
    model = json.loads(result.stdout)["model"]
    assert round(model["params"] / 1e9, 2) == 2.25  # the Hub page's 2.25B params
    assert model["vision_params"] > 0


def test_tensor_parallel_rank_keeps_the_vision_parts_whole():
    # transformers 5.24 `Qwen2_5_VLTextConfig.base_model_tp_plan` names the text layers only: the vision tower
    # and merger are replicated on every TP rank.
    from memdoc.core.billing.parallel import tp_rank_model
    from memdoc.resolve.models import resolve_model

    model = resolve_model("Qwen/Qwen2.5-VL-7B-Instruct")
    rank = tp_rank_model(model, 2)
    assert rank.vision is model.vision
    assert (rank.params.vision, rank.params.projector) == (631_975_680, 44_574_464)  # the meta build's, per part
    assert rank.params.language < model.params.language


QWEN_VL_7B_TOWER, QWEN_VL_7B_MERGER = 631_975_680, 44_574_464
"""Qwen2.5-VL-7B's vision encoder and merger, counted on its meta-device build (`test_vision_params`)."""


def test_frozen_parts_have_no_gradients_or_optimizer_states():
    # LLaMA-Factory's freeze_vision_tower / freeze_multi_modal_projector: the parts' weights load, nothing else
    flags = dict(method="full", optimizer="adamw-foreach")
    trained = bill_plan("Qwen/Qwen2.5-VL-7B-Instruct", **flags)
    tower = bill_plan("Qwen/Qwen2.5-VL-7B-Instruct", vision_tower="frozen", **flags)
    both = bill_plan("Qwen/Qwen2.5-VL-7B-Instruct", vision_tower="frozen", projector="frozen", **flags)
    assert trained.states.trainable_params - tower.states.trainable_params == QWEN_VL_7B_TOWER
    assert tower.states.trainable_params - both.states.trainable_params == QWEN_VL_7B_MERGER
    assert tower.states.weights == trained.states.weights  # bf16 weights of every part
    assert trained.states.gradients - tower.states.gradients == 2 * QWEN_VL_7B_TOWER  # bf16 gradients
    assert trained.states.optimizer - tower.states.optimizer == 4 * QWEN_VL_7B_TOWER  # two bf16 AdamW states


def test_frozen_tower_saves_nothing_but_a_trained_projector_does():
    flags = dict(method="full", images_per_sample=1, vision_tower="frozen")
    only_projector = bill_plan("Qwen/Qwen2.5-VL-7B-Instruct", **flags).acts.vision
    nothing = bill_plan("Qwen/Qwen2.5-VL-7B-Instruct", projector="frozen", **flags).acts.vision
    assert not only_projector.trained and 0 < only_projector.saved < 1024**3
    assert nothing.saved == 0 and nothing.transient > 0


def test_lora_default_targets_reach_siglips_attention():
    # peft matches q_proj/v_proj on every module: Gemma 3's SigLIP attention gets adapters (27 blocks, 1152 wide)
    lora = bill_plan("google/gemma-3-4b-it", method="lora", lora_rank=16)
    frozen = bill_plan("google/gemma-3-4b-it", method="lora", lora_rank=16, vision_tower="frozen")
    assert lora.states.trainable_params - frozen.states.trainable_params == 27 * 2 * 16 * (1152 + 1152)


def test_vision_policy_on_a_text_model_is_refused():
    result = invoke("bill", "Qwen/Qwen2.5-7B", "--gpu", "24", "--vision-tower", "frozen")
    assert result.exit_code != 0
    assert "text model" in result.output and "Traceback" not in result.output


def test_step_time_runs_the_language_model_at_text_plus_image_tokens():
    from memdoc.core.billing.steptime import step_time
    from memdoc.core.model.gpu import resolve_gpu
    from memdoc.core.model.plan import parse_plan
    from memdoc.resolve.models import resolve_model

    model, gpu = resolve_model("Qwen/Qwen2.5-VL-7B-Instruct"), resolve_gpu("h100")
    text_tokens, _ = _qwen_1024_tokens()
    with_image = step_time(model, parse_plan(method="lora", seq_len=512, images_per_sample=1), gpu)
    as_text = step_time(model, parse_plan(method="lora", seq_len=512 + text_tokens), gpu)
    assert with_image == as_text and with_image.tokens == 512 + 1369
