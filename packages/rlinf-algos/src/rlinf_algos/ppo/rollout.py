"""PPO's rollout: the one collection loop, run by a rollout worker over its env links (or, in a
benchmark or a test, over a vector env of its own: :class:`~rlinf_algos.ports.LocalPort`).

The loop talks to a *port* (:mod:`rlinf_algos.ports`). The per-step path is kept short (the env side waits on it): the observation
statistics are fixed for the iteration, so normalising is three in-place ops into the buffer;
the raw-observation moments and the log-probabilities are computed once at the end.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rlinf_algos import obs as obs_tree
from rlinf_algos.models.mlp import gaussian_log_prob, module_device
from rlinf_algos.stats import Moments

__all__ = ["collect_ppo"]


@torch.no_grad()
def collect_ppo(port: Any, policy: Any, T: int, generator: torch.Generator) -> dict[str, Any]:
    """``T`` steps of every stage of ``port`` with ``policy`` (a Gaussian actor-critic: its
    ``normalizer``, ``action_mean``, ``action_log_std`` and ``normalize``; or an actor-critic
    over any action space, :class:`~rlinf_algos.models.mlp.ActorCritic`: ``action_params`` and
    its ``dist`` in place of ``action_mean``; actions are then the flat form). Returns the
    trajectory, ``[T, stages * slots, ...]`` arrays in stage-major slot order: ``obs``
    (normalised, as the policy saw them; a dict of arrays for dict observations,
    :mod:`rlinf_algos.obs`), ``actions`` (as sampled), ``log_probs``, ``rewards`` (raw),
    ``terminated``, ``truncated``; ``last_obs`` (normalised, after the last step);
    ``final_idx`` ``[K, 2]`` (t, slot) and ``final_obs`` of truncated steps (normalised, for the
    learner's bootstrap); ``moments`` of the raw observations' vector part (the next version's
    statistics; ``None`` when they have none).

    The buffers and the sampling stay on the host (``generator`` is a CPU generator); on a policy
    on a GPU only the network runs there: each step's normalised observations go to the device
    and the action means come back (on the CPU both moves are no-ops)."""
    S, n = port.stages, port.slots
    dev = module_device(policy)
    host = dev.type == "cpu"
    current = [port.recv(s)["obs"] for s in range(S)]
    first = obs_tree.to_numpy(policy.normalize(current[0]))
    vec = obs_tree.vector_part(current[0])
    D = None if vec is None else vec.shape[1]
    log_std = policy.action_log_std().cpu()
    std = log_std.exp()
    dist = getattr(policy, "dist", None)  # None: a Gaussian over the whole action
    A = log_std.shape[0] if dist is None else dist.act_dim
    P = A if dist is None else dist.param_dim
    obs_buf = obs_tree.alloc(first, (S, T, n))
    act_buf = np.empty((S, T, n, A), np.float32)
    raw_buf = None if D is None else np.empty((S, T, n, D), np.float32)
    rew_buf = np.empty((S, T, n), np.float32)
    term_buf = np.zeros((S, T, n), bool)
    trunc_buf = np.zeros((S, T, n), bool)
    final_t: list[np.ndarray] = []  # (stage, t, slot) of truncated steps, and their obs
    final_obs: list[Any] = []
    mean_buf = torch.empty(S, T, n, P, device="cpu")  # beside the host buffers above
    obs_t, act_t = obs_tree.to_torch(obs_buf), torch.from_numpy(act_buf)
    normalize = policy.normalizer()

    def absorb(s: int, t: int, msg: dict[str, Any]) -> None:
        rew_buf[s, t] = msg["rew"]
        term_buf[s, t] = msg["term"]
        trunc_buf[s, t] = msg["trunc"]
        if "final" in msg:
            idx, rows = msg["final"]
            tr = msg["trunc"][idx]
            if tr.any():
                sel = idx[tr]
                final_t.append(np.stack([np.full_like(sel, s), np.full_like(sel, t), sel], 1))
                final_obs.append(obs_tree.to_numpy(policy.normalize(obs_tree.take(rows, tr))))

    for t in range(T):
        for s in range(S):
            if t > 0:
                msg = port.recv(s)
                absorb(s, t - 1, msg)
                current[s] = msg["obs"]
            raw = current[s]
            if raw_buf is not None:
                raw_buf[s, t] = obs_tree.vector_part(raw)
            obs = obs_tree.take(obs_t, (s, t))
            normalize(raw, obs)
            x = obs if host else obs_tree.to_device(obs, dev)
            if dist is None:
                mean = policy.action_mean(x).cpu()
                noise = torch.randn(mean.shape, generator=generator, device=generator.device)
                torch.add(mean, noise * std, out=act_t[s, t])
            else:
                mean = policy.action_params(x).cpu()
                act_t[s, t] = dist.sample(mean, log_std, generator)
            port.send(s, act_buf[s, t])
            mean_buf[s, t] = mean
    last = obs_tree.alloc(first, (S, n))
    for s in range(S):
        msg = port.recv(s)
        absorb(s, T - 1, msg)
        obs_tree.put(last, s, obs_tree.to_numpy(policy.normalize(msg["obs"])))
    if dist is None:
        logp = gaussian_log_prob(act_t, mean_buf, log_std.expand_as(mean_buf)).numpy()
    else:
        logp = dist.log_prob(act_t, mean_buf, log_std).numpy()
    moments = None
    if raw_buf is not None:
        acc = Moments(D)
        acc.add(raw_buf.reshape(-1, D))
        moments = acc.result()

    # [S, T, n, ...] -> [T, S*n, ...]: stage-major slot order, stable across iterations
    def flat(x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.moveaxis(x, 0, 1).reshape(T, S * n, *x.shape[3:]))

    if final_t:
        ft = np.concatenate(final_t)
        fidx = np.stack([ft[:, 1], ft[:, 0] * n + ft[:, 2]], 1)  # (t, slot)
        fobs = obs_tree.concat(final_obs)
    else:
        fidx = np.zeros((0, 2), np.int64)
        fobs = obs_tree.alloc(first, (0,))
    return {
        "obs": obs_tree.tree_map(flat, obs_buf),
        "actions": flat(act_buf),
        "log_probs": flat(logp),
        "rewards": flat(rew_buf),
        "terminated": flat(term_buf),
        "truncated": flat(trunc_buf),
        "last_obs": obs_tree.flatten_lead(last, 2),
        "final_idx": fidx,
        "final_obs": fobs,
        "moments": moments,
    }
