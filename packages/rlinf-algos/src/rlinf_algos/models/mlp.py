"""Policy, value and Q networks for continuous control, kept lean for fast updates.

The networks RL uses on MuJoCo are tiny (two hidden layers of 64 or 256 units), so an update is
dominated by per-call overhead, not arithmetic. The modules here keep the number of kernel calls
down: Gaussian log-probabilities and entropies are written out instead of going through
``torch.distributions`` (which validates and allocates per call), and the twin critics are one
batched ensemble (:class:`EnsembleLinear`, one ``baddbmm`` per layer for both critics), so a
Polyak update touches a handful of tensors.

Observation normalisation (:class:`RunningNorm`) is a submodule of the policy, so the statistics
travel with the weights when they are broadcast to rollout workers and saved in checkpoints.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor, nn

__all__ = [
    "ACTIVATIONS",
    "ActorCritic",
    "EnsembleLinear",
    "GaussianActorCritic",
    "RunningNorm",
    "SquashedGaussianActor",
    "TwinQ",
    "as_tensor",
    "fold_moments",
    "gaussian_entropy",
    "gaussian_log_prob",
    "layer_init",
    "mlp",
    "seq_forward",
]

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "silu": nn.SiLU}

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def layer_init(layer: nn.Linear, std: float = math.sqrt(2.0), bias: float = 0.0) -> nn.Linear:
    """Orthogonal weights with gain ``std`` and a constant bias (the PPO implementation detail)."""
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


def _init(layer: nn.Linear, ortho: bool, std: float = math.sqrt(2.0)) -> nn.Linear:
    """:func:`layer_init` if ``ortho``, else the layer with PyTorch's default initialisation."""
    return layer_init(layer, std) if ortho else layer


def mlp(
    in_dim: int,
    hidden: Sequence[int],
    out_dim: int,
    activation: str = "tanh",
    out_std: float = 1.0,
    ortho_init: bool = True,
) -> nn.Sequential:
    """``Linear -> act`` per hidden size, then a ``Linear`` to ``out_dim`` (orthogonal init: gain
    ``sqrt(2)`` on hidden layers, ``out_std`` on the last; ``ortho_init=False`` keeps PyTorch's
    default ``nn.Linear`` initialisation everywhere)."""
    act = ACTIVATIONS[activation]
    layers: list[nn.Module] = []
    last = in_dim
    for h in hidden:
        layers += [_init(nn.Linear(last, h), ortho_init), act()]
        last = h
    layers.append(_init(nn.Linear(last, out_dim), ortho_init, std=out_std))
    return nn.Sequential(*layers)


_ACT_FNS = {nn.Tanh: torch.tanh, nn.ReLU: torch.relu, nn.ELU: nn.functional.elu, nn.SiLU: nn.functional.silu}


def seq_forward(seq: nn.Sequential, x: Tensor) -> Tensor:
    """``seq(x)`` for a :func:`mlp`, calling ``linear`` and the activation functions directly.

    Same maths as ``seq(x)``; it skips ``nn.Module.__call__`` (hook dispatch, about 10 us a
    module), which on a 64x64 network costs more than the layer. Modules other than ``Linear``
    and the activations of :data:`ACTIVATIONS` are called as usual.
    """
    for m in seq:
        t = type(m)
        if t is nn.Linear:
            x = nn.functional.linear(x, m.weight, m.bias)
        else:
            fn = _ACT_FNS.get(t)
            x = fn(x) if fn is not None else m(x)
    return x


def as_tensor(x: Tensor | np.ndarray) -> Tensor:
    """A numpy array as a tensor sharing its memory (a tensor unchanged)."""
    return x if isinstance(x, Tensor) else torch.from_numpy(np.ascontiguousarray(x))


def gaussian_log_prob(x: Tensor, mean: Tensor, log_std: Tensor) -> Tensor:
    """Log-density of a diagonal Gaussian, summed over the last axis: ``[B, A] -> [B]``."""
    z = (x - mean) * torch.exp(-log_std)
    return (-0.5 * z.pow(2) - log_std - _LOG_SQRT_2PI).sum(-1)


def gaussian_entropy(log_std: Tensor) -> Tensor:
    """Entropy of a diagonal Gaussian, summed over the last axis: ``[..., A] -> [...]``."""
    return (0.5 + _LOG_SQRT_2PI + log_std).sum(-1)


