"""The vision plan flags through the CLI: one-line errors, the ignored-flag note, --json."""

import json

from conftest import invoke as run


def test_images_for_a_text_model_is_one_line_exit_2():
    result = run("bill", "meta-llama/Llama-2-7b", "--gpu", "24", "--images-per-sample", "1")
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "is a text model (llama); it takes no images" in lines[0]


def test_bad_image_size_is_one_line_exit_2():
    result = run("bill", "meta-llama/Llama-2-7b", "--gpu", "24", "--image-size", "big")
    assert result.exit_code == 2 and "--image-size must be WIDTHxHEIGHT" in result.output


def test_json_carries_the_vision_fields():
    result = run("bill", "meta-llama/Llama-2-7b", "--gpu", "24", "--json")
    plan = json.loads(result.stdout)["plan"]
    assert (plan["images_per_sample"], plan["image_size"], plan["video_frames"]) == (0, "1024x1024", 0)
