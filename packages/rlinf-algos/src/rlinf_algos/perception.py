"""``model.warm_start``: a supervised perception warm start for ``vla`` policies, before RL.

A pixel policy has two things to learn: *where* the thing the instruction names is (perception)
and *how* to move there (control). PPO learns both from one scalar return, and on the 2-core
machine it learns neither of them within the budget: the policy finds the cube region but not
the named cube (``benchmarks/results/vla_franka_reach_curve.json``). Trained alone on a few
thousand labelled frames, the same encoder localises the named cube to about a centimetre. So,
as RLinf's users start RL from a pretrained VLA, a run can first teach its encoder to see:

1. **collect** ``frames`` observations from the run's own env (same id, kwargs, cameras and
   image size), in episodes of ``episode_steps`` steps so that most frames come from a fresh
   scene (fresh cube colours, places and instruction), moving the arm with uniformly random
   actions (each held ``action_hold`` steps), with the env's scripted demonstrator plus noise
   (``actions: expert``: the arm goes where a good policy takes it, but its motion gives the
   target away, and the fit learns to read the hand instead of the image: 10.5 cm on a scene's
   first frame, the arm still at home), or with another sub-env's demonstrator (``actions:
   shuffled``: sub-env ``i`` replays sub-env ``i - 1``'s expert actions, open loop, so the arm
   sweeps the workspace down to the table with motions that say nothing of its own scene's
   target; ``benchmarks/results/vla_perception_shortcut.json``), or towards a cube of its own
   scene chosen at random for each episode (``actions: decoy``, the env's
   ``candidate_actions()``: the hand hovers over cubes, where a policy's hand ends, and the one
   it hovers over is the named one only by chance);
2. **fit** the encoder and the auxiliary head of ``model.predict_privileged`` to the env's
   ``privileged`` entry (what the simulator knows: for ``rlinf/FrankaInstructReach-v0`` the
   named cube's reach point and its offset from the hand), squared error, ``epochs`` passes
   with Adam and a cosine learning-rate decay (``image_shift``: DrQ's random shift of every
   training image, off by default: it blurs where a fixed camera puts the cube); a tenth of the
   scenes is held out and the error on them reported;
3. RL starts from those weights (every rank and the rollout workers get them as version 0;
   ``run_dir/warm_start.safetensors`` keeps them; ``rlinf eval RUN --warm-start`` evaluates them).
   The auxiliary loss keeps training during RL, so the encoder does not forget; the policy and
   value heads read its prediction beside the features (:class:`~rlinf_algos.models.vla.VLAActorCritic`).

Only training reads ``privileged``: the policy acts from the images, the state and the words,
on the twin as on a real arm. The frames use seeds far from training's and evaluation's
(``runner.seed + 1_000_000``).
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

from rlinf_algos import obs as obs_tree
from rlinf_algos.models import build_policy
from rlinf_algos.models.vla import shift_images
from rlinf_core.errors import ConfigError

__all__ = ["SEED_OFFSET", "collect_frames", "fit_perception", "shift_images", "warm_start_policy"]

SEED_OFFSET = 1_000_000
"""The warm start's env seeds are ``runner.seed + SEED_OFFSET + i``."""

Say = Callable[[str], None]


