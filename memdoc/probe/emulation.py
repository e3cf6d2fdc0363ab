"""Memory-exact stand-ins for what bitsandbytes does on CUDA (it cannot run on fake CPU tensors).

Only sizes, dtypes and lifetimes matter to the tracer; the numbers computed are meaningless.

QLoRA (`NF4Linear`, replaces every `nn.Linear` of the decoder, not `lm_head`, as
`BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True)`
does), per weight of n = out × in elements:

- packed NF4 weight: uint8, ceil(n / 2) bytes (bnb `Params4bit`, shape (n/2, 1));
- block-wise absmax, block 64, double-quantised to uint8: ceil(n / 64) bytes;
- second-level absmax (fp32, block 256 over the first-level absmax): 4 · ceil(n / 64 / 256) bytes,
  plus the 256-entry fp32 code of the nested quantiser and the fp32 offset; the 16-entry NF4 code;
- compute (bnb `MatMul4Bit`): forward dequantises the absmax to a temporary fp32 vector, then the
  whole weight to a temporary compute-dtype (out, in) matrix, runs `F.linear` and frees it; saves no
  activation (the base weight gets no gradient); backward dequantises again for grad_input.
- bnb `Linear4bit.forward` casts its input to the compute dtype and its output back to the
  input's dtype (`bnb.matmul_4bit(x.to(compute_dtype), …).to(inp_dtype)`), bias cast to the compute
  dtype for the matmul: with fp32 inputs (`prepare_model_for_kbit_training`'s upcast, `kbit_upcast`)
  the 16-bit copy of the input and the 16-bit output are transient and the output is fp32;
- embeddings, norms and `lm_head` stay in the compute dtype, unless the plan's `kbit_upcast` has
  `upcast_non_quantised` cast them (and every other 16-bit parameter that is not a packed NF4
  weight) to fp32, as peft's `prepare_model_for_kbit_training` does.

8-bit AdamW (`Adam8bitStates`, bitsandbytes `AdamW8bit` / `PagedAdamW8bit`, block-wise): for a
parameter with at least 4096 elements two uint8 states of the parameter's shape plus two fp32
absmax vectors of ceil(n / 256); smaller parameters keep two fp32 states. The fused CUDA kernel
updates in place: no step temporaries. Paged states live in CUDA unified memory; they count here as
resident (what they occupy until the driver pages them out under pressure).

Lion (`Lion`): one momentum state in the parameter dtype; the step builds one parameter-sized
update temporary at a time (lion-pytorch's reference loop).
"""

from __future__ import annotations

import math
import types

import torch
from torch import nn

NF4_BLOCK = 64
NF4_NESTED_BLOCK = 256
ADAM8_BLOCK = 256
ADAM8_MIN_SIZE = 4096


def nf4_storage_bytes(n: int) -> int:
    """Bytes bnb keeps for one NF4 double-quantised weight of n elements (see module docstring)."""
    blocks = math.ceil(n / NF4_BLOCK)
    return math.ceil(n / 2) + blocks + 4 * math.ceil(blocks / NF4_NESTED_BLOCK) + 4 * 256 + 4 + 4 * 16


class _Dequant4bitLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, module):  # type: ignore[override]
        ctx.module = module
        weight = module.dequantize(x.dtype)
        bias = None if module.bias is None else module.bias.to(x.dtype)
        out = torch.nn.functional.linear(x, weight, bias)
        del weight
        return out

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        weight = ctx.module.dequantize(grad_out.dtype)
        grad_in = torch.matmul(grad_out, weight)
        del weight
        return grad_in, None


class NF4Linear(nn.Module):
    """A frozen linear layer stored as NF4 with double quantisation (memory emulation)."""

    def __init__(self, linear: nn.Linear, compute_dtype: torch.dtype) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.compute_dtype = compute_dtype
        device = linear.weight.device
        n = self.in_features * self.out_features
        blocks = math.ceil(n / NF4_BLOCK)
        self.weight = nn.Parameter(
            torch.empty((math.ceil(n / 2), 1), dtype=torch.uint8, device=device), requires_grad=False
        )
        self.register_buffer("absmax", torch.empty(blocks, dtype=torch.uint8, device=device))
        self.register_buffer(
            "absmax2", torch.empty(math.ceil(blocks / NF4_NESTED_BLOCK), dtype=torch.float32, device=device)
        )
        self.register_buffer("code2", torch.empty(256, dtype=torch.float32, device=device))
        self.register_buffer("offset", torch.empty((), dtype=torch.float32, device=device))
        self.register_buffer("code", torch.empty(16, dtype=torch.float32, device=device))
        if linear.bias is not None:
            self.bias = nn.Parameter(linear.bias.detach().to(compute_dtype), requires_grad=False)
        else:
            self.bias = None

    def dequantize(self, dtype: torch.dtype) -> torch.Tensor:
        absmax = torch.empty(self.absmax.shape, dtype=torch.float32, device=self.absmax.device)
        weight = torch.empty((self.out_features, self.in_features), dtype=dtype, device=self.weight.device)
        del absmax
        return weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inp_dtype = x.dtype
        if x.dtype != self.compute_dtype:
            x = x.to(self.compute_dtype)
        return _Dequant4bitLinear.apply(x, self).to(inp_dtype)


