"""Merged-weight forms of peft LoRA layers, for speed on small models.

peft's LoRA linear layer computes ``base(x) + scale * B(A(x))``: two thin matmuls and several
passes over an output-sized tensor on top of the base layer, forward and backward. On small
hidden sizes those passes, not the base matmul, set the cost. Two ways around them, each exact
up to float rounding:

- **Training** (:func:`use_merged_forward`, ``model.lora.merged_forward``): each adapted linear
  layer computes ``x @ (W0 + scale * B @ A)^T``. Autograd then forms the full weight gradient
  once and hands ``A`` and ``B`` their small shares of it. Only the adapters train, as before.
  This costs a weight-sized temporary and the weight-gradient matmul per layer, which full
  fine-tuning pays anyway; on a large model on a GPU the adapter path is cheaper, so it is an
  option. Measured: a GRPO update of 128 sequences on a d128 x 4-layer Qwen2 on one CPU thread,
  1.66 s through the adapters, 1.13 s merged, 1.15 s full fine-tuning.
- **Sampling** (:func:`lora_base_weights`, :func:`merge_lora`, :func:`bare_lora_layers`): the
  rollout merges the adapters into its copy of the base weights at each sync and generates
  through the plain base layers, at the plain model's speed.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from rlinf_core.errors import ConfigError, RlinfError

__all__ = ["add_adapters", "bare_lora_layers", "lora_base_weights", "merge_lora", "use_merged_forward"]


def add_adapters(model: Any, lora: Any, *, task_type: str | None = None, where: str = "the model") -> Any:
    """``model`` wrapped in peft LoRA adapters from a ``model.lora`` section (a
    :class:`~rlinf_algos.config.LoraConfig` or its dict: ``rank``, ``alpha``, ``dropout``,
    ``target_modules``, ``merged_forward``), with the merged-weight forward when asked. A module
    list peft cannot apply is a :class:`ConfigError` at ``model.lora.target_modules``."""
    from peft import LoraConfig, get_peft_model

    get = lora.get if isinstance(lora, dict) else lambda k, d=None: getattr(lora, k, d)
    cfg = LoraConfig(
        r=int(get("rank")),
        lora_alpha=float(get("alpha")),
        lora_dropout=float(get("dropout", 0.0)),
        target_modules=get("target_modules"),
        task_type=task_type,
    )
    try:
        model = get_peft_model(model, cfg)
    except ValueError as err:
        raise ConfigError(f"LoRA cannot be applied to {where}: {err}", "model.lora.target_modules") from None
    if get("merged_forward", False):
        use_merged_forward(model)
    return model


def _lora_layers(model: Any) -> list[tuple[str, Any]]:
    from peft.tuners.lora import LoraLayer

    return [(name, m) for name, m in model.named_modules() if isinstance(m, LoraLayer)]


def _merged_linear_forward(self: Any, x: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    """A peft ``lora.Linear``'s forward as one linear on ``W0 + scale * B @ A`` (bound to the
    layer by :func:`use_merged_forward`). With the adapters disabled (the reference policy) or
    already merged it is the base layer, as peft's own forward."""
    base = self.base_layer
    active = [a for a in self.active_adapters if a in self.lora_A]
    if self.disable_adapters or self.merged or not active:
        return base(x, *args, **kwargs)
    a = active[0]
    lora_a, lora_b = self.lora_A[a].weight, self.lora_B[a].weight
    weight = torch.addmm(base.weight.to(lora_a.dtype), lora_b, lora_a, alpha=self.scaling[a])
    bias = None if base.bias is None else base.bias.to(lora_a.dtype)
    return F.linear(x.to(lora_a.dtype), weight, bias).to(x.dtype)


def use_merged_forward(model: Any) -> int:
    """Give each of ``model``'s peft LoRA linear layers the merged-weight forward (see the module
    docstring); returns how many. Layers it does not fit keep peft's forward: more than one
    active adapter, a variant (DoRA), ``fan_in_fan_out`` weights, or adapter dropout (which acts
    on the adapter's input, which a merged weight never sees; refused earlier, at
    ``model.lora.merged_forward``)."""
    from peft.tuners.lora import Linear

    n = 0
    for _, m in _lora_layers(model):
        if (
            type(m) is not Linear
            or len(m.lora_A) != 1
            or m.lora_variant
            or m.fan_in_fan_out
            or not isinstance(m.base_layer, torch.nn.Linear)
            or not all(isinstance(d, torch.nn.Identity) for d in m.lora_dropout.values())
        ):
            continue
        m.forward = types.MethodType(_merged_linear_forward, m)
        n += 1
    return n


def lora_base_weights(model: Any) -> dict[str, Tensor] | None:
    """Copies of the base weights under ``model``'s LoRA layers, by module name, on the CPU
    (``None`` when it has none): what :func:`merge_lora` merges onto."""
    layers = _lora_layers(model)
    if not layers:
        return None
    return {name: m.get_base_layer().weight.detach().to("cpu", copy=True) for name, m in layers}


def merge_lora(model: Any, base: dict[str, Tensor]) -> None:
    """Merge ``model``'s current adapters into its base weights, starting from ``base`` (from
    :func:`lora_base_weights`) rather than from the previous merge, so that repeated merges do
    not accumulate rounding. Its forward then runs the base layers alone."""
    layers = _lora_layers(model)
    if any(m.merged for _, m in layers):
        model.unmerge_adapter()
    with torch.no_grad():
        for name, m in layers:
            m.get_base_layer().weight.copy_(base[name])
    model.merge_adapter()


@contextlib.contextmanager
def bare_lora_layers(model: Any) -> Iterator[Any]:
    """``model`` with each LoRA wrapper swapped for its base layer in the module tree, and put
    back on exit. After :func:`merge_lora` the base layers hold the merged weights; calling them
    directly skips the wrappers' per-call bookkeeping (a quarter of generation's time on a d128
    model on the CPU)."""
    swaps = []
    for name, m in _lora_layers(model):
        parent, _, attr = name.rpartition(".")
        swaps.append((model.get_submodule(parent), attr, m))
    if any(not m.merged for _, _, m in swaps):
        raise RlinfError("bare_lora_layers: the adapters are not merged into the base layers")
    for parent, attr, m in swaps:
        setattr(parent, attr, m.get_base_layer())
    try:
        yield model
    finally:
        for parent, attr, m in swaps:
            setattr(parent, attr, m)