class RunningNorm(nn.Module):
    """Running mean/variance of observations (Chan et al.'s parallel update) used to normalise
    them: ``clamp((x - mean) / sqrt(var + eps), -clip, clip)``.

    The statistics are buffers (``mean``, ``var`` ``[D]``, ``count`` scalar, float64), so they are
    part of ``state_dict``. :meth:`update` is called by the process that sees fresh observations
    (the rollout side); the learner only reads them.
    """

    def __init__(self, shape: int | Sequence[int], clip: float = 10.0, eps: float = 1e-8) -> None:
        super().__init__()
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        self.clip = clip
        self.eps = eps
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(eps, dtype=torch.float64))

    @torch.no_grad()
    def update(self, batch: np.ndarray | Tensor) -> None:
        """Fold a ``[B, *shape]`` batch into the statistics."""
        x = torch.as_tensor(batch, dtype=torch.float64)
        b_mean = x.mean(0)
        b_var = x.var(0, unbiased=False)
        n = x.shape[0]
        delta = b_mean - self.mean
        total = self.count + n
        self.mean += delta * (n / total)
        m2 = self.var * self.count + b_var * n + delta.pow(2) * self.count * n / total
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def forward(self, x: Tensor) -> Tensor:
        mean = self.mean.to(x.device, x.dtype)  # the statistics meet the data where it is
        inv_std = torch.rsqrt(self.var + self.eps).to(x.device, x.dtype)
        return torch.clamp((x - mean) * inv_std, -self.clip, self.clip)


def fold_moments(norm: RunningNorm, mean: np.ndarray, var: np.ndarray, count: float) -> None:
    """Fold a batch's moments (``mean``, ``var`` over ``count`` rows) into ``norm``'s statistics
    (Chan et al.'s parallel update)."""
    if count <= 0:
        return
    with torch.no_grad():
        b_mean = torch.tensor(np.asarray(mean), dtype=torch.float64)  # a copy: may be read-only
        b_var = torch.tensor(np.asarray(var), dtype=torch.float64)
        delta = b_mean - norm.mean
        total = norm.count + count
        norm.mean += delta * (count / total)
        m2 = norm.var * norm.count + b_var * count + delta.pow(2) * norm.count * count / total
        norm.var.copy_(m2 / total)
        norm.count.copy_(total)


class _ActorCriticBase(nn.Module):
    """What PPO's and GRPO's actor-critics share: observation normalisation (``obs_norm``), the
    critic, ``actor_mean`` (the actor's network) and ``actor_log_std``, and the rollout interface
    (:meth:`normalize`, :meth:`normalizer`, :meth:`value`, :meth:`predict`)."""

    obs_norm: nn.Module
    actor_mean: nn.Sequential
    actor_log_std: nn.Parameter
    critic: nn.Sequential

    def value(self, obs: Tensor) -> Tensor:
        """``[B, D] -> [B]``."""
        return seq_forward(self.critic, obs).squeeze(-1)

    @torch.no_grad()
    def predict(self, raw_obs: Tensor | np.ndarray, deterministic: bool = True) -> Tensor:
        """Actions for raw (unnormalised) observations ``[B, D] -> [B, A]`` (evaluation)."""
        return self.act(self.normalize(raw_obs), deterministic)[0]

    # -- what the rollout and the learner use (the policy interface of PPO and GRPO) -------------
    def normalize(self, raw_obs: Tensor | np.ndarray) -> Tensor:
        """Normalise raw observations (as the env gives them) with the statistics this version
        holds."""
        return self.obs_norm(as_tensor(raw_obs))

    def normalizer(self) -> Callable[[Tensor | np.ndarray, Tensor], None]:
        """A fast ``fn(raw, out)`` that writes the normalised ``raw`` into ``out``, with the
        statistics frozen as they are now (they change only between weight versions)."""
        norm = self.obs_norm
        if not isinstance(norm, RunningNorm):
            return lambda raw, out: out.copy_(norm(as_tensor(raw)))
        mean = norm.mean.to(torch.float32)
        inv = torch.rsqrt(norm.var + norm.eps).to(torch.float32)
        clip = float(norm.clip)

        def run(raw: Tensor | np.ndarray, out: Tensor) -> None:
            torch.sub(as_tensor(raw), mean, out=out)
            out.mul_(inv).clamp_(-clip, clip)

        return run

    def action_log_std(self) -> Tensor:
        """The state-independent ``log_std`` ``[A]`` (detached)."""
        return self.actor_log_std.detach()

    def policy_parameters(self) -> list[nn.Parameter]:
        """The policy's parameters without the critic's (GRPO trains no critic)."""
        return [*self.actor_mean.parameters(), self.actor_log_std]

    def fold_obs_moments(self, mean: np.ndarray, var: np.ndarray, count: float) -> None:
        """Fold raw-observation batch moments into the statistics (Chan et al.'s update);
        nothing if this policy does not normalise."""
        if isinstance(self.obs_norm, RunningNorm):
            fold_moments(self.obs_norm, mean, var, count)


