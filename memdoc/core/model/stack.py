"""The software stack a training run uses: the versions of the libraries whose defaults change memory.

A key absent from a user's config takes the default of the trainer version that will run it
(transformers' `optim`, TRL's loss path and lengths, transformers' MoE expert layout, …). `Stack`
holds those versions; `memdoc.resolve.stack` reads the installed ones or parses `--stack`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from memdoc.errors import PlanError


def parse_version(text: str) -> tuple[int, ...]:
    """'4.57.1' -> (4, 57, 1); pre-release and local tails ('5.0.0rc1', '2.13.0+cpu') are cut at the first
    non-digit of each part."""
    parts = []
    for piece in text.strip().split("+")[0].split("."):
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
    if not parts:
        raise PlanError(f"cannot read a version from {text!r}")
    return tuple(parts)


@dataclass(frozen=True)
class Stack:
    """Library versions (distribution name -> version text) and where they came from."""

    versions: dict[str, str] = field(default_factory=dict)
    """e.g. {"transformers": "5.24.0", "trl": "1.16.0"}; a library absent here is unknown."""
    source: str = "memdoc's latest known versions"
    """How the versions were found: 'installed', '--stack', or memdoc's latest known versions."""
    assumed: tuple[str, ...] = ()
    """With source 'installed': the libraries not installed, whose versions are memdoc's latest known."""

    def version(self, package: str) -> tuple[int, ...] | None:
        text = self.versions.get(package)
        return parse_version(text) if text else None

    def at_least(self, package: str, version: str) -> bool:
        """Is `package` known and at `version` or newer?"""
        have = self.version(package)
        return have is not None and have >= parse_version(version)

    def newer_than_known(self) -> dict[str, str]:
        """{library: its version} for each library of the stack newer than `LATEST_KNOWN`'s: memdoc bills it as
        its latest known release behaves, since what changed after that is not known."""
        return {
            name: text
            for name, text in self.versions.items()
            if name in LATEST_KNOWN and parse_version(text) > parse_version(LATEST_KNOWN[name].version)
        }

    def to_json(self) -> dict:
        return {
            "versions": dict(self.versions),
            "source": self.source,
            "assumed": list(self.assumed),
            "newer_than_known": self.newer_than_known(),
        }


@dataclass(frozen=True)
class KnownVersion:
    """One library's newest version memdoc knows, when it was released, and where that was read."""

    version: str
    released: str
    """Year and month of the release ('2026-10')."""
    source: str


LATEST_KNOWN_DATE = "2026-12-07"
"""When `LATEST_KNOWN` was last checked."""
_LOCK = "requirements/lock.txt (2026-12-07), the newest release PyPI served"
_PYPI = "PyPI's newest release (2026-12-07)"
LATEST_KNOWN: dict[str, KnownVersion] = {
    "transformers": KnownVersion("5.25.0", "2026-12", _LOCK),
    "trl": KnownVersion("1.16.0", "2026-10", _LOCK),
    "peft": KnownVersion("0.22.0", "2026-11", _LOCK),
    "accelerate": KnownVersion("1.16.0", "2026-11", _LOCK),
    "deepspeed": KnownVersion("0.19.8", "2026-10", _LOCK),
    "torch": KnownVersion("2.15.0", "2026-10", _PYPI + "; the lock has 2.13.0, the CPU wheel on the project's disk"),
    "bitsandbytes": KnownVersion("0.50.2", "2026-08", _PYPI),
    "liger-kernel": KnownVersion("0.8.5", "2026-10", _LOCK),
    "axolotl": KnownVersion(
        "0.21.0", "2026-10", _PYPI + "; the lock has 0.19.0, the validator requirements/nodeps.in pins"
    ),
    "llamafactory": KnownVersion("0.9.5", "2026-05", _LOCK),
}
"""The libraries whose defaults change memory (distribution names, as `importlib.metadata` knows them),
each at the newest version memdoc knows: the default when a library is neither installed nor given
with `--stack`. Where the lock resolves a library freely, this is the lock's version (`make drift` shows a
newer release before it lands here; tests/unit/model/test_stack.py checks the two agree)."""


def latest_known_stack() -> Stack:
    """memdoc's latest known versions of every library of `LATEST_KNOWN`."""
    return Stack(
        versions={name: known.version for name, known in LATEST_KNOWN.items()},
        source=f"memdoc's latest known versions ({LATEST_KNOWN_DATE})",
    )


