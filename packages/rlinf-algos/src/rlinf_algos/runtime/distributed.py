"""The training runner behind ``rlinf train``: the macro flow of DESIGN.md section 5 on workers.

Public entry points:

- :func:`run_training` takes a run configuration (a mapping, as loaded from YAML), validates all
  of it up front (every problem with its YAML path), starts the scheduler the ``runner`` section
  names through the plugin registry (``ray`` by default: an embedded Ray, or the cluster at
  ``RAY_ADDRESS``), runs the algorithm and returns its summary. ``rollout_only=True`` runs the env
  and rollout workers without learning (what ``benchmarks/ppo_throughput.py`` times).
- :func:`validate_run_config` is the up-front check alone.
- :func:`run_distributed` is what ``PPO.run`` / ``SAC.run`` / ``GRPO.run`` call with a started
  scheduler.

How an iteration flows (:class:`DistributedRun`): the driver calls ``EnvWorker.run`` and
``RolloutWorker.collect`` for iteration ``k`` and, at the same time, ``ActorWorker.train`` for
``k``; the actor waits for the batch (PPO) or learns from the transitions as they stream in
(SAC), or, for GRPO, the reward worker's advantages and the reference worker's log-probabilities
of whole episodes (``EnvWorker.run_episodes``). Iteration ``k + 1`` starts once ``k`` is collected and the weights it may use exist: with
``rollout.max_staleness: 1`` (the default) the rollout of ``k + 1`` overlaps the update on ``k``,
the policy is at most one version stale and the PPO ratio accounts for it.

Fault tolerance: env and rollout workers that die are restarted (``RayWorkerGroup.restart``); the
iteration they were in is aborted on every worker (their links break; an ``ABORT`` item on each
trajectory key of its *generation*), its partial batch is dropped and logged (``dropped_batches``,
``dropped_env_steps`` in the summary), the new worker pulls the newest weights, and the iteration
is run again under the next generation, so nothing of the lost batch is mixed in. The actor holds
the optimiser state and is not restarted: the run stops with the error and ``--resume`` continues
from the newest checkpoint.

Env and rollout workers exchange observations and actions over direct links (see
:mod:`rlinf_algos.workers`); the driver hands every env worker the rollout workers' link
addresses with each iteration (a restarted rollout worker listens on a new one) and a per-run
secret, created here, that the links are authenticated with.
"""

from __future__ import annotations

import asyncio
import collections
import json
import math
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rlinf_core.errors import ConfigError, ConfigProblem, RlinfError
from rlinf_core.io import atomic_write_text

__all__ = [
    "DistributedRun",
    "TrainingInterrupted",
    "default_run_dir",
    "run_distributed",
    "run_training",
    "validate_run_config",
]

ProgressFn = Callable[[dict[str, Any]], None]

