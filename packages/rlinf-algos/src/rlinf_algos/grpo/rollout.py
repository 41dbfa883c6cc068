"""GRPO's rollout on embodied tasks: groups of episodes from one initial state each, recorded as
masked sequences. :func:`collect_grpo` runs on a rollout worker against the env workers'
``run_episodes``; :class:`GRPOCollector` is the in-process runtime's (the env side is in this
process, so it resets and steps the vector env itself)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rlinf_algos.channels import reward_key, scored_key, traj_key
from rlinf_algos.grpo.learner import GRPORollout
from rlinf_algos.models.mlp import gaussian_log_prob, module_device, on_module
from rlinf_algos.stats import Moments
from rlinf_core.errors import RlinfError

__all__ = ["GRPOCollector", "collect_grpo"]


class GRPOCollector:
    """The rollout side of GRPO on an embodied task: every iteration resets each group's
    ``group_size`` copies with one shared seed (so they start from the same state), runs the
    policy until every copy has finished one episode, and records the episodes as masked
    sequences. Needs a finite time limit. The sequences stay on the host; on a policy on a GPU
    only the network runs there (each step's observations go to it, the actions come back)."""

    def __init__(
        self,
        stepper: Any,
        model: Any,
        group_size: int,
        seed: int,
        max_steps: int,
    ) -> None:
        self.stepper, self.model, self.group_size = stepper, model, group_size
        self.num_groups = stepper.num_envs // group_size
        self.seed, self.max_steps = seed, max_steps
        self.iteration = 0
        self.version = 0

    @torch.no_grad()
    def collect(self) -> tuple[GRPORollout, dict[str, Any]]:
        """One iteration's episodes, and the moments of the raw observations they saw (folded
        into the policy's statistics after the update, as on workers)."""
        st, model = self.stepper, self.model
        N, G = st.num_envs, self.group_size
        base = self.seed + self.iteration * self.num_groups
        seeds = [base + i // G for i in range(N)]
        obs_np, _ = st.envs.reset(seed=seeds)
        st.obs = obs_np.astype(np.float32, copy=False)
        self.iteration += 1
        active = np.ones(N, dtype=bool)
        moments = Moments(st.obs_dim)
        returns = np.zeros(N, dtype=np.float64)
        lengths = np.zeros(N, dtype=np.int64)
        obs_l, act_l, logp_l, mask_l = [], [], [], []
        for _ in range(self.max_steps):
            moments.add(st.obs[active])
            obs = model.normalize(torch.from_numpy(st.obs))
            action, logp, _ = model.act(on_module(model, obs))
            action, logp = action.cpu(), logp.cpu()
            step = st.step(action.numpy())
            obs_l.append(obs)
            act_l.append(action)
            logp_l.append(logp)
            mask_l.append(torch.from_numpy(active.copy()))
            returns += np.where(active, step.rewards, 0.0)
            lengths += active
            active &= ~step.done
            if not active.any():
                break
        else:
            raise RlinfError(
                f"GRPO: some episodes of {st.env_id!r} did not end within {self.max_steps} steps; "
                "set env.max_episode_steps"
            )
        rollout = GRPORollout(
            obs=torch.stack(obs_l, 1),
            actions=torch.stack(act_l, 1),
            log_probs=torch.stack(logp_l, 1),
            mask=torch.stack(mask_l, 1),
            returns=torch.from_numpy(returns).float(),
            lengths=torch.from_numpy(lengths),
            version=self.version,
        )
        return rollout, moments.result()


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
