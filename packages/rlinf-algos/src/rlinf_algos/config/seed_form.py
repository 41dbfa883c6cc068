"""The worker-pool form of a run configuration (RLinf seed 003) expanded into rlinf's sections.

:func:`expand_seed_form` takes a config written as seed 003 writes it (``algorithm: ppo``,
``ray_cluster``, ``rollout_worker``, ``trainer``, ``reward_worker``, ``checkpoint_interval``,
``task``, ``model: {base_path, lora}``, ``env: {sim, scene, robot}``, ``reward_fn``) and returns
the ordinary configuration (``cluster``, ``algorithm``, ``env``, ``model``, ``runner``,
``rollout``, ``actor``) with a :class:`SeedExpansion` that says what became what. The ``cluster``
part is :func:`rlinf_core.pools.expand_pools`; this module adds the sections rlinf-algos owns.
What the form asks for and rlinf cannot do is an error naming the seed key, or a fallback stated
in :attr:`SeedExpansion.notes` (logged as a warning when a run starts). The rules, with every
fallback: ``packages/rlinf-algos/docs/seed-form.md``.

Light: pydantic and rlinf_core at import; the algorithm's recipe (torch) is imported only to turn
``checkpoint_interval`` (updates) into env steps.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rlinf_core.config import describe_value
from rlinf_core.errors import ConfigError, ConfigProblem
from rlinf_core.pools import SEED_KEYS, PoolExpansion, expand_pools, is_seed_form, unknown_key_problems

if TYPE_CHECKING:
    from rlinf_core.algorithm import Algorithm
    from rlinf_core.plugins import PluginHost

__all__ = [
    "DEFAULT_TOTAL_STEPS",
    "SIM_MODULES",
    "TASKS",
    "SeedExpansion",
    "expand_seed_form",
    "is_seed_form",
    "iteration_env_steps",
    "log_notes",
]

TASKS = ("embodied_vla", "embodied")
"""Values of ``task`` the form runs: an embodied policy trained in simulated (or real) robots."""

SIM_MODULES: Mapping[str, str | None] = {
    "mujoco": None,
    "genesis": "genesis",
    "maniskill": "mani_skill",
    "isaac_lab": "isaaclab",
    "isaaclab": "isaaclab",
    "isaac_gym": "isaacgym",
}
"""``env.sim`` values and the module each needs (MuJoCo ships with rlinf-algos)."""

FRANKA_SCENES: Mapping[str, str] = {
    "reach": "rlinf/FrankaReach-v0",
    "franka_reach": "rlinf/FrankaReach-v0",
    "franka_reach.yaml": "rlinf/FrankaReach-v0",
}
"""``env.scene`` values of ``env.sim: mujoco`` + ``env.robot: franka`` and the gymnasium id each
becomes (rlinf-hw-franka's MuJoCo twin)."""

FRANKA_KWARGS: Mapping[str, Any] = {"obs_mode": "flat", "gripper": False, "realtime": False}
"""What the twin is made with unless ``env.kwargs`` says otherwise: state observations, no
gripper, no 10 Hz pacing."""

ENV_SEED_KEYS = ("sim", "scene", "robot")
MODEL_SEED_KEYS = ("base_path", "lora")
LORA_KEYS = ("enabled", "rank", "alpha", "target_modules", "dropout")
ORDINARY_SECTIONS = ("algorithm", "env", "model", "runner", "rollout", "actor")

DEFAULT_TOTAL_STEPS = 1_000_000
"""``runner.total_steps`` when a worker-pool config gives none (seed 003's configs do not)."""

log = logging.getLogger("rlinf.config")


@dataclass
class SeedExpansion:
    """What a worker-pool config became: ``pools`` (the ``cluster`` part, with the inventory
    the pools imply), ``notes`` (every mapping and fallback, one line each), ``paths``
    (generated YAML path -> the seed key it came from)."""

    pools: PoolExpansion
    notes: list[str] = field(default_factory=list)
    paths: dict[str, str] = field(default_factory=dict)

    @property
    def cluster(self) -> dict[str, Any]:
        return self.pools.cluster

    @property
    def inventory(self) -> dict[str, Any]:
        return self.pools.inventory

    def translate(self, problems: Any) -> list[ConfigProblem]:
        """``problems`` found in the expanded config, named by the seed keys they came from."""
        merged = PoolExpansion(cluster={}, inventory={}, paths={**self.pools.paths, **self.paths})
        return merged.translate(problems)

    def translate_error(self, err: ConfigError) -> ConfigError:
        return ConfigError(self.translate(err.problems))


def log_notes(expansion: SeedExpansion) -> None:
    """Log every note of ``expansion`` as one warning (what the worker-pool form became)."""
    log.warning("warning: expanded the worker-pool form (seed 003):\n  %s", "\n  ".join(expansion.notes))


EMBODIED_COMPONENTS = ("env", "rollout", "actor")
"""The components every embodied algorithm runs."""


def _embodied(algo_cls: type[Algorithm]) -> bool:
    """An algorithm the form runs: it trains in environments (it has an ``env`` component)."""
    return "env" in tuple(getattr(algo_cls, "components", ()))


def _mapping(data: Mapping[str, Any], key: str, problems: list[ConfigProblem]) -> dict[str, Any]:
    raw = data.get(key)
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        problems.append(ConfigProblem(key, f"must be a mapping, got {describe_value(raw)}"))
        return {}
    return dict(raw)


def expand_seed_form(
    data: Mapping[str, Any], host: PluginHost
) -> tuple[dict[str, Any], SeedExpansion | None]:
    """``(ordinary config, expansion)`` of a worker-pool config; ``(data, None)`` for a config
    already in the ordinary form. Raises one :class:`ConfigError` with every problem, each
    named by the seed key it is about."""
    if not is_seed_form(data):
        out = dict(data)
        if isinstance(out.get("algorithm"), str):  # `algorithm: ppo` beside a cluster section
            out["algorithm"] = {"name": out["algorithm"]}
        return out, None
    problems: list[ConfigProblem] = []
    notes: list[str] = []
    paths: dict[str, str] = {}
    problems.extend(
        unknown_key_problems(
            data, [*SEED_KEYS, *ORDINARY_SECTIONS, "cluster"], "", "a worker-pool config has"
        )
    )
    if "cluster" in data:
        problems.append(
            ConfigProblem(
                "cluster",
                "give either a `cluster` section or the worker pools (ray_cluster, rollout_worker, trainer, "
                "reward_worker), not both",
            )
        )
    # the algorithm: a bare name, or the ordinary mapping with its options
    raw_algo = data.get("algorithm")
    if isinstance(raw_algo, str):
        algo_section: Any = {"name": raw_algo}
        paths["algorithm.name"] = "algorithm"
    else:
        algo_section = dict(raw_algo) if isinstance(raw_algo, Mapping) else raw_algo
    name = algo_section.get("name") if isinstance(algo_section, Mapping) else None
    algo_cls = host.algorithms.get(name) if isinstance(name, str) and name in host.algorithms else None
    if algo_cls is None and isinstance(algo_section, Mapping):
        problems.append(
            ConfigProblem(
                "algorithm" if isinstance(raw_algo, str) else "algorithm.name",
                f"unknown algorithm {describe_value(name)}; registered: {', '.join(host.algorithms.names())}",
            )
        )
    if algo_cls is not None and not _embodied(algo_cls):
        embodied = [n for n in host.algorithms.names() if _embodied(host.algorithms.get(n))]
        problems.append(
            ConfigProblem(
                "algorithm",
                f"{name!r} is not an embodied algorithm; the worker-pool form (task embodied_vla) runs "
                f"{', '.join(embodied)}; write {name} runs in the ordinary form (cluster, algorithm, ...)",
            )
        )
        algo_cls = None
    components = algo_cls.components if algo_cls is not None else EMBODIED_COMPONENTS
    pools = expand_pools(data, components)
    problems.extend(pools.problems)
    p = pools.pools
    ro, tr, rw = p["rollout_worker"], p["trainer"], p["reward_worker"]
    out: dict[str, Any] = {"cluster": pools.cluster, "algorithm": algo_section}

    task = data.get("task", "embodied_vla")
    if not isinstance(task, str) or task not in TASKS:
        problems.append(
            ConfigProblem(
                "task",
                f"unknown task {describe_value(task)}; the worker-pool form runs {', '.join(TASKS)} "
                "(language-model runs: the ordinary form with algorithm grpo_lm or ppo_lm)",
            )
        )
    env = _env_section(data, ro, problems, notes, paths)
    out["env"] = env
    out["model"] = _model_section(data, problems, notes, host)
    reward_fn = data.get("reward_fn")
    if reward_fn is not None and reward_fn not in ("env", "environment"):
        problems.append(
            ConfigProblem(
                "reward_fn",
                f"{describe_value(reward_fn)}: task {task} takes the environment's own reward (the scene's "
                "task reward); a custom reward function is not supported for embodied tasks yet: leave "
                "reward_fn out (or `reward_fn: env`). Language-model runs take one (algorithm grpo_lm, "
                "reward section)",
            )
        )
    rollout = _mapping(data, "rollout", problems)
    out["rollout"] = rollout
    stages = rollout.get("pipeline_stages", 1)
    env_workers = (
        rw.num_workers if ("reward" not in components and "reward_worker" in data) else ro.num_workers
    )
    total = env.get("num_envs")
    if isinstance(total, int) and isinstance(stages, int) and stages > 0 and total % (env_workers * stages):
        key = (
            "reward_worker.num_workers"
            if env_workers == rw.num_workers and "reward_worker" in data
            else "rollout_worker"
        )
        problems.append(
            ConfigProblem(
                key,
                f"env.num_envs {total} (num_envs_per_worker x num_workers) does not split evenly over {env_workers} "
                f"env worker(s) x {stages} pipeline stage(s); make num_envs_per_worker x num_workers a multiple "
                f"of {env_workers * stages}",
            )
        )
    out["actor"] = _actor_section(data, algo_cls, algo_section, tr, problems, notes, paths)
    out["runner"] = _runner_section(data, algo_cls, tr, problems, notes, paths)
    if problems:
        raise ConfigError(problems)
    interval = data.get("checkpoint_interval")
    if interval is not None:
        _checkpoint(out, interval, algo_cls, problems, notes, paths)
        if problems:
            raise ConfigError(problems)
    expansion = SeedExpansion(pools=pools, notes=[*pools.notes, *notes], paths=paths)
    return out, expansion


def _env_section(
    data: Mapping[str, Any], ro: Any, problems: list[ConfigProblem], notes: list[str], paths: dict[str, str]
) -> dict[str, Any]:
    from rlinf_algos.config.sections import EnvConfig

    env_keys = list(EnvConfig.model_fields)
    raw = _mapping(data, "env", problems)
    problems.extend(unknown_key_problems(raw, [*ENV_SEED_KEYS, *env_keys], "env", "env takes"))
    env = {k: v for k, v in raw.items() if k in env_keys}
    total = ro.num_workers * ro.num_envs_per_worker
    if "num_envs" in env and env["num_envs"] != total:
        problems.append(
            ConfigProblem(
                "env.num_envs",
                f"{describe_value(env['num_envs'])} contradicts rollout_worker.num_envs_per_worker x num_workers = "
                f"{total}; leave env.num_envs out",
            )
        )
    env["num_envs"] = total
    paths["env.num_envs"] = "rollout_worker.num_envs_per_worker"
    if "id" in env:
        given = [k for k in ENV_SEED_KEYS if k in raw]
        if given:
            problems.append(
                ConfigProblem(
                    "env.id", f"give env.id or env.{'/'.join(given)} (which picks the id), not both"
                )
            )
        return env
    sim = raw.get("sim", "mujoco")
    robot = raw.get("robot", "franka")
    scene = raw.get("scene", "reach")
    if not isinstance(sim, str) or sim not in SIM_MODULES:
        problems.append(
            ConfigProblem(
                "env.sim", f"unknown simulator {describe_value(sim)}; known: {', '.join(SIM_MODULES)}"
            )
        )
        return env
    module = SIM_MODULES[sim]
    if module is not None:
        installed = importlib.util.find_spec(module) is not None
        why = (
            f"{sim} is installed here, but rlinf has no {sim} scene loader yet"
            if installed
            else f"{sim} is not installed on this machine (no module {module!r}), and rlinf has no {sim} scene "
            "loader yet"
        )
        problems.append(
            ConfigProblem(
                "env.sim",
                f"{why}: use env.sim: mujoco (the Franka MuJoCo twin), or give a gymnasium id as env.id",
            )
        )
        return env
    if robot != "franka":
        problems.append(
            ConfigProblem(
                "env.robot",
                f"{describe_value(robot)}: the MuJoCo scenes rlinf has are for franka; or give a gymnasium id as env.id",
            )
        )
        return env
    if not isinstance(scene, str) or scene not in FRANKA_SCENES:
        problems.append(
            ConfigProblem(
                "env.scene",
                f"{describe_value(scene)}: the Franka MuJoCo twin has the scenes {', '.join(FRANKA_SCENES)}; "
                "or give a gymnasium id as env.id",
            )
        )
        return env
    env["id"] = FRANKA_SCENES[scene]
    kwargs = env.get("kwargs")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        problems.append(ConfigProblem("env.kwargs", f"must be a mapping, got {describe_value(kwargs)}"))
        return env
    env["kwargs"] = {**FRANKA_KWARGS, **(kwargs or {})}
    paths["env.id"] = "env.robot"
    paths["env.kwargs"] = "env"
    notes.append(
        f"env: sim {sim}, robot {robot}, scene {scene} -> env.id {env['id']} (rlinf-hw-franka's MuJoCo twin), "
        f"{total} envs ({ro.num_workers} rollout workers x {ro.num_envs_per_worker}); state observations "
        f"(kwargs {dict(env['kwargs'])}): camera and instruction observations are not built yet"
    )
    return env


def _takes_lora(model_type: Any, host: PluginHost | None) -> bool:
    """Whether ``model.type`` has LoRA adapters of its own (a ``lora`` option: ``vla``'s, on its
    encoder folders); an unknown type is reported by the validation of the expanded config."""
    from rlinf_algos.models import model_config_class

    if not isinstance(model_type, str):
        return False
    try:
        return "lora" in model_config_class(model_type, host=host).model_fields
    except ConfigError:
        return False


def _model_section(
    data: Mapping[str, Any], problems: list[ConfigProblem], notes: list[str], host: PluginHost | None = None
) -> dict[str, Any]:
    raw = _mapping(data, "model", problems)
    model = {k: v for k, v in raw.items() if k not in MODEL_SEED_KEYS}
    if raw.get("base_path") is not None:
        problems.append(
            ConfigProblem(
                "model.base_path",
                f"{describe_value(raw['base_path'])}: rlinf cannot load a VLA checkpoint for embodied training yet; "
                f"embodied policies are built from model.type ({model.get('type', 'mlp')}) and trained from "
                "scratch: remove base_path (language-model checkpoints: algorithm grpo_lm, model.path)",
            )
        )
    lora = raw.get("lora")
    takes_lora = _takes_lora(model.get("type", "mlp"), host)
    if lora is not None:
        if not isinstance(lora, Mapping):
            problems.append(ConfigProblem("model.lora", f"must be a mapping, got {describe_value(lora)}"))
        else:
            problems.extend(unknown_key_problems(lora, LORA_KEYS, "model.lora", "model.lora takes"))
            if lora.get("enabled", True) and takes_lora:  # the model type's own adapters
                model["lora"] = {k: v for k, v in lora.items() if k != "enabled"}
                notes.append(f"model.lora -> the LoRA adapters of model.type {model['type']}")
            elif lora.get("enabled", True):
                problems.append(
                    ConfigProblem(
                        "model.lora.enabled",
                        "LoRA adapts a loaded base model (model.base_path), which embodied training cannot load "
                        "yet: set enabled: false or remove model.lora",
                    )
                )
            else:
                notes.append("model.lora: enabled false, no adapter")
    if "type" not in model:
        sizes = "" if "hidden_sizes" in model else " (the algorithm's default sizes)"
        notes.append(f"model: type mlp{sizes}, trained from scratch")
    return model


def _batch_field(algo_cls: type[Algorithm]) -> str | None:
    fields = algo_cls.config_model.model_fields
    return next((f for f in ("minibatch_size", "batch_size") if f in fields), None)


def _actor_section(
    data: Mapping[str, Any],
    algo_cls: type[Algorithm] | None,
    algo_section: Any,
    tr: Any,
    problems: list[ConfigProblem],
    notes: list[str],
    paths: dict[str, str],
) -> dict[str, Any]:
    actor = _mapping(data, "actor", problems)
    ranks = max(tr.num_gpus, 1)
    if algo_cls is None:
        return actor
    if ranks > 1 and not getattr(algo_cls, "multi_rank_learner", False):
        problems.append(
            ConfigProblem(
                "trainer.num_gpus",
                f"the {algo_cls.PLUGIN_NAME} learner runs as one process; give it num_gpus 1 (or 0 for the CPU)",
            )
        )
        return actor
    tp = tr.tensor_parallel_size
    if tp > 1:
        if ranks % tp:
            problems.append(
                ConfigProblem(
                    "trainer.tensor_parallel_size",
                    f"{tp} does not divide trainer.num_gpus {tr.num_gpus}",
                )
            )
        elif actor.get("strategy", "fsdp") != "fsdp":
            problems.append(
                ConfigProblem(
                    "trainer.tensor_parallel_size",
                    f"{tp}: rlinf has no tensor-parallel backend and falls back to actor.strategy: fsdp, which "
                    f"contradicts actor.strategy: {actor['strategy']}",
                )
            )
        else:
            actor["strategy"] = "fsdp"
            paths["actor.strategy"] = "trainer.tensor_parallel_size"
            notes.append(
                f"trainer.tensor_parallel_size {tp}: rlinf has no tensor-parallel backend; fallback: FSDP "
                f"(actor.strategy: fsdp) shards parameters, gradients and optimiser state over the {ranks} trainer "
                "processes instead"
            )
    accum = tr.gradient_accumulation_steps
    batch_key = _batch_field(algo_cls)
    if accum == 1 or "micro_batch_size" in actor:
        return actor
    if batch_key is None:
        notes.append(
            f"trainer.gradient_accumulation_steps {accum}: {algo_cls.PLUGIN_NAME} has no minibatch; ignored"
        )
        return actor
    given = algo_section.get(batch_key) if isinstance(algo_section, Mapping) else None
    batch = given if isinstance(given, int) else algo_cls.config_model.model_fields[batch_key].default
    parts = ranks * accum
    if not isinstance(batch, int) or batch < 1:
        return actor  # reported by the algorithm's own validation
    if batch % parts:
        if given is not None:
            problems.append(
                ConfigProblem(
                    "trainer.gradient_accumulation_steps",
                    f"{accum} micro-batches x {ranks} trainer process(es) do not divide algorithm.{batch_key} "
                    f"{batch}; make {batch_key} a multiple of {parts}",
                )
            )
            return actor
        batch = parts * -(-batch // parts)
        algo_section[batch_key] = batch
        notes.append(
            f"algorithm.{batch_key}: {batch} (a multiple of {ranks} trainer processes x {accum} micro-batches)"
        )
    actor["micro_batch_size"] = batch // parts
    paths["actor.micro_batch_size"] = "trainer.gradient_accumulation_steps"
    what = "each optimiser step" if ranks == 1 else f"each of the {ranks} processes per optimiser step"
    notes.append(
        f"trainer.gradient_accumulation_steps {accum} -> actor.micro_batch_size {batch // parts} "
        f"({batch_key} {batch}: {accum} micro-batches on {what})"
        + (" (a learner of one process takes its minibatch in one pass: no effect)" if ranks == 1 else "")
    )
    return actor


def _runner_section(
    data: Mapping[str, Any],
    algo_cls: type[Algorithm] | None,
    tr: Any,
    problems: list[ConfigProblem],
    notes: list[str],
    paths: dict[str, str],
) -> dict[str, Any]:
    runner = _mapping(data, "runner", problems)
    if "total_steps" not in runner:
        runner["total_steps"] = DEFAULT_TOTAL_STEPS
        notes.append(
            f"runner.total_steps: {DEFAULT_TOTAL_STEPS:,} env steps (not given; set runner.total_steps)"
        )
    if "device" not in runner:
        runner["device"] = "cpu" if tr.num_gpus == 0 else "auto"
    if "checkpoint_interval" in data and "checkpoint_interval" in runner:
        problems.append(
            ConfigProblem(
                "checkpoint_interval",
                "give checkpoint_interval (updates) or runner.checkpoint_interval (env steps), not both",
            )
        )
    return runner


def iteration_env_steps(config: Mapping[str, Any], algo_cls: Any) -> int:  # an EmbodiedAlgorithm
    """Env steps of one training iteration (one update) of an ordinary ``config``: the recipe's
    vector steps per iteration x ``env.num_envs``; 0 when unknown. Imports the recipe (torch)."""
    from rlinf_algos.config.sections import RolloutConfig
    from rlinf_core.config import validate_model

    algo_cfg = validate_model(algo_cls.config_model, dict(config["algorithm"]), "algorithm")
    rollout_cfg = validate_model(RolloutConfig, config.get("rollout") or {}, "rollout")
    env = config.get("env") or {}
    steps = algo_cls(algo_cfg).recipe().iteration_steps(rollout_cfg, env.get("max_episode_steps"))
    return int(steps or 0) * int(env.get("num_envs") or 0)


def _checkpoint(
    out: dict[str, Any],
    interval: Any,
    algo_cls: type[Algorithm] | None,
    problems: list[ConfigProblem],
    notes: list[str],
    paths: dict[str, str],
) -> None:
    """``checkpoint_interval`` (updates) -> ``runner.checkpoint_interval`` (env steps)."""
    if isinstance(interval, bool) or not isinstance(interval, int) or interval < 0:
        problems.append(
            ConfigProblem(
                "checkpoint_interval",
                f"expected a whole number of updates >= 0 (0: no checkpoints), got {describe_value(interval)}",
            )
        )
        return
    if algo_cls is None:
        return
    try:
        per_update = iteration_env_steps(out, algo_cls)
    except ConfigError:
        return  # the algorithm's own validation reports it with its paths
    if per_update <= 0:
        problems.append(
            ConfigProblem(
                "checkpoint_interval",
                f"{algo_cls.PLUGIN_NAME}'s updates have no fixed length here: set env.max_episode_steps, or give "
                "runner.checkpoint_interval in env steps instead",
            )
        )
        return
    out["runner"]["checkpoint_interval"] = interval * per_update
    paths["runner.checkpoint_interval"] = "checkpoint_interval"
    notes.append(
        f"checkpoint_interval {interval} updates -> runner.checkpoint_interval {interval * per_update:,} env steps "
        f"({per_update:,} per update)"
    )
