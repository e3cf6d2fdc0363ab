"""The accelerate reader on real-looking accelerate configs, each loaded by accelerate's own
`load_config_from_file` (accelerate/commands/config/config_args.py)."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from memdoc.core.model.stack import Stack
from memdoc.core.user_config.accelerate import read_accelerate
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
