"""The symptom knowledge base: shape, ladder order, ids, and the switches it names."""

from __future__ import annotations

import dataclasses
import re

import pytest
import yaml
from conftest import ROOT, SYMPTOM_IDS

from memdoc.core.doctor.symptoms import (
    HOW_KEYS,
    WHY,
    get_symptom,
    list_symptoms,
    load_symptoms,
)
from memdoc.core.remedies.levers import LADDER_RANK, LEVERS, PLAN_LEVERS, ladder_rank
from memdoc.errors import KnowledgeBaseError, MemdocError, UnknownSymptomError

SYMPTOMS = list_symptoms()
PRESCRIPTIONS = [(s.id, p) for s in SYMPTOMS for p in s.prescriptions]


def test_all_symptoms_present_in_order():
    assert [s.id for s in SYMPTOMS] == SYMPTOM_IDS


@pytest.mark.parametrize("symptom", SYMPTOMS, ids=lambda s: s.id)
def test_symptom_shape(symptom):
    assert symptom.title and symptom.description and symptom.causes
    assert len(symptom.prescriptions) >= 3


@pytest.mark.parametrize("symptom", SYMPTOMS, ids=lambda s: s.id)
def test_ladder_order(symptom):
    ranks = [p.rank for p in symptom.prescriptions if p.rank is not None]
    if symptom.ladder == "ascending":
        assert ranks == sorted(ranks)
    elif symptom.ladder == "descending":
        assert ranks == sorted(ranks, reverse=True)


def test_memory_symptoms_climb_the_ladder():
    for name in ("startup-oom", "mid-run-oom", "long-sample-oom", "ckpt-no-savings"):
        assert get_symptom(name).ladder == "ascending"
    assert get_symptom("slow-but-fits").ladder == "descending"
    startup = [p.rank for p in get_symptom("startup-oom").prescriptions if p.rank]
    assert startup == [3, 4, 5, 6, 7, 8]  # bf16 → QLoRA → 8-bit → offload → ZeRO-3 → weight offload


def test_ladder_table_is_the_documented_order():
    order = [
        ("micro_batch", "half"),
        ("checkpointing", "full"),
        ("precision", "bf16"),
        ("method", "qlora"),
        ("optimizer", "paged-adamw-8bit"),
        ("offload", "optimizer"),
        ("shard", "zero3"),
        ("offload", "optimizer+params"),
    ]
    assert [LADDER_RANK[k] for k in order] == list(range(1, 9))
    assert ladder_rank(None) is None and ladder_rank({"optimizer_in_backward": True}) is None
    # issue 29: activation offloading is a plan value now, the rung right after checkpointing (②b)
    assert ladder_rank({"activation_offload": True}) == LADDER_RANK[("checkpointing", "full")] == 2
    assert ladder_rank({"micro_batch": "half", "shard": "fsdp"}) == 7


def test_prescription_ids_are_unique_and_kebab():
    ids = [p.id for _, p in PRESCRIPTIONS]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", i) for i in ids)


@pytest.mark.parametrize(("symptom", "p"), PRESCRIPTIONS, ids=[p.id for _, p in PRESCRIPTIONS])
def test_prescription_fields(symptom, p):
    assert p.action and p.time_cost
    assert p.why in WHY
    assert set(p.how) <= set(HOW_KEYS)
    if p.lever is not None:
        for key, value in p.lever.items():
            assert value in LEVERS[key]


POST_RELATIVE = {
    ("vllm_memory", "lean"),
    ("generation_batch", "smallest"),
    ("num_generations", "half"),
    ("completion_len", "half"),
}
"""Relative post-training lever values, as micro_batch's 'half': `quantify.apply_lever` sizes them on the plan
(tests/unit/remedies/test_levers.py checks each against its rung)."""


def test_plan_levers_use_plan_values():
    from memdoc.core.model.plan import TrainingPlan

    fields = {f.name for f in dataclasses.fields(TrainingPlan)}
    assert set(PLAN_LEVERS) <= fields
    base = TrainingPlan(gpus_per_node=8)
    for _, p in PRESCRIPTIONS:
        changes = {
            key: type(getattr(base, key))(value)  # a real enum value
            for key, value in (p.lever or {}).items()
            if key in PLAN_LEVERS and key not in ("micro_batch", "seq_len") and (key, value) not in POST_RELATIVE
        }
        base.replace(**changes)  # the changed plan passes TrainingPlan's own validation


def test_hf_keys_exist_in_installed_training_arguments():
    transformers = pytest.importorskip("transformers")
    fields = {f.name for f in dataclasses.fields(transformers.TrainingArguments)}
    from transformers.training_args import OptimizerNames

    optims = {o.value for o in OptimizerNames}
    for _, p in PRESCRIPTIONS:
        for key, value in p.how.get("hf", {}).items():
            assert key in fields, f"{p.id}: TrainingArguments has no {key!r}"
            if key == "optim":
                assert value in optims, f"{p.id}: unknown optim {value!r}"


