"""``rlinf/FrankaInstructReach-v0``: reach the cube that a language instruction names.

Several cubes of distinct colours lie at random places on the table in front of the twin; the
instruction (``"reach the red cube"``) names one of them. The target's position is not in the
observation: a policy has to find the named colour in the image and steer the end effector
(visible in the same image, its position also in ``state``) above it. The cubes lie on the
table, so finding one is a 2-D localisation problem, and the ``table`` camera sees the whole
region they are drawn from.

* Observation (``obs_mode="vla"``, the default): ``image`` ``(H, W, 3)`` uint8 from the ``table``
  camera (further ``cameras`` as ``image_<name>``), ``state`` ``float32`` (21: joint positions
  and velocities, EE position and quaternion; 22 with ``gripper=True``) and ``instruction``
  (a ``str``). ``obs_mode="dict"`` / ``"flat"`` are privileged variants whose ``target_pos`` is
  the reach point (for state-based sanity checks).
* Action: the end-effector position delta ``Box(-1, 1, (3,))`` (times ``max_delta_pos``, 5 cm).
  The safety box's floor is the reach height (``cube_size + reach_height`` above the table):
  nothing is to be reached lower, and a policy that pushes down ends at the reach points' height
  instead of 4 cm below it, inside the cubes.
* Reward: ``-distance`` (m) from the end effector to the named cube's reach point
  (``reach_height`` above its top face), plus ``success_bonus`` on a step that succeeds.
* ``info["success"]`` and ``info["is_success"]``: ``distance < success_threshold`` (5 cm), every
  step; ``info["target_color"]`` names the cube.
* Episodes: 50 steps at 10 Hz (the gymnasium registration's ``max_episode_steps``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rlinf_core.errors import ConfigError
from rlinf_hw_franka.env import DEFAULT_SAFETY_BOX, FrankaEnv, check_instruction

__all__ = ["COLORS", "DEFAULT_CUBE_REGION", "FrankaInstructReachEnv"]

#: The colours a cube can have (RGBA), chosen far apart in RGB and from the table's brown.
COLORS: dict[str, tuple[float, float, float, float]] = {
    "red": (0.9, 0.1, 0.1, 1.0),
    "green": (0.1, 0.75, 0.1, 1.0),
    "blue": (0.1, 0.2, 0.95, 1.0),
    "yellow": (0.95, 0.85, 0.1, 1.0),
    "magenta": (0.85, 0.1, 0.85, 1.0),
    "cyan": (0.1, 0.85, 0.9, 1.0),
    "white": (0.97, 0.97, 0.97, 1.0),
    "black": (0.05, 0.05, 0.05, 1.0),
}
#: Where cube centres are drawn: ``[[x_min, y_min], [x_max, y_max]]`` (m, base frame, on the table).
DEFAULT_CUBE_REGION: tuple[tuple[float, float], tuple[float, float]] = ((0.35, -0.25), (0.65, 0.25))
_PLACEMENT_TRIES = 1000


class FrankaInstructReachEnv(FrankaEnv):
    """The instruction-conditioned reach task on the MuJoCo twin (see the module docstring).

    Parameters:
        num_targets: cubes per episode (their colours drawn from ``colors`` without repeats).
        colors: names from :data:`COLORS` to draw from.
        cube_region: ``[[x_min, y_min], [x_max, y_max]]`` where cube centres lie (m).
        min_separation: least distance between two cube centres (m).
        cube_size: cube edge (m).
        reach_height: height of the reach point above the cube's top face (m).
        instruction_template: the instruction, ``{color}`` replaced by the target's colour.
        success_bonus: reward added on a step within ``success_threshold`` (default 0: the
            reward is ``-distance`` alone).
        **kwargs: :class:`~rlinf_hw_franka.env.FrankaEnv` arguments; the defaults differ:
            ``obs_mode="vla"`` (with ``cameras=["table"]``), ``image_size=(64, 64)``,
            ``gripper=False``, ``success_threshold=0.05``, ``sim_timestep=0.005`` (20 physics
            steps per control period instead of 50), and ``safety_box``'s floor is the reach
            height, ``cube_size + reach_height`` (0.09 m; :data:`~rlinf_hw_franka.env.DEFAULT_SAFETY_BOX`
            otherwise). ``backend`` is always the twin.
    """

    def __init__(
        self,
        *,
        num_targets: int = 3,
        colors: Sequence[str] = ("red", "green", "blue", "yellow"),
        cube_region: Sequence[Sequence[float]] = DEFAULT_CUBE_REGION,
        min_separation: float = 0.12,
        cube_size: float = 0.06,
        reach_height: float = 0.03,
        instruction_template: str = "reach the {color} cube",
        success_bonus: float = 0.0,
        **kwargs: Any,
    ) -> None:
        if kwargs.pop("backend", "mujoco") != "mujoco":
            raise ConfigError("FrankaInstructReachEnv runs on the MuJoCo twin only (backend='mujoco')")
        colors = [str(c) for c in colors]
        unknown = [c for c in colors if c not in COLORS]
        if unknown:
            raise ConfigError(f"unknown cube colour(s) {unknown}; known: {', '.join(COLORS)}")
        if len(set(colors)) != len(colors):
            raise ConfigError(f"colors must be distinct, got {colors}")
        if not 1 <= int(num_targets) <= len(colors):
            raise ConfigError(
                f"num_targets must be between 1 and the number of colors ({len(colors)}), got {num_targets!r}"
            )
        try:
            lo = np.asarray(cube_region[0], dtype=np.float64).reshape(2)
            hi = np.asarray(cube_region[1], dtype=np.float64).reshape(2)
        except (TypeError, ValueError, IndexError):
            raise ConfigError(
                f"cube_region must be [[x_min, y_min], [x_max, y_max]] (m), got {cube_region!r}"
            ) from None
        if not np.all(lo <= hi):
            raise ConfigError(f"cube_region: minimum above maximum: {lo.tolist()} > {hi.tolist()}")
        if not (cube_size > 0 and reach_height >= 0 and min_separation >= 0):
            raise ConfigError(
                "cube_size must be positive and reach_height, min_separation not negative, got "
                f"{cube_size!r}, {reach_height!r}, {min_separation!r}"
            )
        if "{color}" not in instruction_template:
            raise ConfigError(f"instruction_template must contain '{{color}}', got {instruction_template!r}")
        for c in colors:
            check_instruction(instruction_template.format(color=c), "instruction_template")
        self.num_targets = int(num_targets)
        self.colors = colors
        self.cube_lo, self.cube_hi = lo, hi
        self.min_separation = float(min_separation)
        self.cube_size = float(cube_size)
        self.reach_height = float(reach_height)
        self.instruction_template = instruction_template
        self.success_bonus = float(success_bonus)
        defaults: dict[str, Any] = {
            "obs_mode": "vla",
            "image_size": (64, 64),
            "gripper": False,
            "success_threshold": 0.05,
            "sim_timestep": 0.005,
        }
        # The floor of the safety box at the reach height: below it there is nothing to reach
        # (every reach point is at that height), and a floor lower down makes pushing down free:
        # the clipped command costs nothing and absorbs the exploration noise, so PPO's policy
        # learnt to press the hand onto a floor 4 cm below the reach points (docs/instruct-reach.md).
        (x0, y0, _), high = DEFAULT_SAFETY_BOX
        defaults["safety_box"] = ((x0, y0, self.cube_size + self.reach_height), tuple(high))
        kwargs = {**defaults, **kwargs}
        kwargs.setdefault("instruction", instruction_template.format(color=colors[0]))
        super().__init__("mujoco", **kwargs)
        #: This episode's cubes: colour names, centres (n, 3) and the index of the named one.
        self.cube_colors: list[str] = []
        self.cube_positions = np.zeros((self.num_targets, 3))
        self.target_index = 0

    def _scene_options(self) -> dict[str, Any]:
        return {"cubes": self.num_targets, "cube_size": self.cube_size, "target_marker": False}

    def _sample_target(self, options: dict[str, Any]) -> np.ndarray:
        rng = self.np_random
        picks = rng.choice(len(self.colors), size=self.num_targets, replace=False)
        self.cube_colors = [self.colors[int(i)] for i in picks]
        centres: list[np.ndarray] = []
        for _ in range(_PLACEMENT_TRIES * self.num_targets):
            xy = rng.uniform(self.cube_lo, self.cube_hi)
            if all(np.linalg.norm(xy - c) >= self.min_separation for c in centres):
                centres.append(xy)
                if len(centres) == self.num_targets:
                    break
        else:
            raise ConfigError(
                f"cannot place {self.num_targets} cubes {self.min_separation} m apart in cube_region "
                f"{self.cube_lo.tolist()}..{self.cube_hi.tolist()}; lower min_separation or num_targets"
            )
        half = self.cube_size / 2
        self.cube_positions = np.array([[x, y, half] for x, y in centres])
        self.target_index = int(rng.integers(self.num_targets))
        self.backend.set_cubes(  # type: ignore[attr-defined]
            self.cube_positions, np.array([COLORS[c] for c in self.cube_colors])
        )
        self.instruction = self.instruction_template.format(color=self.target_color)
        return self._goal(self.cube_positions[self.target_index])

    def _goal(self, centre: np.ndarray) -> np.ndarray:
        """Where the end effector should be for a cube centred at ``centre``: its reach point,
        ``reach_height`` above its top face."""
        return centre + np.array([0.0, 0.0, self.cube_size / 2 + self.reach_height])

    def candidate_actions(self) -> np.ndarray:
        """``[num_targets, A]``: the demonstrator's action towards each cube's reach point, the
        named one's (:meth:`expert_action`) among them. A warm start that follows one of them
        chosen at random (``model.warm_start.actions: decoy``) shows the hand over cubes without
        telling which cube the instruction names."""
        return np.stack([self.reach_action(self._goal(c)) for c in self.cube_positions])

    @property
    def target_color(self) -> str:
        """The colour the instruction names (after a reset)."""
        return self.cube_colors[self.target_index] if self.cube_colors else ""

    def _reward(self, distance: float, success: bool) -> float:
        return -distance + (self.success_bonus if success else 0.0)

    def _info(self, st: Any, *, overran: bool, clipped: bool) -> dict[str, Any]:
        info = super()._info(st, overran=overran, clipped=clipped)
        info["target_color"] = self.target_color
        return info
