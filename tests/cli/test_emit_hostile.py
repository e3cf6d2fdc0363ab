"""Issue 27, silent damage in emitted files: hostile fill-in values (a 300-character dataset path with spaces, `#`,
quotes, colons, unicode; YAML's own words; line breaks) parse back, with `yaml.safe_load` / `json.loads` and with
TRL's own parser, to exactly the value given; the `# Launch:` and `# Made by memdoc:` lines split back
(`shlex.split`) to the argv; values a trainer cannot take are one-line errors naming the flag.

Before the fix (main at 0929787) the long path was folded at 120 columns with its `# …` comment inside the value
(`yaml.safe_load` raised "expected <block end>"), the launch line was `trl sft --config my dir/s f.yaml`, and
`--dataset ''` silently became CHANGE_ME_dataset."""

import json
import shlex

import pytest
import yaml
from conftest import invoke

from memdoc.core.billing.bill import compute_bill
from memdoc.core.model.plan import parse_plan
from memdoc.core.trainers.emit import EmitContext, emit, render_main, render_side
from memdoc.resolve.models import resolve_model

LONG_PATH = "/data/my set: v2/" + "x" * 250 + " #not a comment 'single' \"double\" ü 中文 🚀: end"
HOSTILE = [
    LONG_PATH,
    "null",
    "true",
    "1e-5",
    "0o17",
    "2024-01-01",
    "~",
    "- item",
    "? key",
    "&anchor *alias !tag",
    "{a: b}, [1]",
    "@at `tick` %pct | > ",
    "  leading and trailing  ",
    "C:\\Users\\me\\data set",
    "$HOME/$(rm -rf x)/`id`;&&|",
]
"""Values a YAML writer must quote or escape; the last two also need shell quoting."""
BREAKS = ["line\nbreak", "nul\0byte", "tab\tchar", "nel\x85next", "ls\u2028sep", "ps\u2029sep", "bad\udcffbyte"]
"""What a config value may not carry raw: the library still writes a file that parses; the CLI refuses them."""
PLANS = {
    "1 GPU": {},
    "FSDP": {"gpus_per_node": 2, "shard": "fsdp"},
    "ZeRO-3": {"gpus_per_node": 2, "shard": "zero3"},
}
FORMATS = ("trl", "hf", "axolotl", "llamafactory")


def _ctx(dataset: str | None, output_dir: str | None, config_path: str, side_dir: str = "", **plan) -> EmitContext:
    model = resolve_model("gpt2")
    p = parse_plan(seq_len=512, **plan)
    bill = compute_bill(model, p, None)
    return EmitContext(
        model_id=model.id,
        plan=p,
        peak_allocated=bill.peak_allocated,
        process_total=bill.process_total,
        command=shlex.join(["memdoc", "emit", "gpt2", "-o", config_path]),
        dataset=dataset,
        output_dir=output_dir,
        side_dir=side_dir,
        config_path=config_path,
    )


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("plan", PLANS)
def test_every_file_parses_back_to_the_dict_emitted(fmt, plan):
    for value in HOSTILE + BREAKS:
        ctx = _ctx(value, value, config_path="sft.yaml", **PLANS[plan])
        out = emit(fmt, ctx)
        assert yaml.safe_load(render_main(ctx, out)) == out.config, (fmt, value)
        for side in out.side_files:
            loads = json.loads if side.kind == "json" else yaml.safe_load
            assert loads(render_side(ctx, side)) == side.data, (fmt, side.name, value)


@pytest.mark.parametrize("fmt", FORMATS)
def test_comments_are_lines_of_their_own(fmt):
    """Each top-level scalar is whole on its key's line, with nothing after it: the line alone parses to the key
    and its value (never folded onto the next line, never followed by a comment)."""
    ctx = _ctx(LONG_PATH, LONG_PATH, config_path="sft.yaml")
    out = emit(fmt, ctx)
    lines = [line for line in render_main(ctx, out).splitlines() if not line.startswith(("#", " ", "-"))]
    scalars = {k: v for k, v in out.config.items() if not isinstance(v, (dict, list))}
    for line in lines:
        (key, value), *_ = yaml.safe_load(line).items()
        if key in scalars:
            assert value == scalars[key], line
    assert LONG_PATH in {v for k, v in scalars.items()} | {d.get("path") for d in out.config.get("datasets", [])}


def _comment(text: str, label: str) -> str:
    (line,) = [line for line in text.splitlines() if line.startswith(f"# {label}: ")]
    return line[len(f"# {label}: ") :]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("plan", PLANS)
