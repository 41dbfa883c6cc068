"""Behaviour cloning before RL (``model.bc``): RLinf's SFT-then-RL recipe for embodied policies.

The policy the run's recipe builds is fitted to a demonstration data set (:mod:`rlinf_algos.demos`,
``rlinf demos record``): its observation statistics (where it normalises observations) to the
demonstrations' states (unit variance for features constant in them, :data:`DEGENERATE_VAR`;
RL keeps these statistics frozen unless ``model.bc.obs_norm: running``,
:func:`rlinf_algos.warm_starts.obs_stats_frozen`), then its action mean to the demonstrated actions by mean squared error,
``L = mean_b ||mu(s_b) - clip(a_b)||^2``, with Adam and a cosine-decayed learning rate, over
``epochs`` passes (``model.bc.steps: until_solved``: only each episode's steps up to its first
solved one); a tenth of the episodes (at least one) is held out and its loss reported. The
policy's ``log_std`` is then set to ``model.bc.log_std`` (a cloned mean with the initial
exploration noise of a fresh policy would throw most of the cloning away in the first
iterations). The result goes to ``RUN_DIR/warm_start.safetensors`` (``rlinf eval RUN
--warm-start`` evaluates it) and RL starts from it. Seeded: the same data and seed give the same
weights.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlinf_algos.demos import load_demos, steps_until_solved
from rlinf_algos.models import build_policy
from rlinf_core.errors import ConfigError

__all__ = ["DEGENERATE_VAR", "bc_warm_start", "demo_variance"]

SEED_OFFSET = 7_777
"""Added to the run seed for the fit's shuffling (RL's own initialisation stays what it was)."""

DEGENERATE_VAR = 1e-6
"""A state feature whose variance over the demonstrations is below this (a standard deviation under
1e-3: a padding slot, the one-hot of a task without a kept episode) is normalised with unit
variance around its demo value: the demonstrations say nothing about its scale, and a variance of
0 would turn any later deviation into the normaliser's clip value."""


