"""GRPO's rollout on embodied tasks: groups of episodes from one initial state each, recorded as
masked sequences. :func:`collect_grpo` runs on a rollout worker against the env workers'
``run_episodes`` (on every scheduler: ``runner.scheduler: local`` runs the same workers in one
process)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rlinf_algos.channels import reward_key, scored_key, traj_key
from rlinf_algos.models.mlp import gaussian_log_prob, module_device
from rlinf_algos.stats import Moments

__all__ = ["collect_grpo"]


@torch.no_grad()
def collect_grpo(
    worker: Any, gen: int, max_steps: int, batch: str = "", send: bool = True, to_actor: bool = False
) -> dict[str, Any]:
    """One GRPO iteration: act on every stage until each of its envs has finished one episode
    (the env worker's :meth:`EnvWorker.run_episodes`), recording each env's episode as a
    masked sequence. Two messages go out: the sequences (``obs`` normalised ``[n, L, D]``,
    ``actions`` ``[n, L, A]``, ``log_probs`` and ``mask`` ``[n, L]``, the raw-observation
    ``moments``) to the reference worker on :func:`traj_key`, and the outcomes (``returns``
    ``[n]``, ``gid`` ``[n]``, ``lengths``) to the reward worker on :func:`reward_key`, rows
    in the same (stage-major) slot order. ``batch`` names the iteration's keys (the driver's
    ``"<generation>.<iteration>"``). ``to_actor``: no reference runs (``kl_coef: 0``), the
    sequences go straight to the actor (:func:`scored_key`). The sequences and the sampling stay
    on the host; on a policy on a GPU only the network runs there."""
    model, S, n = worker.model, worker.stages, worker.slots
    dev = module_device(model)
    D = worker.spec["obs_dim"]
    log_std = model.action_log_std().cpu()
    std = log_std.exp()
    dist = getattr(model, "dist", None)  # None: a Gaussian over the whole action
    moments = Moments(D)
    current: list[np.ndarray] = [None] * S  # type: ignore[list-item]
    gid: list[np.ndarray] = [None] * S  # type: ignore[list-item]
    active = [np.ones(n, dtype=bool) for _ in range(S)]
    pending = [False] * S
    returns = np.zeros((S, n))
    lengths = np.zeros((S, n), np.int64)
    rec: list[dict[str, list[Any]]] = [{"obs": [], "act": [], "mean": [], "mask": []} for _ in range(S)]
    for s in range(S):
        msg = worker.recv(s)
        current[s], gid[s] = msg["obs"], msg["gid"]
    for _ in range(max_steps + 1):
        live = [s for s in range(S) if active[s].any()]
        if not live:
            break
        for s in live:
            if pending[s]:
                msg = worker.recv(s)
                returns[s] += np.where(active[s], msg["rew"], 0.0)
                lengths[s] += active[s]
                active[s] = active[s] & ~(msg["term"] | msg["trunc"])
                current[s], pending[s] = msg["obs"], False
                if not active[s].any():  # this stage is done here: tell its env workers
                    worker.send(s, None)
                    continue
            raw = current[s]
            moments.add(raw[active[s]])
            obs = model.normalize(torch.from_numpy(raw))
            x = obs if dev.type == "cpu" else obs.to(dev)
            if dist is None:
                mean = model.action_mean(x).cpu()
                action = (
                    mean
                    + torch.randn(mean.shape, generator=worker.generator, device=worker.generator.device)
                    * std
                )
            else:
                mean = model.action_params(x).cpu()
                action = dist.sample(mean, log_std, worker.generator)
            worker.send(s, action.numpy())
            r = rec[s]
            r["obs"].append(obs)
            r["act"].append(action)
            r["mean"].append(mean)
            r["mask"].append(torch.from_numpy(active[s].copy()))
            pending[s] = True
    L = max(len(r["obs"]) for r in rec)

    def stacked(key: str, s: int) -> torch.Tensor:  # [n, L, ...], zero past the stage's end
        x = torch.stack(rec[s][key], 1)
        pad = L - x.shape[1]
        if pad:
            x = torch.cat([x, x.new_zeros(x.shape[0], pad, *x.shape[2:])], 1)
        return x

    obs_t = torch.cat([stacked("obs", s) for s in range(S)])
    act_t = torch.cat([stacked("act", s) for s in range(S)])
    mean_t = torch.cat([stacked("mean", s) for s in range(S)])
    mask_t = torch.cat([stacked("mask", s) for s in range(S)])
    if dist is None:
        logp = gaussian_log_prob(act_t, mean_t, log_std.expand_as(mean_t))
    else:
        logp = dist.log_prob(act_t, mean_t, log_std)
    seqs = {
        "obs": obs_t.numpy(),
        "actions": act_t.numpy(),
        "log_probs": logp.numpy(),
        "mask": mask_t.numpy(),
        "moments": moments.result(),
        "version": worker.version,
    }
    outcome = {"returns": returns.reshape(-1), "gid": np.concatenate(gid), "lengths": lengths.reshape(-1)}
    if send:
        key = (scored_key if to_actor else traj_key)(batch or gen, worker.rank)
        worker.traj_ch.put(seqs, key, timeout=worker.timeout)
        worker.traj_ch.put(outcome, reward_key(batch or gen, worker.rank), timeout=worker.timeout)
    return {"aborted": False, "version": worker.version, "steps": n * sum(len(r["obs"]) for r in rec)}