def collect_frames(
    env_cfg: Any, opts: Any, seed: int
) -> tuple[dict[str, np.ndarray], np.ndarray, dict[str, Any]]:
    """``opts.frames`` raw observations (a dict of arrays, ``privileged`` included) of the env
    ``env_cfg`` describes, under uniformly random actions (each held ``opts.action_hold``
    steps), the env's expert actions, or (``shuffled``) each sub-env's left neighbour's expert
    actions, in episodes of ``opts.episode_steps``; the scene
    (episode) of each frame;
    and what was collected (``frames``, ``scenes``, ``collect_s``)."""
    from rlinf_algos.envs import VectorEnvStepper

    t0 = time.perf_counter()
    n_envs = max(1, min(int(env_cfg.num_envs), int(opts.frames)))
    stepper = VectorEnvStepper(
        env_cfg.id,
        n_envs,
        seed,
        env_kwargs=env_cfg.kwargs,
        max_episode_steps=int(opts.episode_steps),
        obs_mode=env_cfg.obs_mode,
        image_size=env_cfg.image_size,
    )
    try:
        if opts.actions in ("expert", "shuffled", "decoy"):
            _env_actions(stepper, env_cfg.id, opts.actions)  # refused before anything is collected
        if opts.actions == "shuffled" and n_envs < 2:
            raise ConfigError(
                "actions: shuffled moves each sub-env with another sub-env's expert actions: it needs "
                f"env.num_envs of 2 or more (and frames as many), got {n_envs}",
                "model.warm_start.actions",
            )
        if stepper.obs_space.get("kind") != "dict" or "privileged" not in stepper.obs_space["keys"]:
            raise ConfigError(
                f"the warm start fits the observation's 'privileged' entry, which {env_cfg.id} does not "
                "give here (rlinf/FrankaInstructReach-v0 gives it with env.kwargs.privileged: true)",
                "model.warm_start",
            )
        chunks, scene_ids = [], []
        scene = np.arange(n_envs)  # which scene (episode) each sub-env shows
        hold = int(opts.action_hold)
        rng = np.random.default_rng(seed)
        actions = stepper.random_actions()
        # decoy: which candidate each sub-env heads for, from a stream of its own (the other
        # modes' noise stays what it was for a seed)
        goal_rng = np.random.default_rng([seed, 1])
        goal = goal_rng.integers(0, 1 << 30, n_envs)
        for t in range(math.ceil(int(opts.frames) / n_envs)):
            chunks.append(obs_tree.tree_map(np.copy, stepper.obs))
            scene_ids.append(scene.copy())
            if opts.actions in ("expert", "shuffled", "decoy"):
                found = _env_actions(stepper, env_cfg.id, opts.actions)
                if opts.actions == "decoy":  # one of the scene's candidates, the named one by chance
                    actions = np.stack([c[g % len(c)] for c, g in zip(found, goal, strict=True)])
                elif opts.actions == "shuffled":  # sub-env i takes i - 1's: it knows nothing of i's scene
                    actions = np.roll(found, 1, axis=0)
                else:
                    actions = found
                actions = actions + float(opts.expert_noise) * rng.standard_normal(actions.shape)
            elif t % hold == 0:
                actions = stepper.random_actions()
            done = stepper.step(actions.astype(np.float32)).done
            for i in np.flatnonzero(done):  # autoreset: the next frame is a new scene's
                scene[i] = scene.max() + 1
                goal[i] = goal_rng.integers(0, 1 << 30)
        raw = obs_tree.take(obs_tree.concat(chunks, 0), slice(0, int(opts.frames)))
        ids = np.concatenate(scene_ids)[: int(opts.frames)]
    finally:
        stepper.close()
    record = {
        "frames": int(opts.frames),
        "scenes": int(np.unique(ids).size),
        "collect_s": time.perf_counter() - t0,
    }
    return raw, ids, record


def _env_actions(stepper: Any, env_id: str, actions: str) -> Any:
    """Every sub-env's demonstrator: ``[N, A]`` of ``expert_action()`` (``expert``, ``shuffled``),
    or per sub-env a ``[K, A]`` array of ``candidate_actions()`` (``decoy``)."""
    method = "candidate_actions" if actions == "decoy" else "expert_action"
    try:
        base = getattr(stepper.envs, "unwrapped", stepper.envs)  # the vector env under its wrappers
        found = base.call(method)
    except AttributeError:
        what = (
            "the demonstrator's action towards each object an instruction could name"
            if (actions == "decoy")
            else "a scripted demonstrator"
        )
        raise ConfigError(
            f"{env_id} has no {method}() method ({what}) for the warm start's actions: {actions}; "
            "use actions: random",
            "model.warm_start.actions",
        ) from None
    if actions == "decoy":
        return [np.asarray(c, dtype=np.float64) for c in found]
    return np.asarray(found, dtype=np.float64)