def parse_stack(spec: str) -> Stack:
    """`--stack transformers==4.57,trl==0.19,torch==2.6` -> Stack(source='--stack'), only those libraries.

    Each item is `name==version`, comma-separated; the name is a library of `LATEST_KNOWN` (`_` and `-`
    are the same, as pip has it). Anything else is a one-line PlanError naming the item.
    """
    versions: dict[str, str] = {}
    for item in (part.strip() for part in spec.split(",")):
        name, sep, version = item.partition("==")
        name = name.strip().lower().replace("_", "-")
        if not item or not sep or not name or not version.strip():
            raise PlanError(f"--stack item {item!r} is not NAME==VERSION (e.g. transformers==4.57,trl==0.19)")
        if name not in LATEST_KNOWN:
            raise PlanError(f"--stack {name!r} is not a library memdoc reads; known: {', '.join(LATEST_KNOWN)}")
        if name in versions:
            raise PlanError(f"--stack names {name} twice")
        try:
            parse_version(version)
        except PlanError:
            raise PlanError(
                f"--stack {name}=={version.strip()}: cannot read a version from {version.strip()!r}"
            ) from None
        versions[name] = version.strip()
    return Stack(versions=versions, source="--stack")


class MoeExperts(str, Enum):
    """How transformers lays out the routed experts of an MoE model (what bitsandbytes can quantise)."""

    FUSED = "fused"
    """transformers ≥ 5: one 3-D parameter per projection for all experts (`gate_up_proj`, `down_proj`
    of `MixtralExperts`), not `nn.Linear`: bitsandbytes leaves them in the load dtype under QLoRA."""
    LINEAR = "linear"
    """transformers 4.x: each expert is a module of `nn.Linear`s (Mixtral's `w1`, `w2`, `w3` in
    `MixtralBlockSparseTop2MLP`), which bitsandbytes replaces like any other decoder linear: NF4 under QLoRA."""


def moe_experts_layout(stack: Stack) -> MoeExperts:
    """The expert layout of the stack's transformers: linear before 5.0, fused from 5.0 on (and when unknown).

    transformers 5.0 moved MoE models to fused expert parameters (`MixtralExperts.gate_up_proj`,
    a 3-D `nn.Parameter`, transformers/models/mixtral/modeling_mixtral.py); 4.x builds
    `nn.ModuleList` of `MixtralBlockSparseTop2MLP` with `nn.Linear` w1/w2/w3 (4.57's modeling_mixtral.py).
    """
    version = stack.version("transformers")
    return MoeExperts.LINEAR if version is not None and version < (5,) else MoeExperts.FUSED


TRL_FUSED_LM_HEAD_SINCE = "1.16.0"
"""The earliest TRL version established to compute SFT/DPO/GRPO losses through its fused LM head: 1.16.0,
installed here (`trl/trainer/sft_trainer.py` calls `add_fused_lm_head` in `__init__` and
`model(**inputs, fused_lm_head=True)` in `compute_loss`). Earlier 1.x releases moved to it gradually
(huggingface/trl #5349, AsyncGRPO's chunked LM head; #5575, SFT's opt-in `loss_type="chunked_nll"`; #7077,
GRPO on `_ChunkedLogProbFunction`); the release that made it SFT's default is not established, so older
versions are billed with transformers' own loss."""


def trl_fused_lm_head(stack: Stack) -> bool:
    """Does the stack's TRL compute the loss through its fused LM head (memdoc's `--loss trl-fused`)?
    A stack without TRL's version is taken at the newest (yes), as `LATEST_KNOWN` has it."""
    return stack.version("trl") is None or stack.at_least("trl", TRL_FUSED_LM_HEAD_SINCE)


QLORA_ZERO3_SINCE = {
    "bitsandbytes": "0.43.3",
    "accelerate": "1.0.1",
    "transformers": "4.45.0",
    "trl": "0.12.0",
    "peft": "0.13.1",
}
"""The versions from which DeepSpeed ZeRO-3 shards a 4-bit (QLoRA) model: peft's guide "Use PEFT QLoRA and
DeepSpeed with ZeRO3" (docs/source/accelerate/deepspeed.md) asks for bitsandbytes>=0.43.3,
accelerate>=1.0.1, transformers>4.44.2, trl>0.11.4 and peft>0.13.0 (the releases after those)."""


def qlora_zero3_blockers(stack: Stack) -> list[str]:
    """The stack's libraries too old for ZeRO-3 with a 4-bit base ('bitsandbytes 0.42.0 < 0.43.3'); only
    versions the stack knows (given or installed, not assumed) count."""
    known = {name: text for name, text in stack.versions.items() if name not in stack.assumed}
    return [
        f"{name} {known[name]} < {since}"
        for name, since in QLORA_ZERO3_SINCE.items()
        if name in known and not stack.at_least(name, since)
    ]