def test_launch_line_splits_back_to_the_paths(fmt, plan, tmp_path):
    """The config's path, and the accelerate side file's path, are one argv word each (shlex.split)."""
    out_dir = str(tmp_path / "my runs; rm -rf ~ $(x)" / 'it\'s "ü"')
    config = f"{out_dir}/sft #1.yaml"
    ctx = _ctx(LONG_PATH, None, config_path=config, side_dir=out_dir, **PLANS[plan])
    out = emit(fmt, ctx)
    argv = shlex.split(out.launch)
    assert argv.count(config) == 1, out.launch
    if plan == "1 GPU":
        assert (
            argv
            == {
                "trl": ["trl", "sft", "--config", config],
                "hf": ["python", "YOUR_TRAIN_SCRIPT.py", config],
                "axolotl": ["axolotl", "train", config],
                "llamafactory": ["llamafactory-cli", "train", config],
            }[fmt]
        )
    if "--config_file" in argv:
        assert argv[argv.index("--config_file") + 1] == f"{out_dir}/fsdp.yaml"
    text = render_main(ctx, out)
    assert shlex.split(_comment(text, "Launch")) == argv
    assert shlex.split(_comment(text, "Made by memdoc")) == ["memdoc", "emit", "gpt2", "-o", config]


def test_written_file_holds_the_value_given(tmp_path):
    """Through the CLI: the dataset and output directory read back (yaml.safe_load and TRL's own parser) as given,
    and the launch and Made-by lines split back to the path written."""
    path = tmp_path / "my dir" / "s f #1.yaml"
    result = invoke("emit", "gpt2", "--seq", 512, "--dataset", LONG_PATH, "--output-dir", HOSTILE[-1], "-o", path)
    assert result.exit_code == 0, result.output
    text = path.read_text()
    cfg = yaml.safe_load(text)
    assert cfg["dataset_name"] == LONG_PATH and cfg["output_dir"] == HOSTILE[-1]
    assert shlex.split(_comment(text, "Launch")) == ["trl", "sft", "--config", str(path)]
    assert shlex.split(result.stdout.splitlines()[-1][len("Launch: ") :]) == ["trl", "sft", "--config", str(path)]
    made = shlex.split(_comment(text, "Made by memdoc"))
    assert made[:2] == ["memdoc", "emit"] and made[made.index("-o") + 1] == str(path)


@pytest.mark.slow
def test_trl_parser_reads_the_values_given(tmp_path):
    """TRL's own parser (`trl/scripts/sft.py` `make_parser`, TrlParser.parse_args_and_config, trl 1.16) reads
    the hostile dataset path and output directory back whole."""
    sft = pytest.importorskip("trl.scripts.sft")
    path = tmp_path / "sft.yaml"
    result = invoke("emit", "gpt2", "--seq", 512, "--dataset", LONG_PATH, "--output-dir", HOSTILE[-1], "-o", path)
    assert result.exit_code == 0, result.output
    text = path.read_text()
    copy = tmp_path / "cpu.yaml"
    copy.write_text(text + "use_cpu: true\n")  # bf16 raises on a CPU box
    script_args, training_args, _, _ = sft.make_parser().parse_args_and_config(["--config", str(copy)])
    assert script_args.dataset_name == LONG_PATH and training_args.output_dir == HOSTILE[-1]


@pytest.mark.parametrize("flag", ["--dataset", "--output-dir", "-o"])
@pytest.mark.parametrize("value", BREAKS)
def test_control_characters_refused_naming_the_flag(flag, value, tmp_path):
    args = ["-o", tmp_path / "ok.yaml"] if flag != "-o" else []
    result = invoke("emit", "gpt2", "--seq", 512, flag, value if flag != "-o" else f"{tmp_path}/{value}", *args)
    assert result.exit_code == 2, result.output
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert line.startswith(f"Error: {flag} contains ") and "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize("flag", ["--dataset", "--output-dir", "-o"])
@pytest.mark.parametrize("value", ["", "   "])
def test_empty_values_refused_naming_the_flag(flag, value, tmp_path):
    """Before the fix `--dataset ''` silently gave CHANGE_ME_dataset, and `-o ''` printed the config."""
    args = [flag, value] if flag == "-o" else [flag, value, "-o", tmp_path / "x.yaml"]
    result = invoke("emit", "gpt2", "--seq", 512, *args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"Error: {flag} is empty (give a value, or leave {flag} out for ")
    assert list(tmp_path.iterdir()) == []


def test_plan_emit_refuses_an_empty_output(tmp_path):
    result = invoke("plan", "gpt2", "--gpu", "80", "--seq", 512, "--emit", "trl", "-o", "")
    assert result.exit_code == 2 and "Error: -o is empty" in result.stderr, result.output
