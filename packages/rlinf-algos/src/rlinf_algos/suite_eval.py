"""Suite evaluation (``rlinf eval --suite FAMILY:SUITE``): a policy on every task of a family's
suite, each task from its fixed initial states, with a per-task success vector.

Episode ``e`` of a task starts from the task's fixed initial state ``e % init_states`` (for
families that have them: MetaWorld's 50 goal variations, LIBERO's init states) and a reset with
seed ``seed + e``, so the same command gives the same numbers on the same machine. Each task's
``success_once`` (success at some step) and ``success_at_end`` (at the last step) come with
their 95 % Wilson score interval and the episode count; the suite's mean is the mean over tasks,
its interval the Wilson interval of all episodes pooled. The JSON records what produced it: the
policy file and its SHA-256, the command's settings and the versions of rlinf-algos and the
simulator's interpreter.

The policy is a run's saved policy, or ``expert`` (the family's scripted expert, where it has
one: MetaWorld's) or ``random`` (uniform actions, seeded), as baselines.
"""

from __future__ import annotations

import hashlib
import json
import math
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from rlinf_core.errors import ConfigError, RlinfError

__all__ = ["evaluate_suite", "parse_suite", "wilson_interval"]

BASELINES = ("expert", "random")
"""Policies ``rlinf eval --suite`` takes by name instead of a run directory."""