def test_beyond_the_articles_is_covered():
    text = " ".join(repr(p) for _, p in PRESCRIPTIONS)
    for needle in (
        "use_liger_kernel",
        "cut_cross_entropy",
        "activation_offloading",
        "register_post_accumulate_grad_hook",
        "kv_cache_dtype",
        "expandable_segments",
        "paged_adamw_8bit",
        "sample_packing",
        "cutoff_len",
    ):
        assert needle in text, needle


def test_get_symptom_forgives_case_and_underscores():
    assert get_symptom("Mid_Run_OOM").id == "mid-run-oom"


def test_unknown_symptom_suggests_close_matches():
    with pytest.raises(UnknownSymptomError) as info:
        get_symptom("midrun-oom")
    assert isinstance(info.value, MemdocError) and info.value.exit_code == 2
    assert "mid-run-oom" in (info.value.hint or "")
    assert "known symptoms" in str(info.value)


def _bundled_yaml() -> dict:
    from importlib import resources

    return yaml.safe_load(resources.files("memdoc").joinpath("data", "symptoms.yaml").read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d["mid-run-oom"]["prescriptions"][0].update(why="vibes"), "mid-run-oom"),
        (lambda d: d["startup-oom"]["prescriptions"][1].update(lever={"warp": 9}), "startup-lora"),
        (lambda d: d["startup-oom"]["prescriptions"][1].update(how={"keras": {"x": 1}}), "unknown how key"),
        (lambda d: d["inference-oom"].update(prescriptions=d["inference-oom"]["prescriptions"][:2]), "at least 3"),
        (lambda d: d["startup-oom"]["prescriptions"].reverse(), "cost ladder"),
        (lambda d: d["nan-with-amp"]["prescriptions"][0].update(id="midrun-checkpointing"), "already used"),
        (lambda d: d["grad-mismatch"]["prescriptions"][0].pop("action"), "grad-preserve-rng"),
    ],
)
def test_malformed_data_names_the_entry(mutate, message):
    data = _bundled_yaml()
    mutate(data)
    with pytest.raises(KnowledgeBaseError, match=re.escape(message)):
        load_symptoms(yaml.safe_dump(data))


def test_invalid_yaml_is_a_memdoc_error():
    with pytest.raises(KnowledgeBaseError):
        load_symptoms("a: [")


# ---------------------------------------------------------------------------------------------
# The phase and kind symptoms (issue 24): every switch they name exists in the installed package.

KIND_SYMPTOMS = ("eval-oom", "save-oom", "host-oom", "nccl-oom", "rank-imbalance")
KIND_PRESCRIPTIONS = [p for s in KIND_SYMPTOMS for p in get_symptom(s).prescriptions]


def _source(module: str, relpath: str) -> str:
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{module} is not installed")
    return (Path(next(iter(spec.submodule_search_locations))) / relpath).read_text(encoding="utf-8")


def test_kind_symptoms_are_after_the_first_ten_and_off_the_ladder():
    assert [s.id for s in SYMPTOMS][-5:] == list(KIND_SYMPTOMS)
    for name in KIND_SYMPTOMS:
        symptom = get_symptom(name)
        assert symptom.ladder == "none" and all(p.lever is None for p in symptom.prescriptions)


def test_kind_symptom_trl_keys_exist_in_sft_config():
    trl = pytest.importorskip("trl")
    fields = {f.name for f in dataclasses.fields(trl.SFTConfig)}
    for p in KIND_PRESCRIPTIONS:
        for key in p.how.get("trl", {}):
            assert key in fields, f"{p.id}: SFTConfig has no {key!r}"


def test_kind_symptom_axolotl_and_llamafactory_keys_exist():
    axolotl = "".join(_source("axolotl", f"utils/schemas/{f}.py") for f in ("config", "training", "fsdp", "model"))
    llamafactory = "".join(
        _source("llamafactory", f"hparams/{f}.py") for f in ("data_args", "model_args", "finetuning_args")
    )
    hf = {f.name for f in dataclasses.fields(pytest.importorskip("transformers").TrainingArguments)}
    for p in KIND_PRESCRIPTIONS:
        for key, value in p.how.get("axolotl", {}).items():
            assert re.search(rf"^\s+{key}:", axolotl, re.M), f"{p.id}: axolotl has no {key!r}"
            for sub in value if isinstance(value, dict) else ():
                assert re.search(rf"^\s+{sub}:", axolotl, re.M), f"{p.id}: axolotl has no {key}.{sub}"
        for key in p.how.get("llamafactory", {}):
            in_own = re.search(rf"^\s+{key}:", llamafactory, re.M)
            assert in_own or key in hf, f"{p.id}: LLaMA-Factory has no {key!r}"


