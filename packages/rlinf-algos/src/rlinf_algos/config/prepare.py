"""The config pipeline in one place: a run configuration from its file to a run ready to start.

:func:`prepare_run` is the one way every entry point reads a run configuration (``rlinf train``
and its ``--dry-run``, ``--print-config`` and ``--multirun``, :func:`rlinf_algos.train`,
``rlinf bench``; ``rlinf sft`` takes the compose step and validates its own sections):

1. **compose** (:func:`compose_run_config`, :func:`rlinf_core.compose.compose_traced`): the
   file, its ``defaults:`` lists, the command-line overrides, ``${...}`` interpolation; every
   later problem whose value came from another file or an override names it;
2. **translate** (:func:`rlinf_algos.config.translate.translate`): seed 003's worker pools, RLinf's
   keys, into the ordinary sections;
3. **validate once** (:func:`rlinf_algos.config.validate.validate`): every section, every problem
   with its YAML path in one :class:`~rlinf_core.errors.ConfigError` (named by the key the user
   wrote, for a translated config);
4. **plan** (``plan=True``): the placement of every component, the devices per role and the
   memory estimates (what ``--dry-run`` prints; a run's scheduler plans against the nodes it finds).

The result, a :class:`PreparedRun`, is what :func:`rlinf_algos.training.run_training`
runs: nothing is composed or validated again, and ``Algorithm.run`` receives
:attr:`PreparedRun.config`, a mapping that carries the validated sections.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlinf_algos.config.translate import Translation, translate
from rlinf_algos.config.validate import LOCAL, Validation, validate
from rlinf_algos.config.validated import ValidatedConfig
from rlinf_core.errors import ConfigError

if TYPE_CHECKING:
    from rlinf_core.algorithm import Algorithm
    from rlinf_core.plugins import PluginHost

__all__ = ["PreparedRun", "compose_run_config", "dry_run", "prepare_run", "printable_config"]

log = logging.getLogger("rlinf.config")


@dataclass(frozen=True)
class PreparedRun:
    """A run configuration taken through the pipeline (:func:`prepare_run`).

    Attributes:
        composition: the composed mapping (``composition.data``: defaults merged, overrides
            applied, ``${...}`` resolved; what ``--print-config`` prints) and where each key came
            from (:class:`rlinf_core.compose.Composition`).
        translation: the ordinary sections it became, with the worker-pool expansion and the
            warnings (:class:`~rlinf_algos.config.translate.Translation`).
        validation: the algorithm, its ``algorithm`` section, the scheduler and the validated
            sections (:class:`~rlinf_algos.config.validate.Validation`).
        resolved: every section with its defaults: what ``config.yaml`` records.
        config_path: the file it came from (names the default run directory), if any.
        host: the plugin host it was validated against.
        plan, devices, memory, inventory_implied, weight_sync: with ``plan=True``: the
            placement plan (``None`` for ``runner.scheduler: local``), each role's device per
            rank, each role's memory estimate, whether the inventory was the one the worker pools
            imply, and the weight sync the run would use (``{"requested", "mode", "members"}``,
            :mod:`rlinf_algos.weight_sync`).
        idle: with ``plan=True``: the placed components this run never starts, and why (the
            algorithm's ``idle_components``: a ``reference`` at ``algorithm.kl_coef: 0``); they
            are left out of the plan, the devices and the weight sync.
    """

    composition: Any
    translation: Translation
    validation: Validation
    resolved: dict[str, Any]
    config_path: Path | None = None
    host: Any = None  # the PluginHost the run was validated against
    plan: Any = None
    devices: dict[str, Any] = field(default_factory=dict)
    memory: Any = None
    inventory_implied: bool = False
    weight_sync: dict[str, Any] | None = None
    idle: dict[str, str] = field(default_factory=dict)

    @property
    def saved(self) -> dict[str, Any]:
        """:attr:`resolved` as it may be saved and printed: ``${oc.env:...}`` kept unresolved
        where it was written, and its values masked elsewhere
        (:meth:`rlinf_core.compose.Composition.unresolved`): what ``config.yaml`` records."""
        return self.composition.unresolved(self.resolved)

    @property
    def composed(self) -> dict[str, Any]:
        """The composed mapping, before translation."""
        return dict(self.composition.data)

    @property
    def config(self) -> ValidatedConfig:
        """The translated sections as ``Algorithm.run`` takes them (carrying the validated ones)."""
        return self.validation.config

    @property
    def algorithm_class(self) -> Any:
        return self.validation.algorithm_class

    @property
    def algorithm_config(self) -> Any:
        return self.validation.algorithm_config

    @property
    def sections(self) -> Any:
        """The validated sections (``RunSections``, ``LMRunConfig``...)."""
        return self.validation.sections

    @property
    def scheduler(self) -> str:
        """The scheduler to start: a registered name, or ``local``."""
        return self.validation.scheduler

    @property
    def expansion(self) -> Any:
        """The worker-pool (seed 003) expansion, or ``None``."""
        return self.translation.expansion

    @property
    def notes(self) -> list[str]:
        """What the worker-pool form became (one line each; none for an ordinary config)."""
        return self.translation.notes

    def algorithm(self) -> Any:
        """A fresh instance of the algorithm with its validated ``algorithm`` section."""
        return self.algorithm_class(self.algorithm_config)

    def report(self) -> dict[str, Any]:
        """What :func:`dry_run` returns: ``config`` (resolved, but ``${oc.env:...}`` kept:
        :attr:`saved`), ``scheduler``, ``plan``,
        ``devices``, ``memory``, ``expansion``, ``inventory_implied``, ``weight_sync``, ``idle``."""
        return {
            "config": self.saved,
            "scheduler": self.scheduler,
            "plan": self.plan,
            "devices": self.devices,
            "memory": self.memory,
            "expansion": self.expansion,
            "inventory_implied": self.inventory_implied,
            "weight_sync": self.weight_sync,
            "idle": self.idle,
        }


def compose_run_config(
    config: Mapping[str, Any] | str | Path,
    overrides: Iterable[str] = (),
    config_path: str | Path | None = None,
) -> dict[str, Any]:
    """Step 1: the config file (or mapping) composed, overridden and resolved
    (:func:`rlinf_core.compose.compose`: defaults lists, ``key=value``, ``+key``, ``~key``,
    ``${...}``). A mapping's defaults are relative to ``config_path``'s folder."""
    return _compose(config, overrides, config_path).data


def printable_config(
    config: Mapping[str, Any] | str | Path,
    overrides: Iterable[str] = (),
    config_path: str | Path | None = None,
) -> dict[str, Any]:
    """:func:`compose_run_config` as ``--print-config`` shows it: ``${oc.env:...}`` kept
    unresolved (:meth:`rlinf_core.compose.Composition.unresolved`), so that no secret is printed
    and ``rlinf train`` takes the output as it is."""
    composition = _compose(config, overrides, config_path)
    return composition.unresolved(composition.data)


def _compose(config: Any, overrides: Iterable[str], config_path: str | Path | None) -> Any:
    from rlinf_core.compose import compose_traced

    base = (
        Path(config_path).parent if config_path is not None and not isinstance(config, str | Path) else None
    )
    return compose_traced(config, list(overrides), base_dir=base)


def _sourced(err: ConfigError, composition: Any) -> ConfigError:
    """``err`` with each problem whose value came from another file of a defaults list, or from
    a command-line override, saying so (``(from conf/env/pendulum.yaml)``); the primary file's
    own keys need no such note. A value ``${oc.env:...}`` brought in is masked
    (:func:`rlinf_core.compose.mask_secrets`)."""
    from rlinf_core.compose import mask_secrets

    problems = []
    for p in err.problems:
        source = composition.source_of(p.path)
        message = mask_secrets(f"{p.message} (from {source})" if source else p.message)
        problems.append(type(p)(p.path, message))
    return ConfigError(problems)


def prepare_run(
    config: Mapping[str, Any] | str | Path,
    overrides: Iterable[str] = (),
    *,
    config_path: str | Path | None = None,
    host: PluginHost | None = None,
    plan: bool = False,
    inventory: Any = None,
    gpu_memory_gib: float | None = None,
) -> PreparedRun:
    """Take ``config`` (a YAML path or a mapping of sections) with ``overrides`` through the
    pipeline (see the module docstring) and return the :class:`PreparedRun`.

    Args:
        config: the run configuration, or the path of its YAML file.
        overrides: ``key=value``, ``+key=value``, ``++key=value``, ``~key``, ``group=name``.
        config_path: where a mapping came from (its defaults are relative to its folder; names
            the default run directory). Default: ``config`` itself when it is a path.
        host: the :class:`~rlinf_core.plugins.PluginHost` (default: the installed plugins).
        plan: also plan the placement, the devices and the memory (``--dry-run``).
        inventory: with ``plan``: accelerators per node, as the scheduler's
            :meth:`~rlinf_core.Scheduler.plan_placement` takes them (the inventory's YAML data, or
            a whole number of GPUs on every node; ``None``: none, or for a worker-pool config the
            GPUs its pools imply).
        gpu_memory_gib: with ``plan``: GiB per GPU to check each role's estimated memory against.

    Raises:
        ConfigError: every problem, each with its YAML path (the seed key, for a worker-pool
            config); RLinf's ignored ``cluster`` keys are logged as one warning.
    """
    from rlinf_core.plugins import load_plugins

    host = host or load_plugins()
    if config_path is None and isinstance(config, str | Path):
        config_path = config
    composition = _compose(config, overrides, config_path)
    try:
        translation = translate(composition.data, host)
    except ConfigError as err:
        raise _sourced(err, composition) from None
    for warning in translation.warnings:
        log.warning("warning: %s", warning)
    try:
        validation = validate(translation.data, host)
    except ConfigError as err:
        raise _sourced(translation.translate_error(err), composition) from None
    prepared = PreparedRun(
        composition,
        translation,
        validation,
        validation.resolved(),
        Path(config_path) if config_path is not None else None,
        host,
    )
    return _planned(prepared, inventory, gpu_memory_gib) if plan else prepared


def _planned(prepared: PreparedRun, inventory: Any, gpu_memory_gib: float | None) -> PreparedRun:
    """Step 4: ``prepared`` with its placement plan (the scheduler's
    :meth:`~rlinf_core.Scheduler.plan_placement`), devices per role, weight sync and memory
    estimates; a plan whose roles share a GPU they cannot share, a ``rollout.weight_sync`` its
    devices do not allow, or estimated memory that cannot fit, is a :class:`ConfigError`."""
    from dataclasses import replace

    from rlinf_algos.devices import local_devices, plan_devices, shared_gpu_problems
    from rlinf_algos.memory import check_fits, planned_memory

    data = prepared.config
    plan = None
    implied = False
    idle: dict[str, str] = {}
    if prepared.scheduler != LOCAL:
        scheduler_cls = prepared.host.schedulers.get(prepared.scheduler)
        if inventory is None and prepared.expansion is not None:
            inventory, implied = prepared.expansion.inventory, True
        cluster, idle = _without_idle(prepared.algorithm_class, data)
        try:
            plan = scheduler_cls.plan_placement({"cluster": cluster}, inventory, hardware=prepared.host)
        except ConfigError as err:
            raise _sourced(prepared.translation.translate_error(err), prepared.composition) from None
    device = str((prepared.resolved.get("runner") or {}).get("device", "cpu"))  # with its default
    shared = shared_gpu_problems(plan, device)
    if shared:
        raise ConfigError(shared[0], "cluster.component_placement")
    devices = plan_devices(plan, device)
    try:
        weight_sync = _weight_sync(prepared, plan, devices)
    except ConfigError as err:
        raise _sourced(prepared.translation.translate_error(err), prepared.composition) from None
    memory = planned_memory(prepared.algorithm_class, prepared.resolved, devices, gpu_memory_gib)
    if plan is None:  # runner.scheduler: local: every role in this process, on one device
        devices = local_devices(device)
    check_fits(memory or [])
    return replace(
        prepared,
        plan=plan,
        devices=devices,
        memory=memory,
        inventory_implied=implied,
        weight_sync=weight_sync,
        idle=idle,
    )


def _without_idle(algo_cls: type[Algorithm], data: Mapping[str, Any]) -> tuple[Any, dict[str, str]]:
    """The ``cluster`` section without the placed components the run never starts (the
    algorithm's ``idle_components(config)``: ``{name: why}``), and those."""
    cluster = data["cluster"]
    find = getattr(algo_cls, "idle_components", None)
    placement = cluster.get("component_placement") if isinstance(cluster, Mapping) else None
    idle = dict(find(data)) if find is not None else {}
    if not idle or not isinstance(placement, Mapping):
        return cluster, {}
    kept = {k: v for k, v in placement.items() if any(n.strip() not in idle for n in str(k).split(","))}
    gone = {n.strip() for k in placement if k not in kept for n in str(k).split(",")}
    return {**cluster, "component_placement": kept}, {n: why for n, why in idle.items() if n in gone}


def _weight_sync(prepared: PreparedRun, plan: Any, devices: Mapping[str, Any]) -> dict[str, Any]:
    """The weight sync the run would use (``rollout.weight_sync`` against the planned devices of
    the learner's rank 0 and the placed consumers); ``local`` in process."""
    from rlinf_algos.weight_sync import WEIGHT_ROLES, choose_weight_sync, requested_mode

    data = prepared.config
    mode = requested_mode(data)
    if plan is None:
        return {"requested": mode, "mode": "local", "members": {}}
    model = data.get("model") or {}
    adapter_only = bool(getattr(prepared.algorithm_class, "lora_publishes_adapter", False)) and bool(
        model.get("lora") if isinstance(model, Mapping) else None
    )
    roles = [r for r in WEIGHT_ROLES if r in devices]
    chosen, members = choose_weight_sync(mode, devices, adapter_only=adapter_only, roles=roles)
    return {"requested": mode, "mode": chosen, "members": members}


def dry_run(
    config: Mapping[str, Any] | str | Path,
    *,
    overrides: Iterable[str] = (),
    host: PluginHost | None = None,
    inventory: Any = None,
    gpu_memory_gib: float | None = None,
) -> dict[str, Any]:
    """:func:`prepare_run` with ``plan=True``, as the dict ``rlinf train --dry-run`` prints
    (:meth:`PreparedRun.report`): ``{"config": resolved config, "scheduler": name, "plan":
    placement plan or None, "devices", "memory": per-role estimates or None, "expansion":
    SeedExpansion or None, "inventory_implied": bool}``. Starts nothing."""
    prepared = prepare_run(
        config, overrides, host=host, plan=True, inventory=inventory, gpu_memory_gib=gpu_memory_gib
    )
    return prepared.report()
