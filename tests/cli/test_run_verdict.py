"""One verdict for the whole run (issue 35): a part of the run other than the step, or the host RAM, over its limit
turns the verdict and makes `--check` exit 3; the step alone over the card does too, as before."""

import json

from conftest import invoke

LORA = ("meta-llama/Llama-3.1-8B", "--gpu", "a100-80", "--method", "lora", "--checkpointing", "full")
VOCAB, SEQ, EVAL_BATCH = 128_256, 2048, 8


def _bill(*args):
    result = invoke("bill", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_evaluation_over_the_card_turns_the_verdict_and_check_exits_3():
    data = _bill(*LORA, "--eval-samples", "1000", "--eval-keeps-logits")
    verdict = data["run_verdict"]
    # Trainer's evaluation loop keeps every batch's logits on the GPU until the end (no eval_accumulation_steps):
    # 1000 rows of seq × vocab, in bf16, is far over 80 GB on its own
    kept = 1000 * SEQ * VOCAB * 2
    assert verdict["gpu_part"] == "eval" and verdict["gpu_min_memory_bytes"] >= kept > data["gpu"]["memory_bytes"]
    assert data["fits"] is False and verdict["fit"] == "does not fit" and verdict["decided_by"] == "eval"
    assert data["verdict"]["fit"] == "comfortable"  # the step alone fits
    assert invoke("bill", *LORA, "--eval-samples", "1000", "--eval-keeps-logits", "--check").exit_code == 3
    text = invoke("bill", *LORA, "--eval-samples", "1000", "--eval-keeps-logits").stdout
    assert "✘ the whole run does not fit: eval needs" in text


def test_evaluation_that_moves_its_logits_to_the_host_fits():
    data = _bill(*LORA, "--eval-samples", "1000", "--eval-keeps-logits", "--eval-accumulation-steps", "1")
    assert data["fits"] is True and data["run_verdict"]["fit"] == "comfortable"
    assert invoke("bill", *LORA, "--eval-samples", "1000", "--check").exit_code == 0


def test_host_ram_over_the_given_limit_turns_the_verdict():
    offload = (
        "meta-llama/Llama-3.1-8B",
        "--gpu",
        "h100-sxm",
        "--gpus",
        "8",
        "--shard",
        "zero3",
        "--offload",
        "optimizer",
    )
    tight, ample = _bill(*offload, "--host-ram", "16"), _bill(*offload, "--host-ram", "1024")
    # ZeRO-Offload holds fp32 master weights and two fp32 Adam moments of all 8.03B parameters on the node's host:
    # 12 bytes each at least, whichever rank holds its shard
    assert tight["run_verdict"]["host_bytes_per_node"] >= 12 * 8.03e9 > 16 * 1024**3
    assert tight["fits"] is False and tight["run_verdict"]["decided_by"] == "host"
    assert ample["fits"] is True and ample["run_verdict"]["host_fits"] is True
    assert invoke("bill", *offload, "--host-ram", "16", "--check").exit_code == 3
    assert invoke("bill", *offload, "--host-ram", "1024", "--check").exit_code == 0


def test_without_host_ram_the_host_is_not_judged_for_gpus_elsewhere():
    data = _bill(
        "meta-llama/Llama-3.1-8B", "--gpu", "h100-sxm", "--gpus", "8", "--shard", "zero3", "--offload", "optimizer"
    )
    assert data["run_verdict"]["host_limit_bytes"] is None and data["run_verdict"]["host_fits"] is None
    assert data["run_verdict"]["host_source"].startswith("not judged")


def test_the_step_over_the_card_still_decides():
    data = _bill("meta-llama/Llama-3.1-8B", "--gpu", "rtx-4090", "--method", "full")
    assert data["fits"] is False and data["run_verdict"]["decided_by"] in ("step", "load")