def test_kind_symptom_deepspeed_keys_exist():
    config = _source("deepspeed", "runtime/zero/config.py")
    offload = _source("deepspeed", "runtime/zero/offload_config.py")
    for p in KIND_PRESCRIPTIONS:
        zero = p.how.get("deepspeed", {}).get("zero_optimization", {})
        for key, value in zero.items():
            assert re.search(rf"\b{key}\b", config), f"{p.id}: DeepSpeedZeroConfig has no {key!r}"
            for sub in value if isinstance(value, dict) else ():
                assert re.search(rf"^\s+{sub}:", offload, re.M), f"{p.id}: offload config has no {sub!r}"


def test_kind_symptom_env_and_calls_exist():
    training_args = _source("transformers", "training_args.py")
    ddp = _source("torch", "nn/parallel/distributed.py")
    trainer = _source("transformers", "trainer.py")
    state_dict = _source("torch", "distributed/checkpoint/state_dict.py")
    for p in KIND_PRESCRIPTIONS:
        for var in p.how.get("env", {}):
            assert var in training_args or var in ddp, f"{p.id}: {var} is read nowhere in the installed sources"
    calls = " ".join(p.how.get("pytorch", "") for p in KIND_PRESCRIPTIONS)
    assert "preprocess_logits_for_metrics" in calls and "preprocess_logits_for_metrics:" in trainer
    assert "StateDictOptions(full_state_dict=True, cpu_offload=True)" in calls
    assert "full_state_dict: bool" in state_dict and "cpu_offload: bool" in state_dict
    assert "set_per_process_memory_fraction" in calls
    assert "FSDP_CPU_RAM_EFFICIENT_LOADING" in training_args
    assert '"low_cpu_mem_usage"' in _source("transformers", "modeling_utils.py")  # popped unused: not prescribed
    assert "low_cpu_mem_usage" not in " ".join(repr(p) for p in KIND_PRESCRIPTIONS if p.id != "host-rank0-loading")


# ------------------------------------------------------------------ texts from the numbers (issue 24)
def _texts(value) -> list[str]:
    if isinstance(value, dict):
        return [t for v in value.values() for t in _texts(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _texts(v)]
    return [value] if isinstance(value, str) else []


def test_placeholders_are_known_and_filled_generically_without_a_plan():
    from memdoc.core.doctor.symptoms import HINTS

    raw = yaml.safe_load((ROOT / "memdoc" / "data" / "symptoms.yaml").read_text(encoding="utf-8"))
    names = set(re.findall(r"\{([a-z_]+)\|", yaml.safe_dump(raw)))
    assert names and names <= set(HINTS)
    for symptom in load_symptoms().values():
        texts = _texts([symptom.description, symptom.causes])
        texts += [t for p in symptom.prescriptions for t in _texts([p.action, p.time_cost, p.how, p.detail])]
        assert not any("{" in t and "|" in t for t in texts), symptom.id


def test_hint_values_keep_the_effective_batch():
    from memdoc.core.doctor.hints import hint_values
    from memdoc.core.model.plan import parse_plan

    values = hint_values(parse_plan(micro_batch=8, grad_accum=3))
    assert (int(values["micro_batch_half"]), int(values["grad_accum_keep"])) == (4, 6)  # 4 × 6 = 8 × 3
    assert "micro_batch_double" not in values  # 3 cannot be halved: doubling would change the effective batch
    assert hint_values(None) == {}  # no plan: no figures (the texts say it generically)


def test_halve_micro_batch_switches_without_a_plan_invent_no_numbers():
    p = next(p for p in get_symptom("mid-run-oom").prescriptions if p.id == "midrun-halve-micro-batch")
    assert p.how["hf"] == {"per_device_train_batch_size": "half yours", "gradient_accumulation_steps": "twice yours"}
    cap = next(p for p in get_symptom("long-sample-oom").prescriptions if p.id == "long-cap-length")
    assert cap.filled({"max_length": "3172"}).how["trl"] == {"max_length": 3172}


def test_entries_in_the_old_schema_still_load():
    # an entry without placeholders and without any new key (the schema doc-kinds' new entries use)
    text = """
x-oom:
  title: t
  description: d
  causes: [c]
  prescriptions:
    - {id: x-a, action: a, why: time, time_cost: none, lever: null, how: {hf: {per_device_eval_batch_size: 4}}}
    - {id: x-b, action: b, why: time, time_cost: none, lever: null, how: {}}
    - {id: x-c, action: c, why: time, time_cost: none, lever: null, how: {}}
"""
    symptom = load_symptoms(text)["x-oom"]
    assert symptom.prescriptions[0].how == {"hf": {"per_device_eval_batch_size": 4}}
    assert symptom.filled({"micro_batch_half": "2"}) == symptom


def test_an_unknown_placeholder_is_refused():
    text = """
x-oom:
  title: t
  description: "needs {bytes_per_gpu|some}"
  causes: [c]
  prescriptions:
    - {id: x-a, action: a, why: time, time_cost: none, lever: null, how: {}}
    - {id: x-b, action: b, why: time, time_cost: none, lever: null, how: {}}
    - {id: x-c, action: c, why: time, time_cost: none, lever: null, how: {}}
"""
    with pytest.raises(KnowledgeBaseError, match="unknown placeholder"):
        load_symptoms(text)
