"""Optimisers tuned for small networks: fused Adam, a lean step without per-call Python, and the
fused gradient clipping every learner uses."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

__all__ = ["LeanAdam", "adam_move_bound", "clip_grad_norm", "clip_grads_", "make_adam"]


def adam_move_bound(steps: int, betas: tuple[float, float] = (0.9, 0.999)) -> float:
    """The most one parameter can move in ``steps`` Adam steps, in units of the learning rate,
    whatever the gradients (``eps`` taken as 0; weight decay none).

    Step ``t`` moves a parameter by ``lr * m_t / sqrt(v_t)`` with the bias-corrected moments
    ``m_t = sum_i a_i g_i`` and ``v_t = sum_i b_i g_i**2`` (``a_i = (1-b1) b1**(t-i) / (1-b1**t)``,
    ``b_i = (1-b2) b2**(t-i) / (1-b2**t)``). By Cauchy-Schwarz, ``|m_t| <= sqrt(sum a_i**2/b_i)
    * sqrt(v_t)``, so the move is at most ``lr * B_t`` with ``B_t = sqrt(sum_i a_i**2 / b_i)``
    (``B_1 = 1``: the first step moves every parameter with a gradient by exactly ``lr``). The
    sum of ``B_t`` over the steps bounds the total move; two runs of the same update on different
    devices can end up to twice that apart, since a gradient near 0 may round to either sign
    (a tolerance on weights after an update is ``2 * lr * adam_move_bound(steps)``)."""
    b1, b2 = betas
    total = 0.0
    for t in range(1, steps + 1):
        a = [(1 - b1) * b1 ** (t - i) / (1 - b1**t) for i in range(1, t + 1)]
        b = [(1 - b2) * b2 ** (t - i) / (1 - b2**t) for i in range(1, t + 1)]
        total += sum(x * x / y for x, y in zip(a, b, strict=True)) ** 0.5
    return total


def make_adam(params: Any, lr: float, eps: float = 1e-8) -> torch.optim.Adam:
    """Adam with the fused kernel where this torch has one for the parameters' device (one kernel
    per step instead of one per tensor); the multi-tensor one otherwise."""
    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, eps=eps, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.Adam(params, lr=lr, eps=eps)


class LeanAdam:
    """``optimizer.step()`` and ``zero_grad()`` of a fused :class:`torch.optim.Adam` without their
    per-call Python.

    :meth:`step` runs exactly what ``Adam(fused=True).step()`` runs (``_foreach_add_`` on the
    step counters, then the ``_fused_adam_`` kernel on the optimiser's own state tensors), without
    the grouping, hooks and profiler records around it, which on networks this small cost more
    than the kernel. :meth:`zero_grad` sets the gradients to ``None`` (so the next backward hands
    its fresh buffers over instead of adding them into zeroed ones). The optimiser stays the
    source of truth (``state_dict``, ``param_groups``' ``lr``): call :meth:`refresh` after loading
    its state. Whatever this cannot do directly (a non-fused optimiser, amsgrad, a parameter
    without state or gradient yet) goes through the optimiser as usual. Parameters without
    elements are left out (Adam has nothing to do on them; ``ActorCritic``'s ``log_std`` over a
    discrete space is one, and never gets a gradient, which made every step take the slow path).
    """

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.opt = optimizer
        self.params = [p for g in optimizer.param_groups for p in g["params"]]
        self._lists: list[tuple[Any, ...]] | None = None

    def refresh(self) -> None:
        """Forget the cached state tensors (after ``load_state_dict``)."""
        self._lists = None

    def _build(self) -> None:
        lists = []
        for g in self.opt.param_groups:
            if not g.get("fused") or g.get("amsgrad") or g.get("differentiable") or g.get("capturable"):
                return
            if g.get("decoupled_weight_decay") or g.get("maximize"):
                return
            ps, m1, m2, st = [], [], [], []
            for p in g["params"]:
                # nothing to update (a discrete policy's empty log_std, never given a gradient)
                if p.numel() == 0:
                    continue
                state = self.opt.state.get(p)
                if not state or not torch.is_tensor(state.get("step")):
                    return
                ps.append(p)
                m1.append(state["exp_avg"])
                m2.append(state["exp_avg_sq"])
                st.append(state["step"])
            lists.append((g, ps, m1, m2, st))
        self._lists = lists

    def grads(self) -> list[Tensor]:
        """The gradients there are (for clipping)."""
        return [p.grad for p in self.params if p.grad is not None]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        if self._lists is None:
            self.opt.step()
            self._build()
            return
        for g, ps, m1, m2, st in self._lists:
            gs = [p.grad for p in ps]
            if any(x is None for x in gs):  # a parameter without gradient: the optimiser skips it
                self.opt.step()
                return
            beta1, beta2 = g["betas"]
            torch._foreach_add_(st, 1)
            torch._fused_adam_(
                ps,
                gs,
                m1,
                m2,
                [],
                st,
                amsgrad=False,
                lr=float(g["lr"]),
                beta1=float(beta1),
                beta2=float(beta2),
                weight_decay=float(g["weight_decay"]),
                eps=float(g["eps"]),
                maximize=False,
                grad_scale=None,
                found_inf=None,
            )


def clip_grad_norm(parameters: Iterable[Tensor], max_norm: float) -> Tensor:
    """Scale the gradients of ``parameters`` in place so their global L2 norm is at most ``max_norm``.

    Returns the norm *before* clipping (a scalar tensor; 0 when no parameter has a gradient). One
    fused pass (``torch._foreach_norm`` / ``_foreach_mul_``) instead of one call per tensor, which is
    what dominates on the small networks RL uses.
    """
    return clip_grads_([p.grad for p in parameters if p.grad is not None], max_norm)


def clip_grads_(grads: list[Tensor], max_norm: float) -> Tensor:
    """:func:`clip_grad_norm` on a list of gradient tensors (scaled in place; returns the norm
    before clipping). For a learner that keeps its gradient list between steps."""
    if not grads:
        return torch.zeros(())
    norms = torch._foreach_norm(grads)
    total = torch.linalg.vector_norm(torch.stack(norms))
    scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    torch._foreach_mul_(grads, scale)
    return total
