"""The ``metaworld`` env family: MetaWorld's 50 Sawyer manipulation tasks (``reach-v3``,
``push-v3``...) and its ``MT10`` / ``MT50`` suites, in MetaWorld's own interpreter.

MetaWorld 3.1 pins ``mujoco==3.3.0`` (3.0 crashes on MuJoCo 4, which rlinf's lock holds), so the
simulator runs in a child process of the env worker (:mod:`.subproc`) in the venv ``rlinf env
setup metaworld`` makes, importing MetaWorld and numpy only. ``env.id`` is a task or a suite
(slot ``i`` runs the suite's task ``i % len(suite)``, and the state ends with a one-hot of the
task within the suite, as MetaWorld's MT benchmarks give it); each task's 50 fixed initial states are
the variations of its ``MT1`` benchmark with seed 0. Success is MetaWorld's ``info["success"]``;
episodes last 500 steps (``env.max_episode_steps`` shortens them) and do not end on success.
``env.options``: ``camera`` (``corner``, ``topview``, ``behindGripper``, ``gripperPOV``,
``corner2``, ``corner3``) and ``reward`` (``dense``, MetaWorld's shaped reward, the default;
``success``: 1 on each step the task is solved, else 0; or ``dense_success``: the shaped reward
plus 10 on each step the task is solved). The pixel obs modes render that camera at ``env.image_size`` with
the scene effects off, the right way up, beside the task's instruction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rlinf_algos.families import SubprocessFamily
from rlinf_core.envs import Interpreter, TaskInfo
from rlinf_core.errors import ConfigProblem

__all__ = ["MT10", "MT50", "MetaWorldFamily"]

MT10 = (
    "reach-v3",
    "push-v3",
    "pick-place-v3",
    "door-open-v3",
    "drawer-open-v3",
    "drawer-close-v3",
    "button-press-topdown-v3",
    "peg-insert-side-v3",
    "window-open-v3",
    "window-close-v3",
)
"""MetaWorld's MT10 tasks, in its order."""

MT50 = (
    "assembly-v3", "basketball-v3", "bin-picking-v3", "box-close-v3", "button-press-topdown-v3",
    "button-press-topdown-wall-v3", "button-press-v3", "button-press-wall-v3", "coffee-button-v3",
    "coffee-pull-v3", "coffee-push-v3", "dial-turn-v3", "disassemble-v3", "door-close-v3",
    "door-lock-v3", "door-open-v3", "door-unlock-v3", "hand-insert-v3", "drawer-close-v3",
    "drawer-open-v3", "faucet-open-v3", "faucet-close-v3", "hammer-v3", "handle-press-side-v3",
    "handle-press-v3", "handle-pull-side-v3", "handle-pull-v3", "lever-pull-v3", "pick-place-wall-v3",
    "pick-out-of-hole-v3", "pick-place-v3", "plate-slide-v3", "plate-slide-side-v3",
    "plate-slide-back-v3", "plate-slide-back-side-v3", "peg-insert-side-v3", "peg-unplug-side-v3",
    "soccer-v3", "stick-push-v3", "stick-pull-v3", "push-v3", "push-wall-v3", "push-back-v3",
    "reach-v3", "reach-wall-v3", "shelf-place-v3", "sweep-into-v3", "sweep-v3", "window-open-v3",
    "window-close-v3",
)  # fmt: skip
"""MetaWorld's 50 tasks (MT50)."""

CAMERAS = ("corner", "corner2", "corner3", "topview", "behindGripper", "gripperPOV")
REWARDS = ("dense", "success", "dense_success")
"""``env.options.reward``: MetaWorld's own shaped reward (0-10); 1 on every step the task is solved
(0 otherwise), whose return counts the steps spent in success, so it rewards exactly what
``success_at_end`` measures; or the shaped reward plus 10 on every solved step, which keeps the
shaping and makes staying solved pay most (MetaWorld's shaped reward alone can peak off success:
door-open-v3's pays its maximum for a door opened past the goal that ``info["success"]`` refuses)."""
OPTIONS = ("camera", "reward")


class MetaWorldFamily(SubprocessFamily):
    PLUGIN_NAME = "metaworld"
    description = "MetaWorld 3.1 (MuJoCo 3.3): 50 Sawyer tasks, MT10/MT50 suites; in its own interpreter"
    interpreter = Interpreter(
        python="3.11",
        requirements=("metaworld==3.1.1", "gymnasium[mujoco]>=1.1"),
        imports=("metaworld", "numpy", "mujoco"),
    )
    setup_hint = "rlinf env setup metaworld"
    scripted_expert = True
    backend = "metaworld_backend.py"

    def suites(self) -> Mapping[str, Sequence[str]]:
        return {"MT10": MT10, "MT50": MT50}

    def tasks(self, request: Any) -> Sequence[TaskInfo]:
        from rlinf_algos.families.child.metaworld_tasks import instruction

        names = self.suites().get(str(request.id)) or [str(request.id)]
        return [TaskInfo(t, instruction(t), 50) for t in names]

    def own_problems(self, env: Mapping[str, Any]) -> list[ConfigProblem]:
        import difflib

        problems = []
        env_id = env.get("id")
        if isinstance(env_id, str) and env_id not in MT50 and env_id not in self.suites():
            close = difflib.get_close_matches(env_id, [*MT50, *self.suites()], n=3, cutoff=0.6)
            hint = f"did you mean {', '.join(map(repr, close))}? " if close else ""
            problems.append(
                ConfigProblem(
                    "env.id",
                    f"{env_id!r} is no MetaWorld task or suite ({hint}tasks look like 'reach-v3'; suites: MT10, MT50)",
                )
            )
        options = env.get("options") or {}
        for key in options:
            if key not in OPTIONS:
                problems.append(
                    ConfigProblem(f"env.options.{key}", f"metaworld takes the options: {', '.join(OPTIONS)}")
                )
        for key, valid in (("camera", CAMERAS), ("reward", REWARDS)):
            if key in options and options[key] not in valid:
                problems.append(
                    ConfigProblem(
                        f"env.options.{key}", f"{options[key]!r} is no {key}; one of: {', '.join(valid)}"
                    )
                )
        return problems

    def backend_spec(self, request: Any, tasks: list[str]) -> dict[str, Any]:
        options = request.options or {}
        return {
            "suite": list(self.suites().get(request.id, [])),
            "camera": options.get("camera", "corner"),
            "reward": options.get("reward", "dense"),
        }
