"""Demonstration data sets: ``rlinf demos record`` plays a family's scripted expert (MetaWorld's
``metaworld.policies``) into a data set a behaviour-cloning warm start (``model.bc``,
:mod:`rlinf_algos.bc`) and other tools read.

The layout is LeRobot's (v2.1) where it fits, so LeRobot's loaders and viewers read it::

    DIR/meta/info.json                              features, fps, counts, what recorded it
    DIR/meta/tasks.jsonl                            {"task_index", "task"} (the instruction), one a line
    DIR/meta/episodes.jsonl                         {"episode_index", "tasks", "length", "success", "success_once", ...}
    DIR/data/chunk-000/episode_000000.parquet       one row a step

Columns: ``observation.state`` (float32 list), ``observation.image`` (PNG bytes, pixel obs modes;
LeRobot's image struct ``{bytes, path}``), ``action`` (float32 list), ``episode_index``,
``frame_index``, ``timestamp``, ``task_index``, ``index``, ``next.reward``, ``next.done``,
``next.success``, and rlinf's ``task`` (the family's task name) and ``init`` (its fixed initial
state). Episode ``e`` of a task starts from the task's fixed initial state ``e`` with reset seed
``seed + e``. The folder is written under a temporary name and renamed when complete.
"""

from __future__ import annotations

import io
import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from rlinf_core.errors import ConfigError, RlinfError

__all__ = ["KEEP", "load_demos", "record_demos", "steps_until_solved", "until_solved"]

CODEBASE_VERSION = "v2.1"
KEEP = ("end", "once", "all")
"""``record_demos(keep=...)``: the episodes kept (successful at their end, at some step, or all)."""