def fit_perception(
    model: Any,
    raw: Mapping[str, np.ndarray],
    opts: Any,
    seed: int,
    say: Say | None = None,
    scenes: np.ndarray | None = None,
) -> dict[str, Any]:
    """Fit ``model``'s encoder and auxiliary head (a
    :class:`~rlinf_algos.models.vla.VLAActorCritic` with ``predict_privileged``) to the
    ``privileged`` entry of ``raw``; the state statistics are folded from ``raw`` first. A
    tenth is held out: whole scenes when ``scenes`` (a scene id per frame) is given, so the
    held-out error is that on scenes the fit never saw. Returns
    the held-out error: ``val_error_m`` (median distance between the predicted and the true
    first three entries, the target's position), ``val_within_2cm`` and ``val_loss`` (on the
    standardised entry: the head's target is centred by the training frames' mean and divided by
    one scale, the root mean of the entries' variances,
    :meth:`~rlinf_algos.models.vla.VLAActorCritic.set_privileged_scale`)."""
    from rlinf_algos.models.mlp import seq_forward

    head = getattr(model, "aux_head", None)
    if head is None:
        raise ConfigError(
            "the warm start trains the auxiliary head of model.predict_privileged: set it above 0",
            "model.warm_start",
        )
    pad = int(getattr(opts, "image_shift", 0))
    keys = list(getattr(model.encoder, "image_keys", []))
    if pad and keys:
        size = min(int(d) for d in np.asarray(raw[keys[0]]).shape[1:3])
        if pad >= size // 2:
            raise ConfigError(
                f"image_shift {pad} pixels is not less than half the {size}-pixel image; use 0 (off) "
                "to a few pixels (4 at 64x64)",
                "model.warm_start.image_shift",
            )
    t0 = time.perf_counter()
    if "state" in raw:
        s = np.asarray(raw["state"], np.float64)
        model.fold_obs_moments(s.mean(0), s.var(0), float(len(s)))
    prep = model.normalize(raw)
    n = int(prep["privileged"].shape[0])
    gen = torch.Generator().manual_seed(seed)
    if scenes is not None and np.unique(scenes).size >= 10:
        ids = np.unique(scenes)
        held = ids[torch.randperm(len(ids), generator=gen).numpy()[: max(1, len(ids) // 10)]]
        mask = torch.from_numpy(np.isin(scenes, held))
        val_idx, train_idx = mask.nonzero().squeeze(1), (~mask).nonzero().squeeze(1)
    else:
        perm = torch.randperm(n, generator=gen)
        n_val = max(1, n // 10) if n >= 20 else 0
        val_idx, train_idx = perm[:n_val], perm[n_val:]
    n_val = len(val_idx)
    fit = prep["privileged"][train_idx]
    # one scale for every entry (the root mean of their variances): the heads read unit-scale
    # inputs, and the loss keeps the entries' relative weights (a per-entry scale would make a
    # centimetre of the hand's height count as much as ten of the target's place)
    scale = fit.var(0).mean().sqrt() if len(fit) > 1 else torch.ones(())
    model.set_privileged_scale(fit.mean(0), scale.expand(fit.shape[1]))
    target = model.standardized_privileged(prep)
    scale = model.privileged_std
    params = [p for p in [*model.encoder.parameters(), *head.parameters()] if p.requires_grad]
    opt = torch.optim.Adam(params, lr=float(opts.lr))
    bs = min(int(opts.batch_size), len(train_idx))

    aug = torch.Generator().manual_seed(seed + 1)  # the shifts: deterministic for a seed

    def loss_of(idx: torch.Tensor) -> torch.Tensor:
        batch = shift_images(obs_tree.take(prep, idx), keys, pad, aug)
        pred = seq_forward(head, model.encoder(batch))
        return (pred - target[idx]).square().sum(-1)

    def held_out() -> dict[str, float]:
        if not n_val:
            return {}
        with torch.no_grad():
            pred = seq_forward(head, model.encoder(obs_tree.take(prep, val_idx)))
            err = ((pred[:, :3] - target[val_idx, :3]) * scale[:3]).norm(dim=-1)  # in the entry's units
            loss = (pred - target[val_idx]).square().sum(-1).mean()
        return {
            "val_error_m": float(err.median()),
            "val_within_2cm": float((err < 0.02).float().mean()),
            "val_loss": float(loss),
        }

    model.train()
    epochs = int(opts.epochs)
    step, total_steps = 0, max(1, epochs * (len(train_idx) // bs))
    for epoch in range(epochs):
        order = train_idx[torch.randperm(len(train_idx), generator=gen)]
        total = 0.0
        for b in range(0, len(order) - bs + 1, bs):
            loss = loss_of(order[b : b + bs]).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            for group in opt.param_groups:  # cosine decay to 0 over the warm start
                group["lr"] = 0.5 * float(opts.lr) * (1.0 + math.cos(math.pi * step / total_steps))
            opt.step()
            step += 1
            total += float(loss.detach()) * bs
        if say is not None and (epoch + 1 == epochs or (epoch + 1) % max(1, epochs // 5) == 0):
            ho = held_out()
            where = f", held-out median error {100 * ho['val_error_m']:.1f} cm" if ho else ""
            say(f"warm start: epoch {epoch + 1}/{epochs}, loss {total / max(1, len(order)):.5f}{where}")
    return {**held_out(), "fit_s": time.perf_counter() - t0}


def warm_start_policy(
    spec: Mapping[str, Any],
    env_cfg: Any,
    opts: Any,
    seed: int,
    run_dir: Path | None = None,
    say: Say | None = None,
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The whole warm start (see the module docstring) for the policy of ``spec``: its state
    dict, to start RL from, and a record for ``summary.json`` (frames, scenes, times, the
    held-out error). With ``run_dir`` both are also written to ``run_dir/warm_start.safetensors``
    (atomically; ``spec``, ``state_dict`` and the env record as in ``policy.safetensors``, and
    ``record``). Progress goes
    to ``say`` (default: the ``rlinf.train`` log, where a run's other messages go)."""
    if say is None:
        say = logging.getLogger("rlinf.train").warning
    raw, scenes, record = collect_frames(env_cfg, opts, seed + SEED_OFFSET)
    say(
        f"warm start: {record['frames']} frames from {record['scenes']} scenes in {record['collect_s']:.0f} s"
    )
    rng = torch.get_rng_state()
    torch.manual_seed(seed + SEED_OFFSET)
    try:
        model = build_policy(spec)
        record.update(fit_perception(model, raw, opts, seed, say, scenes))
    finally:
        torch.set_rng_state(rng)  # RL's own initialisation stays what it was without a warm start
    state = model.state_dict()
    record = {k: round(v, 4) if isinstance(v, float) else v for k, v in record.items()}
    if run_dir is not None:
        from rlinf_algos.run_files import WARM_START, write_state
        from rlinf_algos.rundir import env_record

        spec = {k: v for k, v in spec.items() if k != "num_slots"}
        saved = {**env_record(env_cfg), "spec": spec, "state_dict": state, "record": record}
        write_state(saved, Path(run_dir) / WARM_START)
    return state, record