def quantize_linears_nf4(model: nn.Module, compute_dtype: torch.dtype, *, skip: tuple[str, ...] = ("lm_head",)) -> int:
    """Replace every plain `nn.Linear` (including a peft LoRA layer's base layer) by `NF4Linear`; a
    LoRA layer over it then runs peft's 4-bit forward (`bnb4_lora_forward`), as peft dispatches
    `lora.bnb.Linear4bit` for a bitsandbytes base."""
    count = 0
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if type(child) is nn.Linear and child_name not in skip and not _is_adapter(name, child_name):
                setattr(module, child_name, NF4Linear(child, compute_dtype))
                if child_name == "base_layer" and hasattr(module, "lora_A"):
                    module.forward = types.MethodType(bnb4_lora_forward, module)
                count += 1
    return count


def bnb4_lora_forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    """peft `lora.bnb.Linear4bit.forward` (src/peft/tuners/lora/bnb.py), vanilla LoRA path.

    Unlike the generic `lora.Linear`, which always casts x to the adapters' (fp32) dtype, it casts
    only without autocast (`requires_conversion = not torch.is_autocast_enabled()`); under autocast a
    16-bit x goes to `lora_A` as is, so the adapters reading one tensor save it once. It clones the
    base output ("defensively", for 4-bit). `torch.is_autocast_enabled()` reads CUDA's autocast; the
    trace runs CPU autocast for it, so both are read here.
    """
    result = self.base_layer(x, *args, **kwargs).clone()
    autocast = torch.is_autocast_enabled() or torch.is_autocast_enabled("cpu")
    for active in self.active_adapters:
        if active not in self.lora_A.keys():
            continue
        lora_A, lora_B = self.lora_A[active], self.lora_B[active]
        if not autocast:
            expected_dtype = result.dtype
            x = self._cast_input_dtype(x, lora_A.weight.dtype)
        output = lora_B(lora_A(self.lora_dropout[active](x))) * self.scaling[active]
        if not autocast:
            output = output.to(expected_dtype)
        result = result + output
    return result


def upcast_non_quantised(model: nn.Module) -> int:
    """peft `prepare_model_for_kbit_training` (src/peft/utils/other.py): every fp16/bf16 parameter that
    is not a packed 4-bit weight (`Params4bit`; here `NF4Linear.weight`, uint8) becomes fp32 —
    `if ((dtype == float16) or (dtype == bfloat16)) and class name != "Params4bit"`. Returns the
    number of parameters cast. LoRA adapters are fp32 already (peft's `autocast_adapter_dtype`)."""
    count = 0
    for param in model.parameters():
        if param.dtype in (torch.float16, torch.bfloat16):
            param.data = param.data.to(torch.float32)
            count += param.numel()
    return count


def _is_adapter(parent: str, child: str) -> bool:
    return any(part.startswith("lora_") for part in (parent + "." + child).split("."))


class Adam8bitStates(torch.optim.Optimizer):
    """bitsandbytes AdamW8bit / PagedAdamW8bit state layout (memory emulation, no real update)."""

    def __init__(self, params, lr: float = 1e-4) -> None:
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    n = p.numel()
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    if n >= ADAM8_MIN_SIZE:
                        blocks = math.ceil(n / ADAM8_BLOCK)
                        state["state1"] = torch.zeros_like(p, dtype=torch.uint8)
                        state["state2"] = torch.zeros_like(p, dtype=torch.uint8)
                        state["absmax1"] = torch.zeros(blocks, dtype=torch.float32, device=p.device)
                        state["absmax2"] = torch.zeros(blocks, dtype=torch.float32, device=p.device)
                    else:
                        state["state1"] = torch.zeros_like(p, dtype=torch.float32)
                        state["state2"] = torch.zeros_like(p, dtype=torch.float32)
                state["step"].add_(1)
        return None


def adam8bit_state_bytes(numel: int) -> int:
    """Bytes of bitsandbytes 8-bit Adam state for one parameter of `numel` elements (plus its step)."""
    if numel >= ADAM8_MIN_SIZE:
        return 2 * numel + 2 * 4 * math.ceil(numel / ADAM8_BLOCK) + 4
    return 2 * 4 * numel + 4


class Lion(torch.optim.Optimizer):
    """Lion (Chen et al. 2023), lion-pytorch's reference per-parameter loop."""

    def __init__(self, params, lr: float = 1e-4, betas=(0.9, 0.99), weight_decay: float = 0.0) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                exp_avg = state["exp_avg"]
                p.mul_(1 - group["lr"] * group["weight_decay"])
                update = exp_avg.clone().mul_(beta1).add_(p.grad, alpha=1 - beta1).sign_()
                p.add_(update, alpha=-group["lr"])
                del update
                exp_avg.mul_(beta2).add_(p.grad, alpha=1 - beta2)
        return None


__all__ = [
    "Adam8bitStates",
    "Lion",
    "NF4Linear",
    "adam8bit_state_bytes",
    "nf4_storage_bytes",
    "bnb4_lora_forward",
    "quantize_linears_nf4",
    "upcast_non_quantised",
]
