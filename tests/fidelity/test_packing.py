"""`--packing` against the trainers' own parsers, the dataset's documents and an enumeration of attention work.

* Emit: each format's packing keys pass the trainer's own parser and come out as packing there (TRL 1.16
  `trl.scripts.sft.make_parser` with `SFTConfig.packing`/`padding_free`; Axolotl 0.19 `validate_config`;
  LLaMA-Factory 0.9.5 `get_train_args`, whose `DataArguments.__post_init__` sets `packing` from `neat_packing`);
  HF `TrainingArguments` has no key and is refused; `--config` reads each file back as `packing`.
* Time: the attention of a packed row of documents dᵢ costs Σdᵢ² (flash-attention varlen), counted by enumerating
  the documents, not by memdoc's formula.
* `--dataset`: the packed rows' documents per row and Σd²/Σd from a list of lengths worked by hand.
"""

import os

import pytest
import yaml

from memdoc.core.billing.states import model_states
from memdoc.core.billing.steptime import matmul_flops
from memdoc.core.model.model_spec import spec_from_config
from memdoc.core.model.plan import parse_plan
from memdoc.core.model.plan_checks import check_requested_plan
from memdoc.core.model.stack import Stack
from memdoc.core.remedies.dataset_fit import packed_rows
from memdoc.core.trainers.axolotl.read import read_axolotl
from memdoc.core.trainers.emit import EmitContext, emit
from memdoc.core.trainers.llamafactory.read import read_llamafactory
from memdoc.core.trainers.reading import SourceDoc
from memdoc.core.trainers.trl.read import read_trainer_args
from memdoc.errors import PlanError

os.environ.setdefault("DISABLE_VERSION_CHECK", "1")  # LLaMA-Factory pins transformers<=5.6; its parser is what we test
MODEL = "meta-llama/Llama-3.1-8B"


def _emitted(fmt: str, **flags) -> dict:
    plan = parse_plan(packing=True, seq=4096, **flags)
    return emit(fmt, EmitContext(model_id=MODEL, plan=plan, peak_allocated=1, process_total=1)).config


@pytest.mark.slow
def test_trl_parser_reads_packing_and_padding_free(tmp_path):
    make_parser = pytest.importorskip("trl.scripts.sft").make_parser
    cfg = {**_emitted("trl", method="lora"), "use_cpu": True}
    path = tmp_path / "trl.yaml"
    path.write_text(yaml.safe_dump(cfg))
    _, training_args, model_args, _ = make_parser().parse_args_and_config(["--config", str(path)])
    assert training_args.packing is True and training_args.padding_free is True
    assert training_args.packing_strategy == "bfd"  # TRL's default: padding-free rows
    assert model_args.attn_implementation == "flash_attention_2"


def test_axolotl_validates_sample_packing():
    config_mod = pytest.importorskip("axolotl.utils.config")
    from axolotl.utils.dict import DictDefault

    validated = config_mod.validate_config(DictDefault(_emitted("axolotl", method="lora")))
    assert validated.sample_packing is True and validated.pad_to_sequence_len is True
    assert validated.attn_implementation == "flash_attention_2"


def test_llamafactory_parser_packs_without_cross_attention(monkeypatch):
    parser = pytest.importorskip("llamafactory.hparams.parser")
    cfg = {**_emitted("llamafactory", method="lora"), "use_cpu": True}
    monkeypatch.setattr(parser, "is_torch_bf16_gpu_available", lambda: True)  # a device check, not a config one
    model_args, data_args, *_ = parser.get_train_args(cfg)
    assert data_args.packing is True and data_args.neat_packing is True
    assert str(model_args.flash_attn) in ("fa2", "AttentionFunction.FA2")


def test_hf_format_refuses_packing_naming_the_formats_that_have_it():
    with pytest.raises(PlanError) as err:
        _emitted("hf")
    assert "trl" in err.value.hint and "axolotl" in err.value.hint and "llamafactory" in err.value.hint


@pytest.mark.parametrize(
    ("fmt", "reader"), [("trl", read_trainer_args), ("axolotl", read_axolotl), ("llamafactory", read_llamafactory)]
)
def test_config_reads_the_emitted_keys_back(fmt, reader):
    data = _emitted(fmt, method="lora")
    reading = reader(SourceDoc(f"{fmt}.yaml", data, {key: i + 1 for i, key in enumerate(data)}), Stack())
    assert reading.plan["packing"] is True


def test_attention_costs_the_documents_not_the_row():
    spec = spec_from_config(
        {
            "model_type": "llama",
            "architectures": ["LlamaForCausalLM"],
            "vocab_size": 128,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 8192,
        },
        model_id="small",
    )
    documents = [1000, 500, 300, 200, 48]  # one packed row of 2,048 tokens
    seq = sum(documents)
    pairs = sum(d * d for d in documents)  # query-key pairs inside the documents (×½ causal, on both sides)

    def flops(**flags):
        plan = parse_plan(seq=seq, **flags)
        return matmul_flops(spec, plan, model_states(spec, plan).trainable_params)

    unpacked = flops()
    packed = flops(packing=True, document_tokens=round(pairs / seq))
    one_token_docs = flops(packing=True, document_tokens=1)  # Σd² = seq: attention ≈ 0
    saved_share = (unpacked - packed) / (unpacked - one_token_docs)
    assert saved_share == pytest.approx((seq * seq - pairs) / (seq * seq - seq), rel=1e-3)
    assert flops(packing=True) == unpacked  # no --document-tokens: one document per row, the upper bound


def test_dataset_gives_documents_per_row_and_the_weighted_mean():
    rows = packed_rows([100, 300, 600, 5000], seq=1000)  # the 5,000-token sample is cut at 1,000
    assert rows["documents_per_row"] == pytest.approx(4 * 1000 / 2000)
    assert rows["document_tokens"] == round((100**2 + 300**2 + 600**2 + 1000**2) / 2000)
    assert rows["real_token_share_unpacked"] == pytest.approx(2000 / 4000)


def test_packing_checks():
    with pytest.raises(PlanError, match="needs --packing"):
        check_requested_plan(parse_plan(document_tokens=512))
    with pytest.raises(PlanError, match="flash-attention"):
        check_requested_plan(parse_plan(packing=True, attention="eager"))