def _png(frame: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.asarray(frame, np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def record_demos(
    suite: str,
    out: Path,
    *,
    episodes_per_task: int = 10,
    seed: int = 0,
    num_envs: int = 10,
    obs_mode: str = "state",
    image_size: tuple[int, int] = (64, 64),
    noise: float = 0.0,
    keep: str = "end",
    max_episode_steps: int | None = None,
    python: str | None = None,
    say: Any = None,
) -> dict[str, Any]:
    """Record ``episodes_per_task`` expert episodes of every task of ``suite`` (``FAMILY:SUITE``)
    into the folder ``out`` (see the module docstring); ``noise``: the standard deviation of
    Gaussian noise added to the expert's actions (seeded); ``keep``: which episodes are kept,
    ``end`` those that succeed at their last step, ``once`` those that succeed at some step (a
    scripted expert that solves the task and then overshoots: MetaWorld's door-open-v3 expert
    opens the door past its goal in every episode), ``all`` every one. Returns
    ``meta/info.json``'s content."""
    if keep not in KEEP:
        raise RlinfError(f"keep={keep!r}: one of {', '.join(KEEP)}")
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rlinf_algos.envs import batch_obs, open_vector_env
    from rlinf_algos.families import EnvRequest, get_family
    from rlinf_algos.suite_eval import parse_suite

    family_name, suite_name = parse_suite(suite)
    family = get_family(family_name, path="SUITE")
    problems = [p for p in family.problems({"id": suite_name}) if p.path == "env.id"]
    if problems:
        raise ConfigError(problems[0].message, path="SUITE")
    out = Path(out)
    if out.exists():
        raise RlinfError(f"{out} exists: record into a new folder (nothing is overwritten)")
    tasks = list(family.tasks(EnvRequest(id=suite_name)))
    tmp = out.with_name(f".{out.name}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "meta").mkdir(parents=True)
    (tmp / "data" / "chunk-000").mkdir(parents=True)
    rng = np.random.default_rng(seed)
    episodes_meta: list[dict[str, Any]] = []
    index = 0
    kept = tried = 0
    state_dim = image_shape = act_dim = None
    fps = 20
    started = time.monotonic()
    try:
        for t_index, task in enumerate(tasks):
            n = max(1, min(num_envs, episodes_per_task))
            envs, _ = open_vector_env(
                suite_name,
                n,
                seed,
                obs_mode=obs_mode,
                image_size=image_size,
                max_episode_steps=max_episode_steps,
                family=family.PLUGIN_NAME,
                python=python,
                tasks=[task.name] * n,
            )
            fps = int((getattr(envs, "metadata", None) or {}).get("render_fps") or fps)
            expert = envs.unwrapped
            if not hasattr(expert, "expert_actions"):
                envs.close()
                raise RlinfError(f"the {family.PLUGIN_NAME} family has no scripted expert to record")
            try:
                for first in range(0, episodes_per_task, n):
                    m = min(n, episodes_per_task - first)
                    eps = [first + j for j in range(n)]
                    inits = [e % task.init_states if task.init_states else None for e in eps]
                    obs = batch_obs(
                        envs.reset(
                            seed=[seed + e for e in eps],
                            options={"init": inits} if task.init_states else None,
                        )[0]
                    )
                    steps: list[list[dict[str, Any]]] = [[] for _ in range(n)]
                    live = np.zeros(n, bool)
                    live[:m] = True
                    success = [False] * n
                    once = [False] * n
                    while live.any():
                        act = np.asarray(expert.expert_actions(), np.float32)
                        if noise > 0:
                            act = act + rng.normal(0.0, noise, act.shape).astype(np.float32)
                        low, high = envs.single_action_space.low, envs.single_action_space.high
                        act = np.clip(act, low, high)
                        nxt, rew, term, trunc, info = envs.step(act)
                        nxt = batch_obs(nxt)
                        done = np.asarray(term) | np.asarray(trunc)
                        final = info.get("final_info") or {}
                        for j in np.flatnonzero(live):
                            ok = bool((final if done[j] else info).get("success", np.zeros(n, bool))[j])
                            state = obs["state"][j] if isinstance(obs, dict) else obs[j]
                            row = {
                                "observation.state": np.asarray(state, np.float32).tolist()
                                if state is not None
                                else None,
                                "action": act[j].tolist(),
                                "next.reward": float(rew[j]),
                                "next.done": bool(done[j]),
                                "next.success": ok,
                            }
                            if isinstance(obs, dict) and "image" in obs:
                                row["observation.image"] = {"bytes": _png(obs["image"][j]), "path": None}
                                image_shape = list(obs["image"][j].shape)
                            steps[j].append(row)
                            once[j] = once[j] or ok
                            if done[j]:
                                live[j] = False
                                success[j] = ok
                        obs = nxt
                    for j in range(m):
                        tried += 1
                        if (keep == "end" and not success[j]) or (keep == "once" and not once[j]):
                            continue
                        e_index = len(episodes_meta)
                        rows = steps[j]
                        table = {k: [r[k] for r in rows] for k in rows[0] if rows[0][k] is not None}
                        length = len(rows)
                        table.update(
                            episode_index=[e_index] * length,
                            frame_index=list(range(length)),
                            timestamp=[k / fps for k in range(length)],
                            task_index=[t_index] * length,
                            index=list(range(index, index + length)),
                            task=[task.name] * length,
                            init=[inits[j]] * length,
                        )
                        if table.get("observation.state"):
                            state_dim = len(table["observation.state"][0])
                        act_dim = len(rows[0]["action"])
                        pq.write_table(
                            pa.table(table), tmp / "data" / "chunk-000" / f"episode_{e_index:06d}.parquet"
                        )
                        episodes_meta.append(
                            {
                                "episode_index": e_index,
                                "tasks": [task.instruction or task.name],
                                "length": length,
                                "success": success[j],
                                "success_once": once[j],
                                "task": task.name,
                                "init": inits[j],
                            }
                        )
                        index += length
                        kept += 1
            finally:
                envs.close()
            if say is not None:
                say(f"{task.name}: {sum(1 for e in episodes_meta if e['task'] == task.name)} episodes kept")
        if not episodes_meta:
            raise RlinfError(
                f"no episode of {suite} succeeded{' at its end' if keep == 'end' else ''}, so nothing was "
                f"recorded (--keep {'once or ' if keep == 'end' else ''}all keeps more)"
            )
        features: dict[str, Any] = {
            "action": {"dtype": "float32", "shape": [act_dim], "names": None},
            "episode_index": {"dtype": "int64", "shape": [1], "names": None},
            "frame_index": {"dtype": "int64", "shape": [1], "names": None},
            "timestamp": {"dtype": "float32", "shape": [1], "names": None},
            "task_index": {"dtype": "int64", "shape": [1], "names": None},
            "index": {"dtype": "int64", "shape": [1], "names": None},
            "next.reward": {"dtype": "float32", "shape": [1], "names": None},
            "next.done": {"dtype": "bool", "shape": [1], "names": None},
            "next.success": {"dtype": "bool", "shape": [1], "names": None},
        }
        if state_dim:
            features["observation.state"] = {"dtype": "float32", "shape": [state_dim], "names": None}
        if image_shape:
            features["observation.image"] = {
                "dtype": "image",
                "shape": image_shape,
                "names": ["height", "width", "channel"],
            }
        info = {
            "codebase_version": CODEBASE_VERSION,
            "robot_type": family.PLUGIN_NAME,
            "total_episodes": len(episodes_meta),
            "total_frames": index,
            "total_tasks": len(tasks),
            "total_chunks": 1,
            "chunks_size": 1000,
            "fps": fps,
            "splits": {"train": f"0:{len(episodes_meta)}"},
            "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
            "features": features,
            "rlinf": {
                "suite": f"{family.PLUGIN_NAME}:{suite_name}",
                "policy": "expert",
                "noise": noise,
                "seed": seed,
                "episodes_per_task": episodes_per_task,
                "episodes_tried": tried,
                "keep": keep,
                "obs_mode": obs_mode,
                "seconds": round(time.monotonic() - started, 1),
            },
        }
        (tmp / "meta" / "info.json").write_text(json.dumps(info, indent=2) + "\n")
        (tmp / "meta" / "tasks.jsonl").write_text(
            "".join(
                json.dumps({"task_index": i, "task": t.instruction or t.name}) + "\n"
                for i, t in enumerate(tasks)
            )
        )
        (tmp / "meta" / "episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes_meta))
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return info


def load_demos(path: Path, where: str = "model.bc.demos") -> dict[str, Any]:
    """A data set :func:`record_demos` wrote (or a LeRobot v2 folder with ``observation.state``
    and ``action``): ``state`` ``[N, D]`` float32, ``action`` ``[N, A]`` float32,
    ``episode_index`` ``[N]``, ``task`` (names), ``success`` ``[N]`` bool (``next.success``: the
    task is solved after the step; ``None`` when a file lacks the column), ``info``. A folder that is not one is a
    :class:`ConfigError` at ``where`` naming what is missing."""
    import pyarrow.parquet as pq

    path = Path(path)
    info_file = path / "meta" / "info.json"
    if not info_file.is_file():
        raise ConfigError(
            f"{str(path)!r} is no demonstration data set (no meta/info.json; `rlinf demos record` writes one)",
            path=where,
        )
    try:
        info = json.loads(info_file.read_text())
    except (OSError, ValueError) as err:
        raise ConfigError(f"{info_file}: not JSON ({err})", path=where) from None
    files = sorted((path / "data").glob("chunk-*/episode_*.parquet"))
    if not files:
        raise ConfigError(f"{str(path)!r} holds no data/chunk-*/episode_*.parquet", path=where)
    states, actions, episodes, tasks, solved = [], [], [], [], []
    for f in files:
        try:
            table = pq.read_table(f, columns=None).to_pydict()
        except Exception as err:
            raise ConfigError(
                f"{f}: cannot be read as parquet ({type(err).__name__}: {err})", path=where
            ) from None
        for col in ("observation.state", "action", "episode_index"):
            if col not in table:
                raise ConfigError(
                    f"{f}: no column {col!r} (behaviour cloning needs state and action)", path=where
                )
        states.append(np.asarray(table["observation.state"], np.float32))
        actions.append(np.asarray(table["action"], np.float32))
        episodes.append(np.asarray(table["episode_index"], np.int64))
        tasks.extend(table.get("task") or [""] * len(table["action"]))
        if solved is not None and "next.success" in table:
            solved.append(np.asarray(table["next.success"], bool))
        else:
            solved = None
    return {
        "state": np.concatenate(states),
        "action": np.concatenate(actions),
        "episode_index": np.concatenate(episodes),
        "task": tasks,
        "success": np.concatenate(solved) if solved is not None else None,
        "info": info,
    }


def until_solved(episodes: np.ndarray, success: np.ndarray) -> np.ndarray:
    """A mask over steps: each episode's steps up to and including the first whose
    ``success`` is true (every step of an episode never solved). Steps of one episode are
    contiguous and in order, as :func:`load_demos` returns them."""
    keep = np.ones(len(episodes), bool)
    starts = np.flatnonzero(np.r_[True, episodes[1:] != episodes[:-1]])
    for lo, hi in zip(starts, np.r_[starts[1:], len(episodes)], strict=True):
        hit = np.flatnonzero(success[lo:hi])
        if hit.size:
            keep[lo + hit[0] + 1 : hi] = False
    return keep


def steps_until_solved(data: dict[str, Any], demos: str, where: str) -> dict[str, Any]:
    """``data`` (:func:`load_demos`) with only each episode's steps up to the one that first
    solves its task (:func:`until_solved`): what an expert that solves and then overshoots
    (MetaWorld's door-open-v3) did before the overshoot. A data set without ``next.success`` is a
    :class:`ConfigError` at ``where`` (the option that asked, e.g. ``algorithm.bc_steps``)."""
    if data.get("success") is None:
        raise ConfigError(
            f"{where} until_solved reads each step's next.success, which {demos!r} lacks "
            f"(record it with `rlinf demos record`, or set {where}: all)",
            path=where,
        )
    keep = until_solved(data["episode_index"], data["success"])
    out = dict(data)
    for key in ("state", "action", "episode_index", "success"):
        out[key] = data[key][keep]
    out["task"] = np.asarray(data["task"], dtype=object)[keep].tolist()
    return out
