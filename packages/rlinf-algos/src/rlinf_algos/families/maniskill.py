"""The ``maniskill`` env family: ManiSkill3's tasks (``PushCube-v1``, ``PickCube-v1``...) as one
batched vector env in rlinf's own interpreter (:class:`~rlinf_algos.maniskill_env.
ManiSkillVectorEnv`: ManiSkill's own ``num_envs`` batching on the GPU simulator, one scene per
sub-env on the CPU one).

``rlinf env setup maniskill`` caches the Vulkan driver SAPIEN needs even for state observations
(Mesa's lavapipe >= 24.3, :mod:`rlinf_algos.vulkan`); nothing needs exporting afterwards.
``env.options``: ``sim_backend`` (``cpu`` here, ``gpu`` on a GPU machine: nothing else changes),
``render_backend``, ``control_mode``, ``camera``, ``shader_pack`` (``minimal`` by default: the
cheap one on a CPU), ``ignore_terminations`` (run every episode to its time limit, RLinf's
setting; ``success_once`` then says whether it succeeded). ``env.kwargs`` go to ManiSkill's
``gym.make``. The pixel obs modes render the task's first camera (or ``camera``) at
``env.image_size`` beside the task's instruction. Only tasks whose assets ship in the wheel build
offline (the suite ``offline`` lists the tabletop ones).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rlinf_core.envs import EnvFamily, TaskInfo
from rlinf_core.errors import ConfigProblem

__all__ = ["INSTRUCTIONS", "ManiSkillFamily"]

INSTRUCTIONS = {
    "PushCube-v1": "push the cube to the goal region",
    "PickCube-v1": "pick up the cube and move it to the goal position",
    "StackCube-v1": "stack the red cube on the green cube",
    "PegInsertionSide-v1": "insert the peg into the hole from the side",
    "PushT-v1": "push the T-shaped block onto the target",
    "PullCube-v1": "pull the cube to the goal region",
    "LiftPegUpright-v1": "lift the peg upright",
    "PokeCube-v1": "poke the cube to the goal with the peg",
    "RollBall-v1": "roll the ball to the goal region",
    "PlaceSphere-v1": "place the sphere into the bin",
}
"""Instructions of the tasks that build offline (ManiSkill gives none)."""

OPTIONS = ("sim_backend", "render_backend", "control_mode", "camera", "shader_pack", "ignore_terminations")


class ManiSkillFamily(EnvFamily):
    PLUGIN_NAME = "maniskill"
    description = "ManiSkill3 (SAPIEN): batched tabletop tasks; CPU sim here, GPU sim on a GPU machine"
    setup_hint = "rlinf env setup maniskill"

    def suites(self) -> Mapping[str, Sequence[str]]:
        return {"offline": ("PushCube-v1", "PickCube-v1", "StackCube-v1", "PegInsertionSide-v1", "PushT-v1")}

    def tasks(self, request: Any) -> Sequence[TaskInfo]:
        names = self.suites().get(str(request.id)) or [str(request.id)]
        return [TaskInfo(n, INSTRUCTIONS.get(n, n.removesuffix("-v1")), 0) for n in names]

    def setup(self, log: Any = print) -> None:
        from rlinf_algos.vulkan import apply_vulkan_env, check_vulkan_device, setup_vulkan

        done = setup_vulkan(log=log)
        apply_vulkan_env()
        log(f"maniskill: Vulkan driver {done.version} at {done.icd_file}")
        try:
            log(f"maniskill: SAPIEN renders with {check_vulkan_device()}")
        except ImportError:  # the extra is not installed: the driver is still cached
            log("maniskill: SAPIEN is not installed here (pip install 'rlinf-algos[maniskill]')")

    def missing(self) -> str | None:
        import os

        from rlinf_algos.vulkan import vulkan_env

        if vulkan_env() or os.environ.get("VK_ICD_FILENAMES") or os.environ.get("VK_DRIVER_FILES"):
            return None
        from rlinf_algos.vulkan import has_gpu_driver

        return None if has_gpu_driver() else "a Vulkan driver"

    def problems(self, env: Mapping[str, Any]) -> list[ConfigProblem]:
        problems = []
        options = env.get("options") or {}
        for key in options:
            if key not in OPTIONS:
                problems.append(
                    ConfigProblem(f"env.options.{key}", f"maniskill takes the options {', '.join(OPTIONS)}")
                )
        if options.get("sim_backend", "cpu") not in ("cpu", "gpu"):
            problems.append(ConfigProblem("env.options.sim_backend", "one of: cpu, gpu"))
        if env.get("wrappers"):
            problems.append(ConfigProblem("env.wrappers", "the maniskill family takes no env.wrappers"))
        return problems

    def make_vector(self, request: Any) -> Any:
        from rlinf_algos.families import suite_tasks
        from rlinf_algos.maniskill_env import ManiSkillVectorEnv
        from rlinf_core.errors import ConfigError

        problems = self.problems({"options": request.options, "wrappers": request.wrappers})
        if problems:
            raise ConfigError(problems)
        tasks = request.tasks or suite_tasks(self, request.id, request.num_envs)
        if len(set(tasks)) != 1:
            raise ConfigError(
                f"a ManiSkill vector env runs one task; {request.id!r} spreads {len(set(tasks))} over the env "
                "slots (give one task as env.id)",
                path="env.id",
            )
        task = tasks[0]
        options = dict(request.options or {})
        return ManiSkillVectorEnv(
            task,
            request.num_envs,
            obs_mode=request.obs_mode,
            image_size=tuple(request.image_size),
            max_episode_steps=request.max_episode_steps,
            instruction=None if request.obs_mode == "state" else INSTRUCTIONS.get(task, task),
            env_kwargs=dict(request.kwargs or {}) or None,
            seed=request.seed,
            **options,
        )
