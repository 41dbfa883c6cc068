"""The policy distribution over any supported action space (:mod:`rlinf_algos.action_spaces`).

:class:`ActionDist` is built from an action-space spec (plain data, recorded in the policy
spec): a diagonal Normal over the ``Box`` dims (a state-independent ``log_std``; samples are not
clipped, the env side clips them as for a plain ``Box``), a Categorical per ``Discrete`` /
``MultiDiscrete`` dimension, a Bernoulli per ``MultiBinary`` bit. The parts are independent
given the observation, so the log-probability and the entropy of an action are the sums over the
parts. Actions are the flat float form ``[B, A]`` throughout; a discrete dimension holds its
index (``start`` included) as a float.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor
from torch.nn import functional as F

from rlinf_algos.action_spaces import flat_dims, leaves

__all__ = ["ActionDist"]

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


class ActionDist:
    """The distribution of a policy over the flat form of ``spec``'s actions.

    The network emits ``param_dim`` numbers per observation: the Normal means of the ``Box``
    dims, then per discrete dimension its logits, per bit one logit, in the order of the flat
    form's parts. ``log_std`` ``[cont_dim]`` (the ``Box`` dims', state-independent) is passed to
    each method. ``act_dim`` is the flat action's size.
    """

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.spec = dict(spec)
        # (kind, action columns [a, b), param columns [p, q), categories) per leaf group
        self.parts: list[tuple[str, int, int, int, int, int]] = []
        a = p = c = 0
        self.cont_cols: list[int] = []
        for leaf in leaves(spec):
            kind = leaf["kind"]
            if kind == "box":
                d = int(leaf["dims"])
                self.parts.append(("normal", a, a + d, p, p + d, c))
                self.cont_cols += list(range(a, a + d))
                a, p, c = a + d, p + d, c + d
            elif kind == "discrete":
                n = int(leaf["n"])
                self.parts.append(("categorical", a, a + 1, p, p + n, int(leaf["start"])))
                a, p = a + 1, p + n
            elif kind == "multi_discrete":
                for n, s in zip(leaf["nvec"], leaf["start"], strict=True):
                    self.parts.append(("categorical", a, a + 1, p, p + int(n), int(s)))
                    a, p = a + 1, p + int(n)
            elif kind == "multi_binary":
                k = math.prod(int(d) for d in leaf["shape"])
                self.parts.append(("bernoulli", a, a + k, p, p + k, 0))
                a, p = a + k, p + k
            else:
                raise ValueError(f"unknown action space kind {kind!r}")
        self.act_dim, self.param_dim, self.cont_dim = a, p, c
        if a != flat_dims(spec):
            raise ValueError(f"inconsistent action space spec {dict(spec)}")

    def _log_std(self, log_std: Tensor, part: tuple[str, int, int, int, int, int], like: Tensor) -> Tensor:
        c0 = part[5]
        return log_std[c0 : c0 + (part[2] - part[1])].expand_as(like)

    def sample(self, params: Tensor, log_std: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """``[B, P] -> [B, A]`` actions drawn from the distribution (the noise from ``generator``)."""
        out = params.new_empty(params.shape[0], self.act_dim)
        for part in self.parts:
            kind, a, b, p, q, extra = part
            x = params[:, p:q]
            if kind == "normal":
                noise = torch.randn(x.shape, generator=generator, dtype=x.dtype, device=x.device)
                out[:, a:b] = x + noise * self._log_std(log_std, part, x).exp()
            elif kind == "categorical":
                probs = torch.softmax(x, -1)
                idx = torch.multinomial(probs, 1, generator=generator)
                out[:, a:b] = (idx + extra).to(out.dtype)
            else:
                u = torch.rand(x.shape, generator=generator, dtype=x.dtype, device=x.device)
                out[:, a:b] = (u < torch.sigmoid(x)).to(out.dtype)
        return out

    def mode(self, params: Tensor) -> Tensor:
        """``[B, P] -> [B, A]``: the Normal means, the most likely category, bits where ``p > 0.5``."""
        out = params.new_empty(params.shape[0], self.act_dim)
        for kind, a, b, p, q, extra in self.parts:
            x = params[:, p:q]
            if kind == "normal":
                out[:, a:b] = x
            elif kind == "categorical":
                out[:, a:b] = (x.argmax(-1, keepdim=True) + extra).to(out.dtype)
            else:
                out[:, a:b] = (x > 0).to(out.dtype)
        return out

    def log_prob(self, actions: Tensor, params: Tensor, log_std: Tensor) -> Tensor:
        """``actions [..., A], params [..., P] -> [...]``: the sum over the parts of each part's
        log-probability (density for the ``Box`` dims)."""
        return self.log_prob_and_entropy(actions, params, log_std, entropy=False)[0]

    def entropy(self, params: Tensor, log_std: Tensor) -> Tensor:
        """``[..., P] -> [...]``: the sum over the parts of each part's entropy (differential for
        the ``Box`` dims)."""
        return self.log_prob_and_entropy(None, params, log_std)[1]

    def log_prob_and_entropy(
        self, actions: Tensor | None, params: Tensor, log_std: Tensor, entropy: bool = True
    ) -> tuple[Tensor, Tensor]:
        """``(log_prob(actions), entropy)`` in one pass (what PPO's loss takes per minibatch): a
        categorical part's ``log_softmax`` is computed once for both. With ``actions`` ``None``
        the first is zeros; with ``entropy=False`` the second is."""
        logp: Tensor | None = None
        ent: Tensor | None = None
        for part in self.parts:
            kind, a, b, p, q, extra = part
            x = params[..., p:q]
            lp = en = None
            if kind == "normal":
                ls = self._log_std(log_std, part, x)
                if actions is not None:
                    z = (actions[..., a:b] - x) * torch.exp(-ls)
                    lp = (-0.5 * z.pow(2) - ls - _LOG_SQRT_2PI).sum(-1)
                if entropy:
                    en = (0.5 + _LOG_SQRT_2PI + ls).sum(-1)
            elif kind == "categorical":
                logits = torch.log_softmax(x, -1)
                if actions is not None:
                    idx = (actions[..., a:b].round() - extra).long().clamp(0, q - p - 1)
                    lp = logits.gather(-1, idx).squeeze(-1)
                if entropy:
                    en = -(logits.exp() * logits).sum(-1)
            else:
                log_on, log_off = F.logsigmoid(x), F.logsigmoid(-x)
                if actions is not None:
                    act = actions[..., a:b]
                    lp = (act * log_on + (1.0 - act) * log_off).sum(-1)
                if entropy:
                    prob = torch.sigmoid(x)
                    en = -(prob * log_on + (1.0 - prob) * log_off).sum(-1)
            if lp is not None:
                logp = lp if logp is None else logp + lp
            if en is not None:
                ent = en if ent is None else ent + en
        zeros = params.new_zeros(params.shape[:-1])
        return (zeros if logp is None else logp), (zeros if ent is None else ent)
