"""`memdoc plan --gpu A --gpu B --tokens N --price …`: the hardware table, its JSON, one --gpu as before, errors."""

import json

import pytest
from conftest import invoke

MODEL = "meta-llama/Llama-3.1-8B"
HOST = ["--host-ram", "256"]
"""A fixed host-RAM limit, so that offloaded plans do not depend on the RAM of the machine running the tests. 256
GiB: full fine-tuning of 8B parameters with the optimizer offloaded holds DeepSpeed's 18 bytes per parameter on
the host (134.6 GiB, issue 28), which 64 GiB no longer covered."""
CARDS = ["--gpu", "rtx-4090", "--gpu", "a100-80", "--gpu", "2xa100-80", "--method", "full", *HOST]
PRICES = ["--price", "rtx-4090=0.40", "--price", "a100-80=1.20"]
"""a100-80=1.20 prices both A100 options: a price is per GPU-hour of the card."""


def plan_json(*args):
    result = invoke("plan", MODEL, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_json_rows_follow_the_formula_and_the_single_card_search():
    data = plan_json(*CARDS, "--tokens", "1e8", *PRICES)
    assert data["tokens"] == 1e8
    rows = data["hardware"]
    # issue 27 (one JSON shape per concept): a row's `gpu` is the GPU object every command prints, no longer the id
    assert [(r["option"], r["gpu"]["id"], r["gpu"]["count"], r["fits"]) for r in rows] == [
        ("rtx-4090", "rtx-4090", 1, True),
        ("a100-80", "a100-80", 1, True),
        ("2xa100-80", "a100-80", 2, True),
    ]
    for r, gpu in zip(rows, ("rtx-4090", "a100-80", "2xa100-80")):
        p = r["plan"]
        assert r["tokens_per_step"] == p["micro_batch"] * p["grad_accum"] * p["seq_len"] * r["count"]
        assert r["hours"] == pytest.approx(1e8 / r["tokens_per_step"] * r["step_seconds"] / 3600, rel=1e-3)
        price = 0.40 if gpu == "rtx-4090" else 1.20
        assert r["cost"] == pytest.approx(r["hours"] * r["count"] * price, abs=0.01)
        # the row's plan is the first plan of `memdoc plan --gpu CARD` with the same flags
        alone = plan_json("--gpu", gpu, "--method", "full", *HOST)
        assert p == alone["plans"][0]["plan"]
        assert r["step_seconds"] == alone["plans"][0]["time"]["step_seconds"]
        assert r["time"] == alone["plans"][0]["time"] and r["count"] == r["gpu"]["count"]
    cheapest = min(rows, key=lambda r: r["cost"])
    assert data["recommended"] == cheapest
    assert data["why"].startswith(f"cheapest for 100M tokens: ${cheapest['cost']:,.2f} in ")


def test_without_prices_the_fastest_is_recommended_and_cost_is_null():
    data = plan_json(*CARDS, "--tokens", "1e8")
    assert all(r["cost"] is None for r in data["hardware"])
    assert data["recommended"] == min(data["hardware"], key=lambda r: r["hours"])
    assert data["why"].startswith("fastest for 100M tokens: ")


def test_heavy_offload_row_is_noted_against_the_fastest_card_without_offload():
    rows = plan_json(*CARDS, "--tokens", "1e8")["hardware"]
    rtx = rows[0]
    assert rtx["plan"]["offload"] != "none" and rtx["heavy_offload"]  # full 8B training on 24 GiB
    clean = min((r for r in rows if r["plan"]["offload"] == "none"), key=lambda r: r["hours"])
    assert rtx["note"] == f"heavy offload: {rtx['hours'] / clean['hours']:.1f}× slower than {clean['option']}"


def test_table():
    result = invoke("plan", MODEL, *CARDS, "--tokens", "1e8", *PRICES)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "the hardware choice for 100M tokens" in out
    for header in ("hardware", "GPUs", "step", "100M tokens", "cost"):
        assert header in out
    for option in ("rtx-4090", "a100-80", "2xa100-80"):
        assert f"│ {option} " in out
    assert "rtx-4090: heavy offload: " in out
    assert "recommended: " in out and "cheapest for 100M tokens" in out
    assert "hours = tokens / (tokens per step) × step time" in out


def test_one_gpu_keeps_the_plan_output():
    data = plan_json("--gpu", "rtx-4090")
    assert "hardware" not in data and set(data) >= {"plans", "given", "gpu", "fixed"}
    out = invoke("plan", MODEL, "--gpu", "rtx-4090").stdout
    assert "fastest plans that fit" in out and "hardware choice" not in out


def test_tokens_alone_gives_one_row():
    data = plan_json("--gpu", "a100-80", "--tokens", "5e7")
    assert len(data["hardware"]) == 1 and data["recommended"]["option"] == "a100-80"
    assert data["why"].endswith("; the only option that fits")


def test_nothing_fits_exits_3():
    result = invoke(
        "plan", "meta-llama/Llama-3.1-70B", "--gpu", "24", "--gpu", "16", "--method", "full", "--offload", "none"
    )
    assert result.exit_code == 3
    assert "no option fits" in result.stdout


@pytest.mark.parametrize(
    "args,message",
    [
        (["--price", "rtx-4090"], "Error: --price 'rtx-4090': expected NAME=USD, a --gpu and its price per GPU-hour"),
        (["--price", "rtx-4090=cheap"], "Error: --price 'rtx-4090=cheap': expected NAME=USD"),
        (["--price", "rtx-4090=1", "--price", "h200=3"], "Error: --price h200=3: no --gpu h200 was given"),
        (["--price", "rtx-4090=1"], "Error: no --price for a100-80: price every --gpu, or none"),
        (["--tokens", "0.5"], "Invalid value for '--tokens'"),
        (["--emit", "trl"], "Error: --emit writes one plan: give one --gpu"),
        (["--global-batch", "3", "--gpus", "2"], "must be a positive multiple of the 2 GPUs"),
    ],
)
def test_errors_are_one_line(args, message):
    result = invoke("plan", MODEL, "--gpu", "rtx-4090", "--gpu", "a100-80", *args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert "Traceback" not in result.output and len(result.stderr.strip().splitlines()) == 1


def test_config_files_are_read_once_for_every_card(monkeypatch):
    """Each --gpu resolves its own setup, but the --config files (and the file they reference) are read once."""
    from conftest import FIXTURES

    import memdoc.resolve.user_config as user_config

    read = []
    load_source = user_config.load_source
    monkeypatch.setattr(user_config, "load_source", lambda path: read.append(str(path)) or load_source(path))
    config = FIXTURES / "user_configs" / "trl" / "llama_qlora_zero2.yaml"
    result = invoke("plan", "--config", config, "--gpu", "rtx-4090", "--gpu", "a100-80", "--gpus", "2", *HOST)
    assert result.exit_code == 0, result.output
    assert read == [str(config), str(config.parent / "zero2.json")]