class GaussianActorCritic(_ActorCriticBase):
    """PPO's policy and value networks: a Gaussian policy with a state-independent ``log_std``
    and a separate critic MLP, over normalised observations.

    Methods take *normalised* observations (``self.obs_norm(raw)``), so a learner recomputes
    exactly the log-probabilities the rollout computed, whatever the statistics did since.

    Args:
        obs_dim: observation size ``D``.
        act_dim: action size ``A``.
        hidden: hidden layer sizes of both networks.
        activation: a key of :data:`ACTIVATIONS`.
        log_std_init: initial ``log_std``.
        normalize_obs: keep :class:`RunningNorm` statistics (else ``obs_norm`` is the identity).
        ortho_init: orthogonal initialisation of both networks (see :func:`mlp`).
    """

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden: Sequence[int] = (64, 64),
        activation: str = "tanh",
        log_std_init: float = 0.0,
        normalize_obs: bool = True,
        ortho_init: bool = True,
    ) -> None:
        super().__init__()
        self.obs_dim, self.act_dim = obs_dim, act_dim
        self.obs_norm: nn.Module = RunningNorm(obs_dim) if normalize_obs else nn.Identity()
        self.actor_mean = mlp(obs_dim, hidden, act_dim, activation, out_std=0.01, ortho_init=ortho_init)
        self.actor_log_std = nn.Parameter(torch.full((act_dim,), float(log_std_init)))
        self.critic = mlp(obs_dim, hidden, 1, activation, out_std=1.0, ortho_init=ortho_init)

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        """Sample actions for the rollout: ``[B, D] -> (actions [B, A], log_prob [B], value [B])``
        (without gradient; actions are not clipped to the action space, the env side does that)."""
        mean = seq_forward(self.actor_mean, obs)
        log_std = self.actor_log_std.expand_as(mean)
        action = mean if deterministic else mean + torch.randn_like(mean) * torch.exp(log_std)
        return action, gaussian_log_prob(action, mean, log_std), self.value(obs)

    def evaluate(self, obs: Tensor, actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """For the update: ``obs [B, D], actions [B, A] -> (log_prob [B], entropy [B], value [B])``."""
        mean = seq_forward(self.actor_mean, obs)
        log_std = self.actor_log_std.expand_as(mean)
        return gaussian_log_prob(actions, mean, log_std), gaussian_entropy(log_std), self.value(obs)

    def action_mean(self, obs: Tensor) -> Tensor:
        """The Gaussian's mean for normalised observations ``[B, D] -> [B, A]``."""
        return seq_forward(self.actor_mean, obs)


class ActorCritic(_ActorCriticBase):
    """PPO's and GRPO's actor-critic over any supported action space (discrete, multi-discrete,
    multi-binary, or a dict/tuple of those and ``Box`` parts; :mod:`rlinf_algos.action_spaces`).

    The actor emits the parameters of an :class:`~rlinf_algos.distributions.ActionDist` (Normal
    means of the ``Box`` dims, logits of each discrete dimension and bit); ``log_std`` covers the
    ``Box`` dims only. Actions are the flat float form ``[B, A]``. Otherwise as
    :class:`GaussianActorCritic` (observation normalisation, the critic, the rollout interface):
    :meth:`action_params` takes the place of ``action_mean``, and :meth:`predict` with
    ``deterministic=False`` samples (from torch's global generator).

    Args:
        action_space: the action space's spec (:func:`~rlinf_algos.action_spaces.action_space_spec`).
        the others: as :class:`GaussianActorCritic`.
    """

    def __init__(
        self,
        obs_dim: int,
        action_space: Mapping[str, Any],
        hidden: Sequence[int] = (64, 64),
        activation: str = "tanh",
        log_std_init: float = 0.0,
        normalize_obs: bool = True,
        ortho_init: bool = True,
    ) -> None:
        from rlinf_algos.distributions import ActionDist

        super().__init__()
        self.dist = dist = ActionDist(action_space)
        self.obs_dim, self.act_dim = obs_dim, dist.act_dim
        self.obs_norm: nn.Module = RunningNorm(obs_dim) if normalize_obs else nn.Identity()
        self.actor_mean = mlp(
            obs_dim, hidden, dist.param_dim, activation, out_std=0.01, ortho_init=ortho_init
        )
        self.actor_log_std = nn.Parameter(torch.full((dist.cont_dim,), float(log_std_init)))
        self.critic = mlp(obs_dim, hidden, 1, activation, out_std=1.0, ortho_init=ortho_init)

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        params = seq_forward(self.actor_mean, obs)
        action = self.dist.mode(params) if deterministic else self.dist.sample(params, self.actor_log_std)
        return action, self.dist.log_prob(action, params, self.actor_log_std), self.value(obs)

    def evaluate(self, obs: Tensor, actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        params = seq_forward(self.actor_mean, obs)
        logp, entropy = self.dist.log_prob_and_entropy(actions, params, self.actor_log_std)
        return logp, entropy, self.value(obs)

    def action_params(self, obs: Tensor) -> Tensor:
        """The distribution's parameters for normalised observations ``[B, D] -> [B, P]``."""
        return seq_forward(self.actor_mean, obs)


class SquashedGaussianActor(nn.Module):
    """SAC's actor: ``a = low + (tanh(u) + 1) / 2 * (high - low)`` with ``u ~ N(mu(s), sigma(s))``.

    The log-probability includes the change-of-variables term of the tanh and the rescaling.
    Two parametrisations of the state-dependent ``log_std`` are offered, since they start from
    very different exploration noise:

    - ``log_std_bound="tanh"`` (CleanRL): ``log_std`` is squashed into ``[log_std_min,
      log_std_max]`` (default ``[-5, 2]``) with a tanh, so a head output near 0 means
      ``log_std = -1.5`` (std 0.22) at the start;
    - ``log_std_bound="clip"`` (Stable-Baselines3): the head's output is clamped into
      ``[log_std_min, log_std_max]`` (default ``[-20, 2]``), so a head output near 0 means std 1.

    Args:
        obs_dim, act_dim: sizes.
        action_low, action_high: ``[A]`` bounds of the action space.
        hidden: hidden layer sizes.
        activation: a key of :data:`ACTIVATIONS`.
        log_std_min, log_std_max: bounds of ``log_std``; ``None`` takes the parametrisation's
            default.
        log_std_bound: ``"tanh"`` or ``"clip"``, as above.
        squash_eps: the ``eps`` in the tanh correction ``log(1 - tanh(u)^2 + eps)`` of the
            log-probability. ``0`` (default) uses the exact, stable form ``2 (log 2 - u -
            softplus(-2u))`` (Spinning Up, softlearning); SB3 and CleanRL use ``1e-6``, which caps
            the correction at about ``log(eps)`` per dimension once an action saturates, so a
            saturated (bang-bang) action costs bounded entropy.
        ortho_init: orthogonal weights (gain ``sqrt(2)``, 0.01 on the head) and zero biases;
            ``False`` keeps PyTorch's default ``nn.Linear`` initialisation (CleanRL, SB3).
    """

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        action_low: Sequence[float] | np.ndarray,
        action_high: Sequence[float] | np.ndarray,
        hidden: Sequence[int] = (256, 256),
        activation: str = "relu",
        log_std_min: float | None = None,
        log_std_max: float = 2.0,
        log_std_bound: Literal["tanh", "clip"] = "tanh",
        ortho_init: bool = True,
        squash_eps: float = 0.0,
    ) -> None:
        super().__init__()
        if not squash_eps >= 0.0:
            raise ValueError(f"squash_eps must be >= 0, got {squash_eps}")
        self.squash_eps = float(squash_eps)
        if log_std_bound not in ("tanh", "clip"):
            raise ValueError(f"log_std_bound must be 'tanh' or 'clip', got {log_std_bound!r}")
        self.obs_dim, self.act_dim = obs_dim, act_dim
        act = ACTIVATIONS[activation]
        layers: list[nn.Module] = []
        last = obs_dim
        for h in hidden:
            layers += [_init(nn.Linear(last, h), ortho_init), act()]
            last = h
        self.trunk = nn.Sequential(*layers)
        self.head = _init(nn.Linear(last, 2 * act_dim), ortho_init, std=0.01)
        low = torch.as_tensor(np.asarray(action_low, dtype=np.float32))
        high = torch.as_tensor(np.asarray(action_high, dtype=np.float32))
        self.register_buffer("action_scale", (high - low) / 2.0)
        self.register_buffer("action_bias", (high + low) / 2.0)
        if log_std_min is None:
            log_std_min = -5.0 if log_std_bound == "tanh" else -20.0
        if not log_std_min < log_std_max:
            raise ValueError(f"log_std_min ({log_std_min}) must be below log_std_max ({log_std_max})")
        self.log_std_min, self.log_std_max = float(log_std_min), float(log_std_max)
        self.log_std_bound = log_std_bound

    def _dist(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        mean, raw = self.head(self.trunk(obs)).chunk(2, dim=-1)
        if self.log_std_bound == "clip":
            return mean, raw.clamp(self.log_std_min, self.log_std_max)
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (torch.tanh(raw) + 1.0)
        return mean, log_std

    def sample(self, obs: Tensor, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """Reparameterised sample: ``[B, D] -> (actions [B, A], log_prob [B])``, the noise drawn
        from ``generator`` (torch's default one if ``None``)."""
        mean, log_std = self._dist(obs)
        noise = torch.randn(mean.shape, generator=generator, dtype=mean.dtype, device=mean.device)
        u = mean + noise * torch.exp(log_std)
        y = torch.tanh(u)
        if self.squash_eps > 0.0:
            log_det = torch.log(1.0 - y * y + self.squash_eps)
        else:  # log(1 - tanh(u)^2) = 2 * (log 2 - u - softplus(-2u)), stable for large |u|
            log_det = 2.0 * (math.log(2.0) - u - nn.functional.softplus(-2.0 * u))
        log_prob = gaussian_log_prob(u, mean, log_std) - (log_det + torch.log(self.action_scale)).sum(-1)
        return y * self.action_scale + self.action_bias, log_prob

    @torch.no_grad()
    def predict(self, obs: Tensor | np.ndarray, deterministic: bool = True) -> Tensor:
        """Actions without gradient: the squashed mean, or a sample."""
        obs = as_tensor(obs)
        if not deterministic:
            return self.sample(obs)[0]
        mean, _ = self._dist(obs)
        return torch.tanh(mean) * self.action_scale + self.action_bias


class EnsembleLinear(nn.Module):
    """``E`` independent linear layers applied in one ``baddbmm``: ``[E, B, in] -> [E, B, out]``.

    Each member is orthogonally initialised with gain ``std`` and a zero bias, or with
    ``ortho_init=False`` exactly as PyTorch initialises an ``nn.Linear(in_dim, out_dim)``
    (weights and bias uniform in ``+-1/sqrt(in_dim)``)."""

    def __init__(
        self, ensemble: int, in_dim: int, out_dim: int, std: float = math.sqrt(2.0), ortho_init: bool = True
    ) -> None:
        super().__init__()
        w = torch.empty(ensemble, out_dim, in_dim)
        b = torch.zeros(ensemble, 1, out_dim)
        for i in range(ensemble):
            if ortho_init:
                nn.init.orthogonal_(w[i], std)
            else:  # nn.Linear.reset_parameters
                nn.init.kaiming_uniform_(w[i], a=math.sqrt(5))
                nn.init.uniform_(b[i], -1.0 / math.sqrt(in_dim), 1.0 / math.sqrt(in_dim))
        self.weight = nn.Parameter(w.transpose(1, 2).contiguous())
        self.bias = nn.Parameter(b)

    def forward(self, x: Tensor) -> Tensor:
        if self.weight.shape[-1] == 1:
            # a one-output layer (the Q heads) as a product and a sum: batched GEMV through
            # ``baddbmm`` takes 197 us forward and 913 us forward and backward here, against 45
            # and 307 (E=2, B=256, in=256, one thread); a whole SAC update is matmul-bound and
            # did not measurably change (17.7 ms on one thread either way)
            return (x * self.weight.transpose(1, 2)).sum(-1, keepdim=True) + self.bias
        return torch.baddbmm(self.bias, x, self.weight)


class TwinQ(nn.Module):
    """``E`` (2 by default) Q networks ``Q_i(s, a)`` evaluated together: ``obs [B, D], actions
    [B, A] -> [E, B]``; ``ortho_init`` as in :class:`EnsembleLinear`."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden: Sequence[int] = (256, 256),
        activation: str = "relu",
        ensemble: int = 2,
        ortho_init: bool = True,
    ) -> None:
        super().__init__()
        self.ensemble = ensemble
        act = ACTIVATIONS[activation]
        layers: list[nn.Module] = []
        last = obs_dim + act_dim
        for h in hidden:
            layers += [EnsembleLinear(ensemble, last, h, ortho_init=ortho_init), act()]
            last = h
        layers.append(EnsembleLinear(ensemble, last, 1, std=1.0, ortho_init=ortho_init))
        self.net = nn.Sequential(*layers)

    def forward(self, obs: Tensor, actions: Tensor) -> Tensor:
        x = torch.cat([obs, actions], dim=-1)
        return self.net(x.unsqueeze(0).expand(self.ensemble, -1, -1)).squeeze(-1)