def wilson_interval(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (95 % by default):
    ``(p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)`` with ``p = successes / n``
    (Wilson 1927; Brown, Cai & DasGupta 2001 recommend it over the normal interval for small
    ``n`` or ``p`` near 0 or 1). ``(0, 1)`` for ``n = 0``."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def parse_suite(text: str) -> tuple[str, str]:
    """``FAMILY:SUITE`` (``metaworld:MT10``, ``libero:libero_spatial``, ``maniskill:PushCube-v1``)
    as ``(family, suite)``; a suite may also be one task."""
    family, sep, suite = text.partition(":")
    if not sep or not family or not suite:
        raise ConfigError(
            f"{text!r} is not FAMILY:SUITE (e.g. metaworld:MT10, metaworld:reach-v3, libero:libero_spatial)",
            path="--suite",
        )
    return family, suite


def _rate(eps: list[dict[str, Any]], key: str) -> dict[str, Any] | None:
    known = [bool(e[key]) for e in eps if e[key] is not None]
    if not known or len(known) != len(eps):
        return None
    k = sum(known)
    lo, hi = wilson_interval(k, len(known))
    return {"rate": k / len(known), "successes": k, "episodes": len(known), "ci95": [lo, hi]}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def evaluate_suite(
    policy: str | Path,
    suite: str,
    *,
    episodes_per_task: int = 50,
    seed: int = 10_000,
    num_envs: int = 10,
    deterministic: bool = True,
    video_dir: Path | None = None,
    python: str | None = None,
    timeout_s: float = 120.0,
    say: Any = None,
    torch_threads: int = 1,
) -> dict[str, Any]:
    """Evaluate ``policy`` (a run directory, a policy file, or ``expert`` / ``random``) on every
    task of ``suite`` (``FAMILY:SUITE``) for ``episodes_per_task`` episodes each; see the module
    docstring. ``num_envs`` copies run at once; ``video_dir`` gets one video per episode
    (``<task>/...``). ``torch_threads``: torch's intra-op threads while evaluating (as
    ``runner.torch_threads``, 1 by default: a policy's forward pass is small, and more threads than
    cores cost minutes per task on a busy machine). Returns the result (``tasks``: one record per
    task, ``mean``, ``pooled``, ``provenance``)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, int(torch_threads)))
    try:
        return _evaluate_suite(
            policy, suite, episodes_per_task, seed, num_envs, deterministic, video_dir, python, timeout_s, say
        )
    finally:
        torch.set_num_threads(threads)


def _evaluate_suite(
    policy: str | Path,
    suite: str,
    episodes_per_task: int,
    seed: int,
    num_envs: int,
    deterministic: bool,
    video_dir: Path | None,
    python: str | None,
    timeout_s: float,
    say: Any,
) -> dict[str, Any]:
    import torch

    from rlinf_algos.envs import open_vector_env
    from rlinf_algos.evaluate import load_policy, play_episodes, sample_action
    from rlinf_algos.families import EnvRequest, get_family

    if episodes_per_task < 1:
        raise ConfigError("must be at least 1", path="--episodes-per-task")
    family_name, suite_name = parse_suite(suite)
    family = get_family(family_name, path="--suite")
    known = family.suites()
    request = EnvRequest(id=suite_name)
    problems = [p for p in family.problems({"id": suite_name, "python": python}) if p.path == "env.id"]
    if problems:
        raise ConfigError(f"{problems[0].message}", path="--suite")
    tasks = list(family.tasks(request))
    record: dict[str, Any] = {}
    module = None
    policy_name = str(policy)
    if policy_name == "expert" and not family.scripted_expert:
        raise ConfigError(
            f"the {family.PLUGIN_NAME} family has no scripted expert: evaluate a run directory or `random`",
            path="RUN_DIR",
        )
    if policy_name not in BASELINES:
        module, record = load_policy(Path(policy))
        if record.get("env_family", "gymnasium") != family.PLUGIN_NAME:
            raise RlinfError(
                f"{policy} was trained in the {record.get('env_family', 'gymnasium')!r} family; "
                f"--suite {suite} evaluates in {family.PLUGIN_NAME!r}"
            )
    obs_mode = record.get("obs_mode", "state")
    image_size = tuple(record.get("image_size") or (64, 64))
    started = time.time()
    results = []
    all_eps: list[dict[str, Any]] = []
    for t, task in enumerate(tasks):
        n = max(1, min(num_envs, episodes_per_task))
        envs, _ = open_vector_env(
            suite_name,  # the suite (a policy trained on it sees its task one-hot), each slot this task
            n,
            seed,
            max_episode_steps=record.get("max_episode_steps"),
            obs_mode=obs_mode,
            image_size=image_size,
            family=family.PLUGIN_NAME,
            options=record.get("env_options") or {},
            python=python,
            timeout_s=timeout_s,
            tasks=[task.name] * n,
            render=video_dir is not None and obs_mode == "state",
        )
        gen = torch.Generator().manual_seed(seed + t)
        rng = np.random.default_rng(seed + t)

        def act(obs: Any, envs: Any = envs, gen: Any = gen, rng: Any = rng) -> np.ndarray:
            if policy_name == "expert":
                return envs.unwrapped.expert_actions()
            if policy_name == "random":
                low, high = envs.single_action_space.low, envs.single_action_space.high
                return rng.uniform(low, high, size=(envs.num_envs, len(low))).astype(np.float32)
            with torch.no_grad():
                if deterministic:
                    return module.predict(obs, True).numpy()  # type: ignore[union-attr]
                return sample_action(module, obs, gen)

        seeds = [seed + e for e in range(episodes_per_task)]
        inits = [e % task.init_states for e in range(episodes_per_task)] if task.init_states else None
        try:
            eps = play_episodes(
                envs, act, seeds, inits=inits, video=video_dir is not None, render=obs_mode == "state"
            )
        finally:
            envs.close()
        if video_dir is not None:
            from rlinf_algos.video import write_video

            for ep in eps:
                name = f"{task.name}/episode{ep['episode']:03d}_init{ep['init']}_seed{ep['seed']}"
                ep["video"] = str(write_video(Path(video_dir) / name, ep.pop("frames"), fps=20))
        for ep in eps:
            ep.pop("frames", None)
            ep["task"] = task.name
        all_eps.extend(eps)
        row = {
            "task": task.name,
            "instruction": task.instruction,
            "episodes": len(eps),
            "success_once": _rate(eps, "success_once"),
            "success_at_end": _rate(eps, "success_at_end"),
            "return": float(np.mean([e["return"] for e in eps])),
            "length": float(np.mean([e["length"] for e in eps])),
        }
        results.append(row)
        if say is not None:
            say(_task_line(row))
    mean = {}
    for key in ("success_once", "success_at_end"):
        rates = [r[key]["rate"] for r in results if r[key] is not None]
        mean[key] = float(np.mean(rates)) if rates and len(rates) == len(results) else None
    out = {
        "suite": f"{family.PLUGIN_NAME}:{suite_name}",
        "suite_tasks": list(known.get(suite_name, [suite_name])),
        "policy": policy_name,
        "episodes_per_task": episodes_per_task,
        "seed": seed,
        "deterministic": deterministic,
        "tasks": results,
        "mean": mean,
        "pooled": {k: _rate(all_eps, k) for k in ("success_once", "success_at_end")},
        "per_episode": all_eps,
        "provenance": _provenance(family, policy, python, started),
    }
    return out


def _task_line(row: dict[str, Any]) -> str:
    def part(key: str) -> str:
        r = row[key]
        if r is None:
            return f"{key} -"
        return f"{key} {r['rate']:.2f} [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}]"

    return f"{row['task']}: {part('success_at_end')}, {part('success_once')}, {row['episodes']} episodes"


def summary_lines(result: dict[str, Any]) -> list[str]:
    """The result as lines for a terminal: one per task, then the mean."""
    lines = [_task_line(r) for r in result["tasks"]]
    mean, pooled = result["mean"], result["pooled"]
    for key in ("success_at_end", "success_once"):
        if mean[key] is not None and pooled[key] is not None:
            lo, hi = pooled[key]["ci95"]
            lines.append(
                f"mean {key} over {len(result['tasks'])} tasks: {mean[key]:.3f} "
                f"(pooled {pooled[key]['successes']}/{pooled[key]['episodes']}, 95% Wilson [{lo:.3f}, {hi:.3f}])"
            )
    return lines


def _provenance(family: Any, policy: str | Path, python: str | None, started: float) -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        algos = version("rlinf-algos")
    except PackageNotFoundError:
        algos = None
    out: dict[str, Any] = {
        "rlinf_algos": algos,
        "family": family.PLUGIN_NAME,
        "machine": platform.machine(),
        "python": platform.python_version(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "seconds": round(time.time() - started, 1),
    }
    if family.interpreter is not None:
        out["simulator_requirements"] = list(family.interpreter.requirements)
    if str(policy) not in BASELINES:
        from rlinf_algos.run_files import policy_file

        path = Path(policy)
        path = policy_file(path) if path.is_dir() else path
        out["policy_file"] = str(path)
        out["policy_sha256"] = _sha256(path)
    return out


def write_result(path: Path, result: dict[str, Any]) -> None:
    """``result`` as JSON at ``path`` (atomic)."""
    from rlinf_core.io import atomic_write_text

    atomic_write_text(Path(path), json.dumps(result, indent=2) + "\n")
