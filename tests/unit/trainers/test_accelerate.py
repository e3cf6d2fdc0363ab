"""The accelerate reader on real-looking accelerate configs, each loaded by accelerate's own
`load_config_from_file` (accelerate/commands/config/config_args.py)."""

from __future__ import annotations

import pytest
import yaml
from conftest import FIXTURES

from memdoc.core.model.stack import Stack
from memdoc.core.trainers.accelerate.read import read_accelerate
from memdoc.errors import ConfigError
from memdoc.resolve.user_config import load_source, read_user_configs

ACC = FIXTURES / "user_configs" / "accelerate"


@pytest.mark.parametrize("name", sorted(p.name for p in ACC.glob("*.yaml")))
def test_read_as_accelerate_loads_it(name):
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(str(ACC / name))
    reading = read_accelerate(load_source(ACC / name), Stack())
    assert reading.plan["nodes"] == config.num_machines
    assert reading.plan["gpus_per_node"] * config.num_machines == config.num_processes
    kind = config.distributed_type.value
    if kind == "FSDP":
        strategy = config.fsdp_config["fsdp_sharding_strategy"]
        assert reading.plan["shard"] == {"FULL_SHARD": "fsdp", "SHARD_GRAD_OP": "zero2"}[strategy]
        assert (reading.plan.get("offload") == "optimizer+params") is config.fsdp_config["fsdp_offload_params"]
    elif kind == "DEEPSPEED" and "deepspeed_config_file" not in config.deepspeed_config:
        plugin = config.deepspeed_config
        assert reading.plan["shard"] == f"zero{plugin['zero_stage']}"
        assert reading.plan["offload_to"] == plugin["offload_optimizer_device"]
        assert reading.plan["grad_accum"] == plugin["gradient_accumulation_steps"]
    elif kind == "MULTI_GPU":
        assert "shard" not in reading.plan


def test_deepspeed_config_file_is_followed_relative_to_the_yaml():
    reading = read_user_configs([ACC / "deepspeed_file.yaml"], Stack())
    assert reading.formats == ["accelerate", "deepspeed"]
    assert reading.plan["shard"] == "zero3" and reading.plan["offload_to"] == "nvme"
    assert reading.plan["gpus_per_node"] == 8


@pytest.mark.parametrize(
    "text,message",
    [
        (
            "distributed_type: FSDP\nnum_machines: 2\nnum_processes: 3\n",
            "acc.yaml:3: num_processes: 3 processes do not split evenly over 2 machines",
        ),
        (
            "distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: HALF_SHARD\n",
            "acc.yaml:2: fsdp_config.fsdp_sharding_strategy: 'HALF_SHARD' is not one of",
        ),
        (
            "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 5\n",
            "acc.yaml:2: deepspeed_config.zero_stage: must be 0, 1, 2 or 3",
        ),
        ("distributed_type: SPACESHIP\n", "acc.yaml:1: distributed_type: 'SPACESHIP' is not one of"),
    ],
)
def test_bad_values_name_file_line_and_key(tmp_path, text, message):
    path = tmp_path / "acc.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        read_accelerate(load_source(path), Stack())
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("state_dict_type", "gathers"), [("FULL_STATE_DICT", True), ("SHARDED_STATE_DICT", False), (None, False)]
)
def test_fsdp_state_dict_type_says_whether_the_save_gathers(tmp_path, state_dict_type, gathers):
    """`fsdp_state_dict_type` FULL_STATE_DICT gathers the model on rank 0 at save; SHARDED does not (memdoc's
    emitted default); `fsdp_cpu_ram_efficient_loading: false` loads on every rank."""
    from memdoc.core.billing.run_phases import save_gathers
    from memdoc.core.model.plan import parse_plan

    fsdp = {"fsdp_version": 2, "fsdp_cpu_ram_efficient_loading": False}
    if state_dict_type:
        fsdp["fsdp_state_dict_type"] = state_dict_type
    path = tmp_path / "accelerate.yaml"
    path.write_text(yaml.safe_dump({"distributed_type": "FSDP", "num_processes": 2, "fsdp_config": fsdp}))
    reading = read_accelerate(load_source(path), Stack())
    assert reading.plan["low_mem_load"] is False
    plan = parse_plan(shard=reading.plan["shard"], gpus=2, save_gather=reading.plan.get("save_gather"))
    assert save_gathers(plan) is gathers


def test_fsdp1_without_a_state_dict_type_saves_the_full_model(tmp_path):
    """accelerate's FSDP1 default is FULL_STATE_DICT (`FullyShardedDataParallelPlugin.set_state_dict_type`)."""
    from accelerate.utils import FullyShardedDataParallelPlugin

    from memdoc.core.billing.run_phases import save_gathers
    from memdoc.core.model.plan import parse_plan

    assert FullyShardedDataParallelPlugin(fsdp_version=1).state_dict_type.name == "FULL_STATE_DICT"
    path = tmp_path / "accelerate.yaml"
    path.write_text(yaml.safe_dump({"distributed_type": "FSDP", "num_processes": 2, "fsdp_config": {}}))
    reading = read_accelerate(load_source(path), Stack())
    assert save_gathers(parse_plan(shard=reading.plan["shard"], gpus=2, save_gather=reading.plan["save_gather"]))


@pytest.mark.parametrize(("version", "shard"), [(1, "fsdp"), (2, "fsdp2")])
def test_fsdp_version_names_the_engine(tmp_path, version, shard):
    """accelerate's `fsdp_version: 2` runs `fully_shard` (`utils/fsdp_utils.py` `fsdp2_prepare_model`): the plan's
    shard is fsdp2, whose rules the bill applies (it was read as fsdp)."""
    path = tmp_path / "accelerate.yaml"
    config = {"distributed_type": "FSDP", "num_processes": 2, "fsdp_config": {"fsdp_version": version}}
    path.write_text(yaml.safe_dump(config))
    assert read_accelerate(load_source(path), Stack()).plan["shard"] == shard