def bc_warm_start(
    spec: Mapping[str, Any],
    env_cfg: Any,
    opts: Any,
    seed: int,
    run_dir: Path | None = None,
    say: Callable[[str], None] | None = None,
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Fit the policy of ``spec`` to ``opts.demos`` (see the module docstring): its state dict,
    to start RL from, and a record for ``summary.json``."""
    if say is None:
        say = logging.getLogger("rlinf.train").warning
    data = load_demos(Path(opts.demos))
    if opts.steps == "until_solved":
        data = steps_until_solved(data, opts.demos, "model.bc.steps")
    states, actions = data["state"], data["action"]
    obs_dim, act_dim = int(spec.get("obs_dim", 0)), int(spec.get("act_dim", 0))
    if states.shape[1] != obs_dim or actions.shape[1] != act_dim:
        raise ConfigError(
            f"{opts.demos!r} holds states of {states.shape[1]} and actions of {actions.shape[1]} values; this "
            f"run's env has {obs_dim} and {act_dim} (record the demonstrations from the same env.id and obs_mode)",
            path="model.bc.demos",
        )
    started = time.monotonic()
    rng_state = torch.get_rng_state()
    torch.manual_seed(seed + SEED_OFFSET)
    try:
        model = build_policy(dict(spec))
        if not (hasattr(model, "normalize") and hasattr(model, "action_mean")):
            raise ConfigError(
                f"behaviour cloning fits a Gaussian policy's action mean; {spec.get('cls')} has none "
                "(model.bc works with PPO and GRPO on continuous actions)",
                path="model.bc",
            )
        if hasattr(model, "fold_obs_moments"):
            model.fold_obs_moments(states.mean(0), demo_variance(states), float(len(states)))
        record = _fit(model, data, opts, seed, say)
        if opts.log_std is not None and hasattr(model, "actor_log_std"):
            with torch.no_grad():
                model.actor_log_std.fill_(float(opts.log_std))
    finally:
        torch.set_rng_state(rng_state)
    record.update(
        demos=str(opts.demos),
        steps=len(states),
        episodes=len(np.unique(data["episode_index"])),
        seconds=round(time.monotonic() - started, 1),
    )
    state = model.state_dict()
    if run_dir is not None:
        from rlinf_algos.run_files import WARM_START, write_state
        from rlinf_algos.rundir import env_record

        clean = {k: v for k, v in spec.items() if k != "num_slots"}
        write_state(
            {**env_record(env_cfg), "spec": clean, "state_dict": state, "record": record},
            Path(run_dir) / WARM_START,
        )
    say(
        f"behaviour cloning: {record['steps']} steps of {record['episodes']} episodes, held-out loss "
        f"{record['val_loss']:.4f} (train {record['train_loss']:.4f}) in {record['seconds']:.0f} s"
    )
    return state, record


def demo_variance(states: np.ndarray) -> np.ndarray:
    """The per-feature variance of ``states`` ``[N, D]`` the observation statistics are fitted with:
    1 where it is below :data:`DEGENERATE_VAR` (see there)."""
    var = np.asarray(states, np.float64).var(0)
    return np.where(var < DEGENERATE_VAR, 1.0, var)


def _fit(
    model: Any, data: dict[str, Any], opts: Any, seed: int, say: Callable[[str], None]
) -> dict[str, Any]:
    episodes = np.unique(data["episode_index"])
    rng = np.random.default_rng(seed + SEED_OFFSET)
    held = (
        set(rng.choice(episodes, size=max(1, len(episodes) // 10), replace=False).tolist())
        if len(episodes) > 1
        else set()
    )
    is_val = np.isin(data["episode_index"], list(held))
    device = next(model.parameters()).device
    s_all = torch.as_tensor(data["state"], dtype=torch.float32, device=device)
    a_all = torch.as_tensor(np.clip(data["action"], -1.0, 1.0), dtype=torch.float32, device=device)
    train_idx = np.flatnonzero(~is_val)
    val_idx = np.flatnonzero(is_val)
    params = [p for n, p in model.named_parameters() if not n.startswith("critic")]
    optim = torch.optim.Adam(params, lr=opts.lr)
    steps_per_epoch = max(1, math.ceil(len(train_idx) / opts.batch_size))
    total = steps_per_epoch * opts.epochs
    sched = torch.optim.lr_scheduler.LambdaLR(
        optim, lambda k: 0.5 * (1 + math.cos(math.pi * min(k, total) / total))
    )
    train_loss = float("nan")
    for epoch in range(opts.epochs):
        order = rng.permutation(train_idx)
        losses = []
        for k in range(steps_per_epoch):
            idx = torch.as_tensor(order[k * opts.batch_size : (k + 1) * opts.batch_size], device=device)
            mean = model.action_mean(model.normalize(s_all[idx]))
            loss = (mean - a_all[idx]).pow(2).sum(-1).mean()
            optim.zero_grad(set_to_none=True)
            loss.backward()
            optim.step()
            sched.step()
            losses.append(float(loss.detach()))
        train_loss = float(np.mean(losses))
        if epoch == 0 or (epoch + 1) % 10 == 0 or epoch + 1 == opts.epochs:
            say(f"behaviour cloning: epoch {epoch + 1}/{opts.epochs}, loss {train_loss:.4f}")
    with torch.no_grad():
        val = s_all[torch.as_tensor(val_idx, device=device)] if len(val_idx) else s_all[:0]
        val_loss = (
            float(
                (model.action_mean(model.normalize(val)) - a_all[torch.as_tensor(val_idx, device=device)])
                .pow(2)
                .sum(-1)
                .mean()
            )
            if len(val_idx)
            else float("nan")
        )
    return {
        "train_loss": round(train_loss, 5),
        "val_loss": round(val_loss, 5),
        "held_out_episodes": len(held),
    }
