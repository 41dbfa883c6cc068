"""Saved policies: load ``policy.safetensors`` and evaluate it in the env it was trained on
(``rlinf eval``). Nothing is loaded with pickle (:mod:`rlinf_algos.run_files`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlinf_algos.envs import batch_obs, open_vector_env
from rlinf_algos.models import build_policy
from rlinf_algos.run_files import POLICY, UnsafeStateFile, policy_file, read_state
from rlinf_algos.safe_state import StateFileError
from rlinf_core.errors import RlinfError

__all__ = [
    "check_run_code",
    "evaluate_policy",
    "load_policy",
    "play_episodes",
    "sample_action",
    "summarize_episodes",
]


def load_policy(path: Path) -> tuple[torch.nn.Module, dict[str, Any]]:
    """Rebuild the policy saved as ``policy.safetensors`` (or ``warm_start.safetensors``, or an
    earlier version's ``.pt`` that holds only tensors and plain data) by a run: ``(module,
    record)``; the module's ``predict(raw_obs, deterministic)`` maps a batch of raw observations
    (``[B, D]``, or a dict of arrays) to actions. A path to a run directory reads its policy.

    Raises:
        RlinfError: no file, a damaged one, or one that is not a policy (one line, naming it);
            :class:`~rlinf_algos.run_files.UnsafeStateFile` for a legacy pickle that names more.
    """
    path = Path(path)
    if path.is_dir():
        path = policy_file(path)
    if not path.is_file():
        raise RlinfError(f"no saved policy at {path} (a finished or interrupted run writes RUN_DIR/{POLICY})")
    redo = f"train again, or evaluate another run's {POLICY}"
    try:
        record = read_state(path)
    except UnsafeStateFile:
        raise
    except StateFileError as err:  # says which file, and how it is damaged
        raise RlinfError(f"{err}: not a policy rlinf can read; {redo}") from None
    except Exception as err:  # a truncated file, a zero-byte file, another format
        raise RlinfError(
            f"{path} cannot be loaded ({_why(err)}): the file is damaged or not a policy; {redo}"
        ) from None
    if not isinstance(record, dict) or not isinstance(record.get("spec"), dict) or "state_dict" not in record:
        raise RlinfError(
            f"{path} is not a policy saved by `rlinf train` (no spec and state_dict in it); {redo}"
        )
    try:
        module = build_policy(dict(record["spec"]))
        module.load_state_dict(record["state_dict"])
    except RlinfError as err:
        raise RlinfError(f"{path}: {err}") from None
    except Exception as err:  # weights that do not fit the spec
        raise RlinfError(f"{path}: its weights do not fit its network ({_why(err)}); {redo}") from None
    module.eval()
    return module, record


def check_run_code(path: Path, record: dict[str, Any], *, trust: bool = False) -> None:
    """Refuse to build the env of the saved policy ``path`` (its ``record``) when it, or its run's
    ``config.yaml``, names code no installed plugin provides (:mod:`rlinf_algos.code_refs`)."""
    from rlinf_algos.code_refs import check_references, record_references, run_config_references

    if trust:
        return
    run_dir = path if path.is_dir() else path.parent
    refs = run_config_references(run_dir) + record_references(record, f"{path.name} metadata")
    check_references(refs, f"evaluating {run_dir}", trust=trust)


def _why(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}".splitlines()[0]
    return text if len(text) <= 160 else text[:157] + "..."


def _success_of(info: dict[str, Any], i: int) -> bool | None:
    """``info["success"]`` (or gymnasium-robotics' ``is_success``) of sub-env ``i``; ``None``
    when the env does not report it."""
    for key in ("success", "is_success"):
        if key in info and info.get(f"_{key}", np.ones(i + 1, bool))[i]:
            return bool(info[key][i])
    return None


def _frame(obs: Any, i: int) -> np.ndarray | None:
    return np.asarray(obs["image"][i]) if isinstance(obs, dict) and "image" in obs else None


def evaluate_policy(
    path: Path,
    episodes: int = 10,
    seed: int = 10_000,
    num_envs: int = 8,
    deterministic: bool = True,
    video_dir: Path | None = None,
    *,
    trust: bool = False,
) -> dict[str, Any]:
    """Run the saved policy for ``episodes`` whole episodes in the env it was trained on (its id,
    ``env.kwargs``, time limit and observation mode). Episode ``i`` starts from a reset with seed
    ``seed + i``, so the same call gives the same numbers (stochastic actions too: their
    generator is seeded with ``seed``).

    Returns ``episodes``, ``seed``, ``return`` / ``length`` (``mean``, ``std``),
    ``success_once`` (the fraction of episodes where ``info["success"]`` — or ``is_success`` —
    was true at some step) and ``success_at_end`` (true at the last step), ``None`` for envs that
    report no success; ``per_instruction`` (the same, by the ``instruction`` of the first
    observation, for envs that give one) and ``per_episode`` (each episode's seed, instruction,
    return, length, successes, and video file); and, as before, ``mean``, ``std``, ``returns``
    and ``success_rate`` (= ``success_at_end``). ``video_dir``: write one video per episode
    (:func:`~rlinf_algos.video.write_video`: MP4 with an ffmpeg encoder, else GIF) of the
    ``image`` observations, or of the env's own rendering for envs without images.

    ``trust``: import the code the run names (a ``module:Env-vN`` id, ``env.wrappers``) even
    where no installed plugin provides it; off, such a run is refused
    (:class:`~rlinf_algos.code_refs.UntrustedCode`, naming each reference)."""
    if episodes < 1:
        raise ValueError("evaluate_policy: episodes must be at least 1")
    module, record = load_policy(path)
    check_run_code(Path(path), record, trust=trust)
    if not isinstance(record.get("env_id"), str):
        raise RlinfError(
            f"{path} does not name the env it was trained in (no env_id in it): it cannot be evaluated"
        )
    n = max(1, min(num_envs, episodes))
    obs_mode = record.get("obs_mode", "state")
    env_kwargs = dict(record.get("env_kwargs") or {})
    render = False
    timeout_s = float(record.get("env_timeout_s") or 60.0)  # env.timeout_s of the run
    envs, obs = open_vector_env(
        record["env_id"],
        n,
        seed,
        env_kwargs=env_kwargs,
        max_episode_steps=record.get("max_episode_steps"),
        obs_mode=obs_mode,
        image_size=tuple(record.get("image_size") or (64, 64)),
        wrappers=record.get("env_wrappers"),
        family=record.get("env_family") or "gymnasium",
        options=record.get("env_options") or {},
        timeout_s=timeout_s,
    )
    if video_dir is not None and _frame(batch_obs(obs), 0) is None:
        envs.close()  # no images to show: build it again, rendering
        from rlinf_algos.pixels import pixel_env_kwargs

        env_kwargs = {**pixel_env_kwargs(record["env_id"], (240, 320)), **env_kwargs}
        envs, obs = open_vector_env(
            record["env_id"],
            n,
            seed,
            env_kwargs=env_kwargs,
            max_episode_steps=record.get("max_episode_steps"),
            wrappers=record.get("env_wrappers"),
            timeout_s=timeout_s,
        )
        render = True
    generator = torch.Generator().manual_seed(seed)

    def act(obs: Any) -> np.ndarray:
        if deterministic:
            return module.predict(obs, True).numpy()  # type: ignore[operator]
        return sample_action(module, obs, generator)

    try:
        with torch.no_grad(), torch.random.fork_rng():
            torch.manual_seed(seed)  # SAC's actor samples from torch's global generator
            per_episode = play_episodes(
                envs, act, [seed + i for i in range(episodes)], video=video_dir is not None, render=render
            )
    finally:
        envs.close()
    if video_dir is not None:
        from rlinf_algos.video import episode_video_name, write_video

        fps = int((getattr(envs, "metadata", None) or {}).get("render_fps") or 10)
        for ep in per_episode:
            name = episode_video_name(ep["episode"], ep["seed"], ep["instruction"])
            ep["video"] = str(write_video(Path(video_dir) / name, ep.pop("frames"), fps=fps))
    for ep in per_episode:
        ep.pop("frames", None)
    return summarize_episodes(per_episode, seed)


def play_episodes(
    envs: Any,
    act: Any,
    seeds: list[int],
    *,
    inits: list[int] | None = None,
    video: bool = False,
    render: bool = False,
) -> list[dict[str, Any]]:
    """Play one whole episode per entry of ``seeds`` in the vector env ``envs`` (``SAME_STEP``
    autoreset), ``envs.num_envs`` at a time: episode ``i`` starts from a reset with seed
    ``seeds[i]`` (and, for a family with fixed initial states, ``options={"init": ...}`` with
    ``inits[i]``); ``act(obs)`` maps a batch of observations to actions. Returns each episode's
    record: ``episode``, ``seed``, ``init``, ``instruction``, ``return``, ``length``,
    ``success_once`` / ``success_at_end`` (``None`` for envs that report no success) and, with
    ``video``, its ``frames`` (the ``image`` observations, or ``envs.render()`` with ``render``)."""
    n = envs.num_envs
    act_low = np.asarray(envs.single_action_space.low, np.float32)
    act_high = np.asarray(envs.single_action_space.high, np.float32)
    per_episode: list[dict[str, Any]] = []
    for first in range(0, len(seeds), n):
        m = min(n, len(seeds) - first)
        batch = [seeds[min(first + j, len(seeds) - 1)] for j in range(n)]
        options = None
        if inits is not None:
            options = {"init": [inits[min(first + j, len(inits) - 1)] for j in range(n)]}
        obs = batch_obs(envs.reset(seed=batch, options=options)[0])
        eps = [
            {
                "episode": first + j,
                "seed": batch[j],
                "init": None if options is None else options["init"][j],
                "instruction": str(obs["instruction"][j])
                if isinstance(obs, dict) and "instruction" in obs
                else None,
                "return": 0.0,
                "length": 0,
                "success_once": None,
                "success_at_end": None,
                "frames": [],
            }
            for j in range(m)
        ]
        live = np.zeros(n, bool)
        live[:m] = True
        while live.any():
            if video:
                frames = envs.render() if render else None
                for j in np.flatnonzero(live):
                    eps[j]["frames"].append(frames[j] if render else _frame(obs, j))
            actions = np.clip(np.asarray(act(obs), np.float32), act_low, act_high)
            nxt, rew, term, trunc, info = envs.step(actions)
            nxt = batch_obs(nxt)
            done = np.asarray(term) | np.asarray(trunc)
            final = info.get("final_info") or {}
            for j in np.flatnonzero(live):
                ep = eps[j]
                ep["return"] += float(rew[j])
                ep["length"] += 1
                ok = _success_of(final if done[j] else info, j)
                if ok is not None:
                    ep["success_once"] = bool(ep["success_once"]) or ok
                    ep["success_at_end"] = ok
                if done[j]:
                    live[j] = False
                    if video and not render:
                        ep["frames"].append(np.asarray(info["final_obs"][j]["image"]))
            obs = nxt
        per_episode.extend(eps)
    return per_episode


def sample_action(module: Any, obs: Any, generator: torch.Generator) -> np.ndarray:
    """A stochastic action of a Gaussian actor-critic (or SAC's actor), seeded."""
    if hasattr(module, "action_mean"):
        prepared = module.normalize(obs)
        mean = module.action_mean(prepared)
        noise = torch.randn(mean.shape, generator=generator, device=generator.device)
        return (mean + noise * module.action_log_std().exp()).numpy()
    return module.predict(obs, deterministic=False).numpy()


def _rate(values: list[bool | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.mean(known)) if known and len(known) == len(values) else None


def _stats(eps: list[dict[str, Any]]) -> dict[str, Any]:
    returns = [e["return"] for e in eps]
    lengths = [e["length"] for e in eps]
    return {
        "episodes": len(eps),
        "return": {"mean": float(np.mean(returns)), "std": float(np.std(returns))},
        "length": {"mean": float(np.mean(lengths)), "std": float(np.std(lengths))},
        "success_once": _rate([e["success_once"] for e in eps]),
        "success_at_end": _rate([e["success_at_end"] for e in eps]),
    }


def summarize_episodes(per_episode: list[dict[str, Any]], seed: int) -> dict[str, Any]:
    """The result of :func:`evaluate_policy` from its episode records."""
    out = {"seed": seed, **_stats(per_episode)}
    by: dict[str, list[dict[str, Any]]] = {}
    for ep in per_episode:
        if ep["instruction"] is not None:
            by.setdefault(ep["instruction"], []).append(ep)
    out["per_instruction"] = {k: _stats(v) for k, v in sorted(by.items())}
    out["per_episode"] = per_episode
    # the fields of earlier versions
    out["mean"], out["std"] = out["return"]["mean"], out["return"]["std"]
    out["returns"] = [e["return"] for e in per_episode]
    out["success_rate"] = out["success_at_end"]
    return out
