"""`--tiled-mlp N` against DeepSpeed's own `TiledMLP`, run on the CPU.

DeepSpeed 0.19.8 `runtime/sequence_parallel/ulysses_sp.py` `TiledMLP` is patched onto a tiny Llama's `LlamaMLP`
exactly as its docstring shows (`modeling_llama.LlamaMLP.forward = tiled_mlp_forward`, one process, no
all-reduce of the shard count). `torch.autograd.graph.saved_tensors_hooks` counts what the real model saves:
the bytes one decoder layer keeps (3 layers minus 2) must be the bill's layer with the tiled MLP, and what each
shard's recompute saves in backward must be the bill's untiled MLP share for one shard's tokens.
"""

from __future__ import annotations

import pytest
from conftest import saved_storages

torch = pytest.importorskip("torch")

from memdoc.core.billing.activations import layer_activations  # noqa: E402
from memdoc.core.model.model_spec import spec_from_config  # noqa: E402
from memdoc.core.model.plan import parse_plan  # noqa: E402

pytestmark = pytest.mark.slow

CONFIG = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 176,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 256,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
}
SEQ = 96
SHARDS = 4


@pytest.fixture
def tiled(monkeypatch):
    """LlamaMLP.forward replaced by DeepSpeed's TiledMLP over `SHARDS` shards (its docstring's patch)."""
    from deepspeed.runtime.sequence_parallel.ulysses_sp import TiledMLP
    from transformers.models.llama import modeling_llama

    def mlp_forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))

    def tiled_mlp_forward(self, x):
        params = [self.down_proj.weight, self.gate_proj.weight, self.up_proj.weight]
        return TiledMLP.apply(mlp_forward, self, x, SHARDS, params)

    monkeypatch.setattr(modeling_llama.LlamaMLP, "forward", tiled_mlp_forward)


def _model(layers: int):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(**dict(CONFIG, num_hidden_layers=layers))
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config).train()


def _ids():
    return torch.randint(0, CONFIG["vocab_size"], (1, SEQ), generator=torch.Generator().manual_seed(1))


def _forward_saved(layers: int) -> int:
    """Distinct non-parameter storages a forward saves for backward."""
    model = _model(layers)
    with saved_storages(model) as seen:
        model(input_ids=_ids())
    return sum(seen.values())


def _plan(**extra):
    return parse_plan(**{"precision": "fp32", "seq": SEQ, **extra})


def _spec():
    return spec_from_config(dict(CONFIG, num_hidden_layers=2), model_id="tiny-llama")


def test_tiled_layer_saves_what_is_billed(tiled):
    billed = layer_activations(_spec(), _plan(tiled_mlp=SHARDS))
    assert _forward_saved(3) - _forward_saved(2) == sum(billed.values())
    # the MLP keeps only its input: tokens × hidden × fp32
    assert {k: v for k, v in billed.items() if k.startswith("mlp.")} == {"mlp.tiled_input": SEQ * 64 * 4}


def test_untiled_layer_saves_more_by_the_mlp_intermediates():
    """The same count without the patch: the bill's untiled layer (the reference the tiled share replaces)."""
    billed = layer_activations(_spec(), _plan())
    assert _forward_saved(3) - _forward_saved(2) == sum(billed.values())


def test_each_shard_recompute_saves_the_untiled_mlp_share_of_its_tokens(tiled):
    """TiledMLP.backward reruns the MLP per shard under grad: what that saves is one shard's untiled MLP."""
    from transformers.models.llama.modeling_llama import LlamaMLP

    model = _model(1)
    mlp = next(m for m in model.modules() if isinstance(m, LlamaMLP))
    x = torch.randn(1, SEQ, 64, requires_grad=True)
    out = mlp(x)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[tuple, int] = {}  # a shard of x is a view of its storage: counted by its own bytes, once
    kept: list = []  # held, so no later shard's tensor reuses a freed address

    def pack(t):
        if t.untyped_storage().data_ptr() not in params:
            saved.setdefault((t.data_ptr(), tuple(t.shape)), t.numel() * t.element_size())
        kept.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out.sum().backward()
    shard = _plan(seq=SEQ // SHARDS)
    share = sum(v for k, v in layer_activations(_spec(), shard).items() if k.startswith("mlp."))
    assert sum(saved.values()) == SHARDS * share
    assert x.grad is not None and x.grad.shape == x.shape


EMIT = ("meta-llama/Llama-3.1-8B", "--gpu", "h100", "--seq", "65536", "--checkpointing", "full", "--tiled-mlp", "16")


def test_axolotl_validates_the_emitted_tiled_mlp(tmp_path):
    """Axolotl 0.19's own validator reads the keys (`utils/schemas/config.py` `tiled_mlp`, `tiled_mlp_num_shards`)."""
    import yaml
    from conftest import invoke as run

    config_mod = pytest.importorskip("axolotl.utils.config")
    from axolotl.utils.dict import DictDefault

    path = tmp_path / "axolotl.yaml"
    result = run("emit", *EMIT, "--format", "axolotl", "-o", path)
    assert result.exit_code == 0, result.output
    validated = config_mod.validate_config(DictDefault(yaml.safe_load(path.read_text())))
    assert validated.tiled_mlp is True
    assert validated.tiled_mlp_num_shards == 16


@pytest.mark.parametrize("fmt", ["trl", "hf", "llamafactory"])
def test_emit_refuses_tiled_mlp_where_the_format_has_no_key(tmp_path, fmt):
    from conftest import invoke as run

    result = run("emit", *EMIT, "--format", fmt, "-o", tmp_path / "x.yaml")
    assert result.exit_code != 0
    assert "--format axolotl" in result.output and "Traceback" not in result.output


def test_tiled_mlp_costs_one_more_mlp_forward():
    """Step time grows by the MLP matmuls' 2·tokens·params, run once more (TiledMLP.backward's recompute)."""
    from memdoc.core.billing.steptime import matmul_flops

    spec = _spec()
    untiled = matmul_flops(spec, _plan(), 0)
    tiled = matmul_flops(spec, _plan(tiled_mlp=SHARDS), 0)
    mlp_params = 3 * 64 * 176 * 2  # gate, up, down in each of the 2 layers
    assert tiled - untiled == pytest.approx(2 * SEQ * mlp_params)