LOCAL = "local"
"""``runner.scheduler: local`` trains in the rlinf process, without workers."""


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C ended a run. ``run_dir`` is its directory; ``checkpoint`` the checkpoint written on
    the way out (``None`` if training had not started or none could be written)."""

    def __init__(self, run_dir: Path, checkpoint: Path | None) -> None:
        super().__init__(f"interrupted: {run_dir}")
        self.run_dir, self.checkpoint = run_dir, checkpoint


# -- validation --------------------------------------------------------------------------------


def _count_processes(text: Any) -> int | None:
    """Processes a placement string asks for, when it says so without the inventory."""
    from rlinf_core.cluster import parse_placement

    try:
        parts = parse_placement(text)
    except ConfigError:
        return None
    count = 0
    for part in parts:
        if part.processes is not None:
            count = part.processes[1] + 1
        elif part.resources is not None:
            count += part.resources[1] - part.resources[0] + 1
        else:
            return None
    return count


def validate_run_config(data: Mapping[str, Any], host: Any = None) -> tuple[Any, Any, str]:
    """Check the whole run configuration before anything starts.

    Returns ``(algorithm_class, algorithm_config, scheduler_name)``; raises one
    :class:`ConfigError` listing every problem of every section with its YAML path.
    """
    from rlinf_core.config import validate_model
    from rlinf_core.plugins import load_plugins

    host = host or load_plugins()
    problems: list[ConfigProblem] = []
    algo_cls = algo_cfg = None
    section = data.get("algorithm")
    names = ", ".join(host.algorithms.names()) or "none (install rlinf-algos)"
    if section is None:
        problems.append(
            ConfigProblem("algorithm", f"missing section; it needs a `name` (registered: {names})")
        )
    elif not isinstance(section, Mapping):
        problems.append(ConfigProblem("algorithm", f"must be a mapping with a `name`, got {section!r}"))
    elif "name" not in section:
        problems.append(ConfigProblem("algorithm.name", f"missing; registered algorithms: {names}"))
    elif section["name"] not in host.algorithms:
        problems.append(
            ConfigProblem("algorithm.name", f"unknown algorithm {section['name']!r}; registered: {names}")
        )
    else:
        algo_cls = host.algorithms.get(section["name"])
        try:
            algo_cfg = validate_model(algo_cls.config_model, dict(section), "algorithm")
        except ConfigError as err:
            problems.extend(err.problems)
    if algo_cls is not None and hasattr(algo_cls, "run_config_problems"):
        problems.extend(algo_cls.run_config_problems(data))

    runner = data.get("runner") if isinstance(data.get("runner"), Mapping) else {}
    default = "ray" if getattr(algo_cls, "distributed", True) else LOCAL
    scheduler = runner.get("scheduler") or default
    if not isinstance(scheduler, str):
        scheduler = str(scheduler)
    if scheduler != LOCAL and scheduler not in host.schedulers:
        known = ", ".join([*host.schedulers.names(), LOCAL])
        problems.append(
            ConfigProblem("runner.scheduler", f"unknown scheduler {scheduler!r}; available: {known}")
        )
    if scheduler != LOCAL:
        problems.extend(_cluster_problems(data, algo_cls, host))
    if problems:
        raise ConfigError(problems)
    return algo_cls, algo_cfg, scheduler


def _cluster_problems(data: Mapping[str, Any], algo_cls: Any, host: Any) -> list[ConfigProblem]:
    from rlinf_core.cluster import resolve_cluster_partial

    cluster = data.get("cluster")
    if cluster is None:
        return [
            ConfigProblem(
                "cluster",
                "missing section; on one machine use `cluster: {num_nodes: 1, component_placement: "
                "{actor: {node_group: node, placement: 0}, ...}}` (see examples/quickstart.yaml), or set "
                "runner.scheduler: local",
            )
        ]
    _, problems = resolve_cluster_partial(cluster, host.hardware)
    problems = list(problems)
    placement = cluster.get("component_placement") if isinstance(cluster, Mapping) else None
    if algo_cls is not None and isinstance(placement, Mapping):
        placed = set()
        for key in placement:
            placed.update(x.strip() for x in str(key).split(","))
        missing = [c for c in _required_components(algo_cls) if c not in placed]
        if missing:
            problems.append(
                ConfigProblem(
                    "cluster.component_placement",
                    f"algorithm {algo_cls.PLUGIN_NAME!r} needs {', '.join(missing)} placed "
                    f"(it runs {', '.join(_required_components(algo_cls))})",
                )
            )
        for key, spec in placement.items():
            if "actor" in [x.strip() for x in str(key).split(",")] and getattr(
                algo_cls, "distributed", False
            ):
                text = spec.get("placement") if isinstance(spec, Mapping) else spec
                n = _count_processes(text)
                if n is not None and n != 1:
                    problems.append(
                        ConfigProblem(
                            f"cluster.component_placement.{key}.placement",
                            f"the {algo_cls.PLUGIN_NAME} actor (learner) runs as one process, got {n} "
                            f"from {text!r}; give it several accelerators with one process, e.g. '0-3:0'",
                        )
                    )
    return problems


def _required_components(algo_cls: Any) -> tuple[str, ...]:
    """The components an algorithm class says must be placed (``required_components``), checked
    only for classes that run on workers (``distributed = True``); others check their own."""
    if algo_cls is None or not getattr(algo_cls, "distributed", False):
        return ()
    return tuple(getattr(algo_cls, "required_components", getattr(algo_cls, "components", ())))


# -- the public entry point ----------------------------------------------------------------------


def default_run_dir(config_path: str | Path | None, root: str | Path = "runs") -> Path:
    """``runs/<config stem>-<YYYYmmdd-HHMMSS>`` (a suffix is added if it exists)."""
    stem = Path(config_path).stem if config_path else "run"
    base = Path(root) / f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    path, i = base, 1
    while path.exists():
        i += 1
        path = Path(f"{base}-{i}")
    return path


def _resolved(data: Mapping[str, Any], algo_cfg: Any) -> dict[str, Any]:
    out = dict(data)
    if algo_cfg is not None and hasattr(algo_cfg, "model_dump"):
        out["algorithm"] = algo_cfg.model_dump(mode="json")
    for name, model in _section_models().items():
        if isinstance(out.get(name), Mapping) or name in ("model", "rollout"):
            try:
                out[name] = model.model_validate(out.get(name) or {}).model_dump(mode="json")
            except Exception:  # another algorithm's section: keep it as written
                pass
    return out


def _section_models() -> dict[str, Any]:
    from rlinf_algos.algorithms import EnvConfig, ModelConfig, RolloutConfig, RunnerConfig

    return {"env": EnvConfig, "model": ModelConfig, "runner": RunnerConfig, "rollout": RolloutConfig}


def run_training(
    config: Mapping[str, Any],
    *,
    run_dir: str | Path | None = None,
    overrides: Iterable[str] = (),
    resume: bool = False,
    progress: ProgressFn | None = None,
    callbacks: Mapping[str, Callable[..., Any]] | None = None,
    rollout_only: bool = False,
    host: Any = None,
    scheduler: Any = None,
    config_path: str | Path | None = None,
    on_started: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """Validate ``config`` (with dotted ``overrides`` applied), start the scheduler it names,
    train, and return the summary (also in ``run_dir/summary.json``).

    Args:
        config: the run configuration (``cluster``, ``algorithm``, ``env``, ``model``,
            ``runner``, ``rollout`` sections).
        run_dir: where the run writes; default ``runs/<config stem>-<time>``. With ``resume`` it
            must hold a checkpoint.
        overrides: ``key.path=value`` strings (values parsed as YAML).
        resume: continue from the newest checkpoint of ``run_dir``.
        progress: called with every metrics row (a dict with ``step``, ``wall_s``,
            ``episode_return_mean``... and ``total_steps``).
        callbacks: ``{"on_iteration": fn(run, k)}`` hooks of the distributed runner (tests).
        rollout_only: run env and rollout workers only, no learning (throughput measurement).
        host: a :class:`~rlinf_core.plugins.PluginHost` (default: the installed plugins).
        scheduler: an already started scheduler to use (it is not shut down); default: the one
            ``runner.scheduler`` names, started here and shut down at the end.
        config_path: where ``config`` came from (names the default run directory).
        on_started: called once the scheduler has started, before training (``rlinf train``
            installs its SIGTERM handler there: ``ray.init`` replaces the process's handlers).
    """
    import yaml

    from rlinf_core.config import apply_overrides
    from rlinf_core.plugins import load_plugins

    host = host or load_plugins()
    data = apply_overrides(dict(config), list(overrides))
    algo_cls, algo_cfg, scheduler_name = validate_run_config(data, host)
    if run_dir is None:
        if resume:
            raise RlinfError("resume needs the run directory to continue (--resume RUN_DIR)")
        run_dir = default_run_dir(config_path)
    run_dir = Path(run_dir)
    if resume:
        from rlinf_algos.local_runner import latest_checkpoint

        if latest_checkpoint(run_dir) is None:
            raise RlinfError(f"nothing to resume in {run_dir}: no checkpoints/step_*.pt there")
    run_dir.mkdir(parents=True, exist_ok=True)
    resolved = _resolved(data, algo_cfg)
    if resume:
        _check_resume_config(run_dir / "config.yaml", resolved)
    _atomic_write(run_dir / "config.yaml", yaml.safe_dump(resolved, sort_keys=False))

    board = _Board(run_dir)
    total = _total_steps(resolved)

    def on_row(row: dict[str, Any]) -> None:
        board.add(row)
        if progress is not None:
            progress({**row, "total_steps": total})

    algo = algo_cls(algo_cfg)
    own = None
    if scheduler is None and scheduler_name != LOCAL:
        own = scheduler = host.schedulers.get(scheduler_name)(hardware=host)
        scheduler.start(data)
    if on_started is not None:
        on_started()
    kwargs: dict[str, Any] = {"resume": resume, "progress": on_row}
    if callbacks:
        kwargs["callbacks"] = callbacks
    if rollout_only:
        kwargs["rollout_only"] = True
    started = time.time()
    try:
        if _accepts(algo.run, kwargs):
            summary = algo.run(scheduler, data, run_dir, **kwargs)
        else:  # an algorithm class of another plugin with the plain Algorithm.run signature
            if resume or rollout_only:
                raise RlinfError(f"algorithm {algo_cls.PLUGIN_NAME!r} does not support resume/rollout-only")
            summary = algo.run(scheduler, data, run_dir)
    except TrainingInterrupted:
        raise
    except KeyboardInterrupt:
        raise TrainingInterrupted(run_dir, _interrupt_checkpoint(run_dir, started)) from None
    finally:
        board.close()
        if own is not None:
            own.shutdown()
    return {**summary, "run_dir": str(run_dir)}


def _check_resume_config(path: Path, now: Mapping[str, Any]) -> None:
    """A resumed run must keep the env, the model and the algorithm of the run it continues
    (``runner`` settings such as ``total_steps`` may change): compare with its ``config.yaml``."""
    import yaml

    if not path.is_file():
        return
    then = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    problems = []
    for section in ("env", "model"):
        a, b = then.get(section) or {}, now.get(section) or {}
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                problems.append(
                    ConfigProblem(
                        f"{section}.{key}",
                        f"is {b.get(key)!r}, but the run being resumed used {a.get(key)!r}",
                    )
                )
    name_then = (then.get("algorithm") or {}).get("name")
    name_now = (now.get("algorithm") or {}).get("name")
    if name_then != name_now:
        problems.append(
            ConfigProblem("algorithm.name", f"is {name_now!r}, but the run being resumed used {name_then!r}")
        )
    if problems:
        raise ConfigError(problems)


def _interrupt_checkpoint(run_dir: Path, since: float) -> Path | None:
    """The checkpoint an interrupted run wrote after ``since`` (epoch seconds), if any."""
    from rlinf_algos.local_runner import latest_checkpoint

    path = latest_checkpoint(run_dir)
    return path if path is not None and path.stat().st_mtime >= since else None


def _accepts(fn: Callable[..., Any], kwargs: Mapping[str, Any]) -> bool:
    import inspect

    params = inspect.signature(fn).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return True
    return all(k in params for k in kwargs)


def _total_steps(data: Mapping[str, Any]) -> int | None:
    runner = data.get("runner")
    if isinstance(runner, Mapping) and isinstance(runner.get("total_steps"), int):
        return int(runner["total_steps"])
    return None


def _atomic_write(path: Path, text: str) -> None:
    atomic_write_text(path, text)


class _Board:
    """TensorBoard event files under ``run_dir/tensorboard`` (tensorboardX): every numeric
    column of every metrics row, at its ``step``."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.writer: Any = None

    def add(self, row: Mapping[str, Any]) -> None:
        if self.writer is None:
            from tensorboardX import SummaryWriter

            self.writer = SummaryWriter(logdir=str(self.run_dir / "tensorboard"), flush_secs=10)
        step = int(row["step"])
        for key, value in row.items():
            if key == "step" or isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if math.isfinite(float(value)):
                self.writer.add_scalar(_tb_tag(key), float(value), step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def _tb_tag(key: str) -> str:
    if key.startswith("episode_") or key in ("episodes", "success_rate"):
        return f"charts/{key}"
    if key in ("env_steps_per_s", "wall_s", "rollout_s", "update_s", "wait_s", "policy_lag"):
        return f"perf/{key}"
    return f"train/{key}"


# -- the distributed run -------------------------------------------------------------------------


def run_distributed(
    algo_cfg: Any,
    sections: Any,
    scheduler: Any,
    run_dir: Path,
    *,
    resume: bool = False,
    progress: ProgressFn | None = None,
    callbacks: Mapping[str, Callable[..., Any]] | None = None,
    rollout_only: bool = False,
) -> dict[str, Any]:
    """Run PPO or SAC on env, rollout and actor workers placed by ``scheduler`` (started); see
    :class:`DistributedRun`."""
    from rlinf_core.scheduler import Scheduler

    if not isinstance(scheduler, Scheduler):
        raise RlinfError(
            f"the distributed runner needs a started rlinf_core.Scheduler (e.g. the `ray` plugin's), "
            f"got {type(scheduler).__name__}; pass scheduler=None to train in this process"
        )
    run = DistributedRun(
        algo_cfg, sections, scheduler, Path(run_dir), resume=resume, progress=progress,
        callbacks=callbacks, rollout_only=rollout_only,
    )  # fmt: skip
    return run.run()


class DistributedRun:
    """One run of PPO or SAC on workers. Build it with a started scheduler, call :meth:`run`.

    Attributes a test or a callback may read: ``groups`` (``{"env", "rollout", "actor"}`` worker
    groups), ``iteration``, ``gen`` (the channel-key generation), ``restarts``,
    ``dropped_batches``, ``dropped_env_steps``, ``steps``.
    """

    def __init__(
        self,
        algo_cfg: Any,
        sections: Any,
        scheduler: Any,
        run_dir: Path,
        *,
        resume: bool = False,
        progress: ProgressFn | None = None,
        callbacks: Mapping[str, Callable[..., Any]] | None = None,
        rollout_only: bool = False,
    ) -> None:
        from rlinf_algos.algorithms import GRPOConfig, PPOConfig, SACConfig

        if not isinstance(algo_cfg, PPOConfig | SACConfig | GRPOConfig):
            raise RlinfError(
                f"the distributed runner runs ppo, sac and grpo, not {getattr(algo_cfg, 'name', algo_cfg)!r}"
            )
        self.algo = algo_cfg
        self.name = algo_cfg.name
        self.env_cfg, self.model_cfg = sections.env, sections.model
        self.runner_cfg, self.rollout_cfg = sections.runner, sections.rollout
        self.scheduler = scheduler
        self.run_dir = run_dir
        self.resume = resume
        self.progress = progress
        self.callbacks = dict(callbacks or {})
        self.rollout_only = rollout_only
        self.timeout = self.runner_cfg.worker_timeout
        self.groups: dict[str, Any] = {}
        self.iteration = 0
        self.gen = 0
        self.restarts = 0
        self.dropped_batches = 0
        self.dropped_env_steps = 0
        self.steps = 0
        self.collected_at: dict[int, int] = {}  # iteration -> env steps once it was collected
        self.episodes = 0
        self.recent_returns: collections.deque[float] = collections.deque(maxlen=100)
        self.recent_lengths: collections.deque[int] = collections.deque(maxlen=100)
        # info["is_success"] at the end of the recent episodes, for envs that report it
        self.recent_successes: collections.deque[float] = collections.deque(maxlen=100)
        self.best = -math.inf
        self.wall_offset = 0.0
        self.last_row: dict[str, Any] = {}
        self.events: list[str] = []

    # -- set-up ----------------------------------------------------------------------------------
    def _world(self, component: str) -> int | None:
        plan = getattr(self.scheduler, "plan", None)
        try:
            return int(plan[component].world_size) if plan is not None else None
        except (KeyError, TypeError):
            return None

    def _node_rank(self, component: str) -> int | None:
        plan = getattr(self.scheduler, "plan", None)
        try:
            return int(plan[component].processes[0].node_rank) if plan is not None else None
        except (KeyError, TypeError, IndexError):
            return None

    def _check_sizes(self, M: int, N: int) -> None:
        S, total = self.rollout_cfg.pipeline_stages, self.env_cfg.num_envs
        problems = []
        if total % (M * S):
            problems.append(
                ConfigProblem(
                    "env.num_envs",
                    f"{total} envs do not split evenly over {M} env worker(s) x {S} pipeline stage(s); "
                    f"use a multiple of {M * S}",
                )
            )
        elif (total // S) % N:
            problems.append(
                ConfigProblem(
                    "env.num_envs",
                    f"each pipeline stage holds {total // S} envs over all env workers, which do not split "
                    f"evenly over {N} rollout worker(s); use a multiple of {S * N * M // math.gcd(M, N)}",
                )
            )
        if problems:
            raise ConfigError(problems)

    def _channel(self, name: str, component: str, maxsize: int = 0) -> Any:
        node = self._node_rank(component)
        opts: dict[str, Any] = {"node_rank": node} if node is not None else {}
        return self.scheduler.channel(name, maxsize=maxsize, **opts)

    def setup(self) -> None:
        from rlinf_algos.local_runner import _model_defaults, sac_policy_spec
        from rlinf_algos.workers import ActorWorker, EnvWorker, ReferenceWorker, RewardWorker, RolloutWorker

        M, N = self._world("env"), self._world("rollout")
        if M is not None and N is not None:
            self._check_sizes(M, N)
        uid = secrets.token_hex(4)
        self.weights = f"rlinf-{uid}-policy"
        self.link_token = secrets.token_hex(16)  # travels only as a Ray call argument
        S, seed = self.rollout_cfg.pipeline_stages, self.runner_cfg.seed
        # SAC's rollout workers stream transitions while the learner learns: a bound on each one's
        # queue keeps collection (and so the policy it acts with) close behind the learner
        bound = self.rollout_cfg.max_chunks_ahead if self.name == "sac" else 0
        self.traj_ch = self._channel(f"rlinf-{uid}-traj", "actor", maxsize=bound)
        if M is None or N is None:  # a scheduler without a plan: learn the sizes from the env group
            env = self.scheduler.launch(
                "env",
                EnvWorker,
                self.env_cfg.model_dump(),
                seed,
                S,
                N or 1,
                self.link_token,
                self.timeout,
            )
            self.groups["env"] = env
            M, N = env.world_size, N or 1
            self._check_sizes(M, N)
        self.M, self.N, self.S = M, N, S
        self.per_stage = self.env_cfg.num_envs // (M * S)
        launches = {
            "env": (EnvWorker, self.env_cfg.model_dump(), seed, S, N, self.link_token, self.timeout),
            "actor": (
                ActorWorker, self.algo.model_dump(), self.model_cfg.model_dump(), self.runner_cfg.model_dump(),
                self.traj_ch, self.weights, N,
            ),
            "rollout": (
                RolloutWorker, self.name, M, self.per_stage, S, self.traj_ch, self.weights, seed,
                self.link_token, self.timeout,
            ),
        }  # fmt: skip
        if self.name == "grpo":
            algo = self.algo.model_dump()
            launches["reward"] = (RewardWorker, algo, self.traj_ch, N, self.timeout)
            launches["reference"] = (ReferenceWorker, algo, self.traj_ch, self.weights, N, self.timeout)
        # the groups start at once: their imports (torch, mujoco) overlap
        with ThreadPoolExecutor(len(launches)) as pool:
            futs = {
                name: pool.submit(self.scheduler.launch, name, *args)
                for name, args in launches.items()
                if name not in self.groups
            }
            for name, fut in futs.items():
                self.groups[name] = fut.result()
        spaces = self.groups["env"].on(0).spaces().wait(self.timeout)[0]
        self.max_episode_steps = spaces.pop("max_episode_steps", None)
        if self.name == "grpo" and not self.max_episode_steps:
            raise ConfigError(
                f"{self.env_cfg.id!r} has no time limit; GRPO scores whole episodes: set env.max_episode_steps",
                path="env.max_episode_steps",
            )
        if self.name in ("ppo", "grpo"):
            hidden, act = _model_defaults(self.model_cfg, [64, 64], "tanh")
            spec = {
                "cls": "GaussianActorCritic",
                "obs_dim": spaces["obs_dim"],
                "act_dim": spaces["act_dim"],
                "hidden": hidden,
                "activation": act,
                "log_std_init": self.model_cfg.log_std_init,
                "normalize_obs": getattr(self.algo, "normalize_obs", True),
                "ortho_init": self.model_cfg.ortho_init,
            }
        else:
            spec = sac_policy_spec(
                self.model_cfg,
                spaces["obs_dim"],
                spaces["act_dim"],
                spaces["action_low"],
                spaces["action_high"],
            )
        spec["num_slots"] = self.env_cfg.num_envs
        self.spec = spec
        self.groups["actor"].configure(spec).wait(self.timeout)
        self.groups["rollout"].configure(spec).wait(self.timeout)
        if "reference" in self.groups:  # freezes version 0, the initial policy
            self.groups["reference"].configure(spec).wait(self.timeout)
        self.link_addrs = [tuple(a) for a in self.groups["rollout"].link_address().wait(self.timeout)]
        for name in ("env", "rollout"):
            if hasattr(self.groups[name], "stop_on_failure"):
                self.groups[name].stop_on_failure = False

    # -- bookkeeping -----------------------------------------------------------------------------
    @property
    def batch(self) -> int:
        """Env steps per iteration (GRPO: an upper bound; its episodes end when they end)."""
        return self.T * self.env_cfg.num_envs

    @property
    def T(self) -> int:
        """Vector steps per env per iteration (GRPO: at most, the episode time limit)."""
        if self.name == "ppo":
            return self.algo.rollout_steps
        if self.name == "grpo":
            return int(self.max_episode_steps)
        return self.rollout_cfg.steps_per_iteration

    @property
    def wall_s(self) -> float:
        return self.wall_offset + time.perf_counter() - self.t0

    def _log(self, message: str) -> None:
        self.events.append(message)
        import logging

        logging.getLogger("rlinf.train").warning(message)

    def _absorb_env(self, results: list[dict[str, Any]]) -> None:
        for res in results:
            self.recent_returns.extend(res["returns"])
            self.recent_lengths.extend(res["lengths"])
            self.recent_successes.extend(res.get("successes", ()))
            self.episodes += len(res["returns"])

    def _row(self, metrics: dict[str, Any], step: int | None = None, force: bool = False) -> None:
        """A metrics row at ``step`` env steps (those the learner has trained on; collected ones
        in rollout-only mode) if ``runner.log_interval`` steps passed since the last one."""
        import numpy as np

        step = self.steps if step is None else step
        if step <= self.last_log_step or (
            not force and step - self.last_log_step < self.runner_cfg.log_interval
        ):
            return
        now = time.perf_counter()
        ret = float(np.mean(self.recent_returns)) if self.recent_returns else float("nan")
        if not math.isnan(ret):
            self.best = max(self.best, ret)
        row: dict[str, Any] = {
            "step": step,
            "wall_s": round(self.wall_s, 3),
            "episode_return_mean": ret,
            "episode_length_mean": float(np.mean(self.recent_lengths))
            if self.recent_lengths
            else float("nan"),
            "episodes": self.episodes,
            "env_steps_per_s": (step - self.last_log_step) / max(now - self.last_log_time, 1e-9),
        }
        if self.recent_successes:
            row["success_rate"] = float(np.mean(self.recent_successes))
        for k, v in metrics.items():
            if k not in row and isinstance(v, int | float) and not isinstance(v, bool):
                row[k] = v
        self.log.write(row)
        self.last_row = row
        self.last_log_step, self.last_log_time = step, now
        if self.progress is not None:
            self.progress(row)

    # -- checkpoints -----------------------------------------------------------------------------
    def _run_state(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "iteration": self.iteration,
            "episodes": self.episodes,
            "recent_returns": list(self.recent_returns),
            "recent_lengths": list(self.recent_lengths),
            "recent_successes": list(self.recent_successes),
            "wall_s": self.wall_s,
            "best": self.best,
            "restarts": self.restarts,
            "dropped_batches": self.dropped_batches,
            "dropped_env_steps": self.dropped_env_steps,
        }

    def checkpoint(self) -> Path:
        """Write ``checkpoints/step_<n>.pt`` atomically (nothing may be in flight)."""
        from rlinf_algos.local_runner import atomic_torch_save

        actor = self.groups["actor"].state().wait(self.timeout)[0]
        rngs = self.groups["rollout"].rng_state().wait(self.timeout)
        path = self.run_dir / "checkpoints" / f"step_{self.steps:010d}.pt"
        state = {
            "algorithm": self.name,
            "distributed": True,
            "spec": self.spec,
            "batch": self.batch,
            "run": self._run_state(),
            "actor": actor,
            "rollout_rng": rngs,
        }
        if "reference" in self.groups:
            state["reference"] = self.groups["reference"].on(0).state().wait(self.timeout)[0]
        atomic_torch_save(state, path)
        self.last_ckpt_step = self.steps
        return path

    def _restore(self) -> None:
        import torch

        from rlinf_algos.local_runner import latest_checkpoint

        path = latest_checkpoint(self.run_dir)
        if path is None:
            raise RlinfError(f"nothing to resume in {self.run_dir}: no checkpoints/step_*.pt there")
        state = torch.load(path, map_location="cpu", weights_only=False)
        if state.get("algorithm") != self.name:
            raise RlinfError(f"{path} is a {state.get('algorithm')!r} checkpoint, not {self.name!r}")
        if not state.get("distributed"):
            raise RlinfError(
                f"{path} was written by the in-process runner (runner.scheduler: local); resume it with that"
            )
        saved_spec, saved_batch = state.get("spec"), state.get("batch")
        if saved_spec is not None and (saved_spec != self.spec or saved_batch != self.batch):
            diff = sorted(
                k for k in set(saved_spec) | set(self.spec) if saved_spec.get(k) != self.spec.get(k)
            )
            what = ", ".join(f"{k}: {saved_spec.get(k)!r} then, {self.spec.get(k)!r} now" for k in diff)
            if saved_batch != self.batch:
                what = ", ".join(
                    filter(None, [what, f"env steps per iteration: {saved_batch} then, {self.batch} now"])
                )
            raise RlinfError(
                f"{path} was written by a run with other env or model settings ({what}); resume with the "
                "settings of that run (its config.yaml), only runner.total_steps may grow"
            )
        run = state["run"]
        self.resume_digest = self.groups["actor"].load(state["actor"]).wait(self.timeout)[0]
        if "reference" in self.groups and state.get("reference") is not None:
            self.groups["reference"].load(state["reference"]).wait(self.timeout)
        rngs = state.get("rollout_rng") or []
        if len(rngs) == self.N:
            for r, rng in enumerate(rngs):
                self.groups["rollout"].on(r).set_rng_state(rng).wait(self.timeout)
        # the simulators' state is not saved: start fresh episodes with a seed derived from the step
        self.groups["env"].reseed(self.runner_cfg.seed + int(run["steps"])).wait(self.timeout)
        self.steps = int(run["steps"])
        self.iteration = int(run["iteration"])
        self.episodes = int(run["episodes"])
        self.recent_returns.extend(run["recent_returns"])
        self.recent_lengths.extend(run["recent_lengths"])
        self.recent_successes.extend(run.get("recent_successes", ()))
        self.wall_offset = float(run["wall_s"])
        self.best = float(run["best"])
        self.restarts = int(run.get("restarts", 0))
        self.dropped_batches = int(run.get("dropped_batches", 0))
        self.dropped_env_steps = int(run.get("dropped_env_steps", 0))
        self.resumed_from = str(path)

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        from rlinf_algos.local_runner import BASE_COLUMNS, LEARNER_COLUMNS, _MetricsLog

        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.resume_digest: str | None = None
        self.resumed_from: str | None = None
        columns = BASE_COLUMNS + LEARNER_COLUMNS[self.name] + _EXTRA_COLUMNS[self.name] + ("success_rate",)
        try:
            self.setup()
            self.t0 = time.perf_counter()
            if self.resume:
                self._restore()
            self.log = _MetricsLog(self.run_dir / "metrics.csv", columns, append=self.resume)
            self.last_log_step = self.last_ckpt_step = self.steps
            self.last_log_time = time.perf_counter()
            self.t0 = time.perf_counter()
            try:
                asyncio.run(self._main())
            except (KeyboardInterrupt, asyncio.CancelledError):
                raise TrainingInterrupted(self.run_dir, self._interrupt()) from None
            if self.steps != self.last_log_step:
                self._row(self.last_metrics, force=True)
            if (
                self.runner_cfg.checkpoint_interval
                and self.steps != self.last_ckpt_step
                and not self.rollout_only
            ):
                self.checkpoint()
            return self._finish()
        finally:
            self._teardown()

    async def _main(self) -> None:
        total = self.runner_cfg.total_steps
        staleness = (
            self.rollout_cfg.max_staleness if self.name == "ppo" else max(1, self.rollout_cfg.max_staleness)
        )
        # PPO and SAC collect exactly `batch` steps an iteration (iteration < ceil(total / batch)
        # is steps < total); GRPO's iterations end with their episodes
        self.iterations = max(1, math.ceil(total / self.batch))
        self.inflight: collections.deque[tuple[int, asyncio.Future[Any]]] = collections.deque()
        self.last_metrics: dict[str, Any] = {}
        while self.steps < total:
            k = self.iteration
            while self.inflight and self.inflight[0][0] < k - staleness:
                await self._finish_train()
            interval = self.runner_cfg.checkpoint_interval
            if interval and self.steps - self.last_ckpt_step >= interval and not self.rollout_only:
                while self.inflight:
                    await self._finish_train()
                self.checkpoint()
            if "on_iteration" in self.callbacks:
                self.callbacks["on_iteration"](self, k)
            if await self._iteration(k, staleness):
                self.iteration += 1
        while self.inflight:
            await self._finish_train()

    async def _finish_train(self) -> None:
        k, fut = self.inflight.popleft()
        metrics = (await fut)[0]
        if metrics.get("aborted"):
            raise RlinfError(f"the actor lost the batch of iteration {k}: {metrics.get('error', 'aborted')}")
        metrics.setdefault("rollout_s", getattr(self, "rollout_s", float("nan")))
        self.last_metrics = metrics
        self._row(metrics, step=self.collected_at.pop(k, (k + 1) * self.batch))

    async def _iteration(self, k: int, staleness: int) -> bool:
        """Collect iteration ``k`` (and start learning on it). ``False`` if it was aborted."""
        env, rollout, actor = self.groups["env"], self.groups["rollout"], self.groups["actor"]
        gen, T = self.gen, self.T
        kw: dict[str, Any] = {}
        train_kw: dict[str, Any] = {}
        if self.name == "sac":
            kw = {
                "random_actions": self.steps < self.algo.learning_starts,
                "chunk_steps": self.rollout_cfg.chunk_steps,
            }
            # a chunk is flushed every chunk_steps steps (t > 0) and once at the end
            chunks = len([t for t in range(1, T) if t % self.rollout_cfg.chunk_steps == 0]) + 1
            train_kw = {"chunks": chunks, "global_step": self.steps}
        if self.rollout_only:
            kw["send"] = False
        on_policy = self.name in ("ppo", "grpo") and not self.rollout_only
        min_version = max(0, k - staleness) if on_policy else 0
        if self.name == "grpo":  # the groups of iteration k start from seeds of their own
            base = self.runner_cfg.seed + k * self.algo.num_groups
            G = self.algo.group_size
            # GRPO's batch goes rollout -> reference -> actor in several hops, so its keys are the
            # iteration's own: an abort of iteration k can never overtake iteration k - 1's data
            self.batch_id = f"{gen}.{k}"
            kw["batch"] = self.batch_id
            env_calls = [env.on(r).run_episodes(gen, self.link_addrs, base, G, T) for r in range(self.M)]
        else:
            env_calls = [env.on(r).run(gen, T, self.link_addrs) for r in range(self.M)]
        roll_calls = [rollout.on(r).collect(gen, T, min_version, **kw) for r in range(self.N)]
        train_fut = None
        if not self.rollout_only:
            frac = 1.0 - k / self.iterations
            if self.name == "grpo":
                train_fut = asyncio.ensure_future(self._grpo_learn(self.batch_id))
            else:
                train_fut = asyncio.ensure_future(_await(actor.train(gen, frac, **train_kw)))
        calls = {("env", r): c for r, c in enumerate(env_calls)} | {
            ("rollout", r): c for r, c in enumerate(roll_calls)
        }
        results, dead, fatal = await self._gather(calls)
        aborted = dead or fatal or any(res.get("aborted") for res in results.values())
        env_res = [results[("env", r)] for r in range(self.M) if ("env", r) in results]
        self._absorb_env(env_res)
        if not aborted:
            self.steps += sum(r["steps"] for r in env_res) if self.name == "grpo" else self.batch
            self.collected_at[k] = self.steps
            rollout_s = max(results[("rollout", r)].get("rollout_s", 0.0) for r in range(self.N))
            if train_fut is not None:
                self.inflight.append((k, train_fut))
                self.rollout_s = rollout_s
            else:  # rollout only: a row per log interval
                self.last_metrics = {"rollout_s": rollout_s}
                self._row(self.last_metrics)
            return True
        # -- recovery: drop the partial batch, restart the dead, next generation ------------------
        lost = sum(r.get("steps", 0) for r in env_res)
        self.dropped_batches += 1
        self.dropped_env_steps += lost
        why = (
            "; ".join(f"{c} rank {r}: {e}" for (c, r), e in (dead | fatal).items())
            or "a peer ended the iteration"
        )
        self._log(
            f"iteration {k}: dropped its partial batch ({lost} env steps collected) after a worker failure "
            f"({why}); generation {gen} -> {gen + 1}"
        )
        if train_fut is not None:
            res = (await train_fut)[0]
            if self.name == "ppo" and not res.get("aborted"):  # cannot happen: the batch was incomplete
                raise RlinfError(f"iteration {k}: the actor trained on an incomplete batch")
        if fatal:
            err = next(iter(fatal.values()))
            raise err
        for comp in ("env", "rollout"):
            ranks = sorted(r for (c, r) in dead if c == comp)
            if not ranks:
                continue
            self.restarts += len(ranks)
            if self.restarts > self.runner_cfg.max_restarts:
                raise RlinfError(
                    f"{comp} rank(s) {ranks} died and runner.max_restarts={self.runner_cfg.max_restarts} restarts "
                    f"are used up; the newest checkpoint is in {self.run_dir / 'checkpoints'} (--resume)"
                )
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, self._restart, comp, ranks)
            self._log(f"restarted {comp} rank(s) {ranks}; they pulled the newest weights")
        self.gen = gen + 1
        return False

    async def _grpo_learn(self, batch: str) -> list[dict[str, Any]]:
        """GRPO's learning side of one iteration (``batch``: its keys' id): the reward worker scores the episodes, the
        reference worker adds its log-probabilities, the actor updates on both (concurrently;
        they hand the data on over the channel). Returns ``[actor metrics]`` (aborted if any
        of them was)."""
        calls = [
            self.groups["reward"].on(0).score(batch),
            self.groups["reference"].on(0).compute(batch),
            self.groups["actor"].train(batch),
        ]
        reward, reference, metrics = [(await _await(c))[0] for c in calls]
        if reward.get("aborted") or reference.get("aborted") or metrics.get("aborted"):
            why = next((x["error"] for x in (reward, reference, metrics) if x.get("error")), "aborted")
            return [{"aborted": True, "error": why}]
        metrics["group_return_std"] = reward["group_return_std"]
        metrics["reference_s"] = reference["reference_s"]
        return [metrics]

    def _restart(self, comp: str, ranks: list[int]) -> None:
        group = self.groups[comp]
        group.restart(ranks, timeout=self.timeout)
        if comp == "rollout":  # rebuild the policy, pull the newest weights, listen anew
            group.on(ranks).configure(self.spec).wait(self.timeout)
            for r, addr in zip(ranks, group.on(ranks).link_address().wait(self.timeout), strict=True):
                self.link_addrs[r] = tuple(addr)

    async def _gather(
        self, calls: dict[tuple[str, int], Any]
    ) -> tuple[dict[Any, Any], dict[Any, Any], dict[Any, Any]]:
        """Wait for every call; a died worker's rank goes to ``dead``, another error to
        ``fatal``. On the first failure the generation is aborted so survivors return."""
        futs = {asyncio.ensure_future(_await(c)): key for key, c in calls.items()}
        results: dict[Any, Any] = {}
        dead: dict[Any, Any] = {}
        fatal: dict[Any, Any] = {}
        pending = set(futs)
        aborted = False
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for f in done:
                key = futs[f]
                err = f.exception()
                if err is None:
                    results[key] = f.result()[0]
                    if results[key].get("aborted") and not aborted:
                        aborted = True
                        await self._abort_keys(self.gen)
                elif getattr(err, "error_type", "") == "WorkerDied":
                    dead[key] = err
                else:
                    fatal[key] = err
                if (dead or fatal) and not aborted:
                    aborted = True
                    await self._abort_keys(self.gen)
        return results, dead, fatal

    async def _abort_keys(self, gen: int) -> None:
        """End generation ``gen`` for the learner (an ``ABORT`` on every trajectory key). Env and
        rollout workers need none: a worker that fails or gives up closes its links, which ends
        the iteration on its peers in turn."""
        from rlinf_algos.workers import ABORT, grpo_keys, traj_key

        loop = asyncio.get_running_loop()
        if self.name == "grpo":  # the iteration in flight (see _iteration)
            keys = grpo_keys(getattr(self, "batch_id", f"{gen}.{self.iteration}"), self.N)
        else:
            keys = [traj_key(gen, r) for r in range(self.N)]

        def put_all() -> None:
            for key in keys:
                self.traj_ch.put(ABORT, key, timeout=self.timeout)

        await loop.run_in_executor(None, put_all)

    # -- endings ---------------------------------------------------------------------------------
    def _interrupt(self) -> Path | None:
        """Ctrl-C: end the iteration in flight, let the learner finish its update, write a
        checkpoint, the final policy and the summary (``interrupted``); returns the checkpoint."""
        path = None
        try:
            asyncio.run(self._abort_keys(self.gen))
        except Exception as err:
            self._log(f"could not abort the iteration in flight: {err}")
        try:
            self.groups["actor"].version().wait(self.timeout)  # queued behind any update in flight
            if not self.rollout_only:
                path = self.checkpoint()
        except Exception as err:  # report it; still write the policy and the summary
            self._log(f"could not write the interrupt checkpoint: {err}")
        self._finish(interrupted=True)
        return path

    def _finish(self, interrupted: bool = False) -> dict[str, Any]:
        from rlinf_algos.local_runner import _atomic_write_text, _best_of, atomic_torch_save

        if hasattr(self, "log"):
            self.log.close()
        if not self.rollout_only and "actor" in self.groups:
            policy = self.groups["actor"].policy().wait(self.timeout)[0]
            policy["env_id"] = self.env_cfg.id
            policy["env_kwargs"] = dict(self.env_cfg.kwargs)  # `rlinf eval` builds the same env
            policy["max_episode_steps"] = self.env_cfg.max_episode_steps
            atomic_torch_save(policy, self.run_dir / "policy.pt")
        wall = self.wall_s
        ret = self.last_row.get("episode_return_mean", float("nan")) if self.last_row else float("nan")
        import numpy as np

        final = float(np.mean(self.recent_returns)) if self.recent_returns else ret
        summary = {
            "algorithm": self.name,
            "env_id": self.env_cfg.id,
            "total_env_steps": self.steps,
            "wall_s": round(wall, 3),
            "env_steps_per_s": self.steps / wall if wall > 0 else 0.0,
            "final_return_mean": None if math.isnan(final) else final,
            # the best logged row's, or the final one if better (a run stopped between rows)
            "best_return_mean": _best_of(self.best, final),
            # over the last 100 training episodes; None if the env has no info["is_success"]
            "success_rate": float(np.mean(self.recent_successes)) if self.recent_successes else None,
            "episodes": self.episodes,
            "interrupted": interrupted,
            "rollout_only": self.rollout_only,
            "iterations": self.iteration,
            "restarts": self.restarts,
            "dropped_batches": self.dropped_batches,
            "dropped_env_steps": self.dropped_env_steps,
            "workers": {
                "env": self.M,
                "rollout": self.N,
                "actor": 1,
                **({"reward": 1, "reference": 1} if self.name == "grpo" else {}),
                "pipeline_stages": self.S,
            },
            "resumed_from": self.resumed_from,
            "events": self.events[-20:],
        }
        _atomic_write_text(self.run_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
        return summary

    def _teardown(self) -> None:
        for name in ("rollout", "env", "reward", "reference", "actor"):
            group = self.groups.get(name)
            if group is not None:
                try:
                    group.shutdown(timeout=10.0)
                except Exception:
                    pass


_EXTRA_COLUMNS: dict[str, tuple[str, ...]] = {
    "ppo": ("wait_s", "policy_lag"),
    "sac": ("update_s", "wait_s", "policy_lag"),
    "grpo": ("update_s", "wait_s", "policy_lag", "group_return_std", "reference_s"),
}


async def _await(call: Any) -> Any:
    """Await a :class:`~rlinf_core.worker.GroupCall` (its ``__await__``)."""
    return await call
