"""The Franka Emika Panda (and FR3) as MuJoCo MJCF, written here from published parameters.

Nothing is downloaded: the model is generated from the tables below.

* Kinematics: Franka's published modified Denavit-Hartenberg parameters (the "Robot and
  interface specifications" page of the FCI documentation): ``d1 = 0.333``, ``d3 = 0.316``,
  ``a4 = 0.0825``, ``a5 = -0.0825``, ``d5 = 0.384``, ``a7 = 0.088``, flange ``d = 0.107``
  (metres), with the alternating +-90 degree link twists. The FR3 has the same kinematic
  chain. The body frames below are exactly the DH frames, so ``linkN`` here is frame ``N`` of
  the documentation and of libfranka's ``O_T_EE`` computations.
* Joint limits and torque limits: the Panda datasheet (``q_min``/``q_max``, 87 Nm on joints
  1-4, 12 Nm on 5-7).
* Masses, centres of mass and inertia tensors: the identified dynamic parameters published by
  Gaz, Cognetti, Oliva, Robuffo Giordano and De Luca, "Dynamic Identification of the Franka
  Emika Panda Robot With Retrieval of Feasible Parameters Using Penalty-Based Optimization",
  IEEE RA-L 2019 (also the values MuJoCo Menagerie ships).
* Hand: 0.73 kg, fingers on two prismatic joints of 0-40 mm each; the TCP sits 0.1034 m from
  the flange, rotated -45 degrees about z (Franka's default ``F_T_EE``).

Geometry is simplified to capsules (collision and visual alike): good enough for contacts and
for franka-sim's self-collision monitor, which looks for geoms named ``linkN_collision``. No
meshes, so the file is self-contained.

Two uses:

* :func:`panda_mjcf` with ``hand=True, scene=True`` is the MuJoCo twin that
  :class:`rlinf_hw_franka.env.FrankaEnv` simulates (a table, a target marker, cameras).
* :func:`panda_mjcf` with ``hand=False, scene=False`` is the bare 7-joint arm that
  ``franka-sim`` loads through ``$FR3_MJCF``, so the protocol simulator and the twin are the
  same robot. ``python -m rlinf_hw_franka.mjcf OUT.xml`` writes it.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from rlinf_core.io import atomic_write_text

__all__ = [
    "CUBE_SIZE",
    "FINGER_TRAVEL",
    "FLANGE_OFFSET",
    "HOME_Q",
    "JOINT_LIMITS",
    "TCP_OFFSET",
    "TORQUE_LIMITS",
    "panda_mjcf",
    "write_mjcf",
]

#: Joint ranges (rad) from the Panda datasheet.
JOINT_LIMITS: tuple[tuple[float, float], ...] = (
    (-2.8973, 2.8973),
    (-1.7628, 1.7628),
    (-2.8973, 2.8973),
    (-3.0718, -0.0698),
    (-2.8973, 2.8973),
    (-0.0175, 3.7525),
    (-2.8973, 2.8973),
)
#: Joint torque limits (Nm).
TORQUE_LIMITS: tuple[float, ...] = (87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0)
#: The "ready" pose libfranka's examples and franka-sim start from (gripper pointing down).
HOME_Q: tuple[float, ...] = (0.0, -0.785398, 0.0, -2.356194, 0.0, 1.570796, 0.785398)
#: Flange offset along link7's z (m) and TCP offset of the Franka Hand along the flange z (m).
FLANGE_OFFSET = 0.107
TCP_OFFSET = 0.1034
#: Maximal opening of one finger (m); the hand opens to twice this.
FINGER_TRAVEL = 0.04
#: Edge of the task cubes (m).
CUBE_SIZE = 0.05
#: The ``table`` camera: opposite the robot, above the table's far edge, looking down at the
#: region in front of the robot (x 0.3..0.7, y -0.3..0.3 m) and the hand above it.
TABLE_CAMERA_POS: tuple[float, ...] = (0.95, 0.0, 0.95)
TABLE_CAMERA_XYAXES: tuple[float, ...] = (0.0, 1.0, 0.0, -0.85, 0.0, 0.55)
TABLE_CAMERA_FOVY = 50.0


@dataclass(frozen=True)
class _Link:
    """One body of the chain: pose in its parent (DH), inertial (Gaz et al. 2019), capsules."""

    name: str
    pos: tuple[float, float, float]
    quat: tuple[float, float, float, float]
    mass: float
    com: tuple[float, float, float]
    # fullinertia: ixx iyy izz ixy ixz iyz
    inertia: tuple[float, float, float, float, float, float]
    capsules: tuple[tuple[tuple[float, ...], float], ...]  # (fromto, radius)


_S = math.sqrt(0.5)
_RX_NEG90 = (_S, -_S, 0.0, 0.0)  # alpha = -pi/2
_RX_POS90 = (_S, _S, 0.0, 0.0)  # alpha = +pi/2

_LINKS: tuple[_Link, ...] = (
    _Link(
        "link0",
        (0.0, 0.0, 0.0),
        (1.0, 0.0, 0.0, 0.0),
        0.629769,
        (-0.041018, -0.00014, 0.049974),
        (0.00315, 0.00388, 0.004285, 8.2904e-7, 0.00015, 8.2299e-6),
        (((-0.04, 0.0, 0.03, 0.0, 0.0, 0.13), 0.08),),
    ),
    _Link(
        "link1",
        (0.0, 0.0, 0.333),
        (1.0, 0.0, 0.0, 0.0),
        4.970684,
        (0.003875, 0.002081, -0.04762),
        (0.70337, 0.70661, 0.009117, -0.000139, 0.006772, 0.019169),
        (((0.0, 0.0, -0.17, 0.0, 0.0, -0.03), 0.065),),
    ),
    _Link(
        "link2",
        (0.0, 0.0, 0.0),
        _RX_NEG90,
        0.646926,
        (-0.003141, -0.02872, 0.003495),
        (0.007962, 0.02811, 0.025995, -0.003925, 0.010254, 0.000704),
        (((0.0, 0.0, -0.06, 0.0, 0.0, 0.06), 0.065), ((0.0, -0.03, 0.0, 0.0, -0.18, 0.0), 0.06)),
    ),
    _Link(
        "link3",
        (0.0, -0.316, 0.0),
        _RX_POS90,
        3.228604,
        (0.027518, 0.039252, -0.066502),
        (0.037242, 0.036155, 0.01083, -0.004761, -0.011396, -0.012805),
        (((0.0, 0.0, -0.12, 0.0, 0.0, -0.03), 0.06), ((0.0825, 0.0, -0.06, 0.0825, 0.0, 0.03), 0.055)),
    ),
    _Link(
        "link4",
        (0.0825, 0.0, 0.0),
        _RX_POS90,
        3.587895,
        (-0.05317, 0.104419, 0.027454),
        (0.025853, 0.019552, 0.028323, 0.007796, -0.001332, 0.008641),
        (((0.0, 0.0, -0.03, 0.0, 0.0, 0.06), 0.055), ((-0.03, 0.06, 0.0, -0.0825, 0.12, 0.0), 0.055)),
    ),
    _Link(
        "link5",
        (-0.0825, 0.384, 0.0),
        _RX_NEG90,
        1.225946,
        (-0.011953, 0.041065, -0.038437),
        (0.035549, 0.029474, 0.008627, -0.002117, -0.004037, 0.000229),
        (((0.0, 0.0, -0.25, 0.0, 0.0, -0.12), 0.055), ((0.0, 0.075, -0.11, 0.0, 0.075, -0.02), 0.035)),
    ),
    _Link(
        "link6",
        (0.0, 0.0, 0.0),
        _RX_POS90,
        1.666555,
        (0.060149, -0.014117, -0.010517),
        (0.001964, 0.004354, 0.005433, 0.000109, -0.001158, 0.000341),
        (((0.0, 0.0, -0.04, 0.0, 0.0, 0.02), 0.055), ((0.02, 0.0, 0.0, 0.088, 0.0, 0.0), 0.045)),
    ),
    _Link(
        "link7",
        (0.088, 0.0, 0.0),
        _RX_POS90,
        0.735522,
        (0.010517, -0.004252, 0.061597),
        (0.012516, 0.010027, 0.004815, -0.000428, -0.001196, -0.000741),
        (((0.0, 0.0, 0.0, 0.0, 0.0, 0.08), 0.045),),
    ),
)


def _fmt(values: tuple[float, ...] | list[float]) -> str:
    return " ".join(f"{v:.9g}" for v in values)


def _arm_body(i: int, hand: bool, indent: str) -> str:
    link = _LINKS[i]
    lines = [
        f'{indent}<body name="{link.name}" pos="{_fmt(link.pos)}" quat="{_fmt(link.quat)}" gravcomp="1">'
    ]
    inner = indent + "  "
    lines.append(
        f'{inner}<inertial mass="{link.mass:.9g}" pos="{_fmt(link.com)}" fullinertia="{_fmt(link.inertia)}"/>'
    )
    if i > 0:
        lo, hi = JOINT_LIMITS[i - 1]
        lines.append(
            f'{inner}<joint name="joint{i}" class="panda_joint{1 if i <= 4 else 2}" range="{lo:.9g} {hi:.9g}"/>'
        )
    for k, (fromto, radius) in enumerate(link.capsules):
        # The first capsule of every link carries the name franka-sim's self-collision
        # monitor looks for.
        name = f"{link.name}_collision" if k == 0 else f"{link.name}_collision{k}"
        lines.append(
            f'{inner}<geom name="{name}" class="panda_geom" fromto="{_fmt(fromto)}" size="{radius:.9g}"/>'
        )
    if i + 1 < len(_LINKS):
        lines.append(_arm_body(i + 1, hand, inner))
    else:
        lines.append(_flange(hand, inner))
    lines.append(f"{indent}</body>")
    return "\n".join(lines)


def _flange(hand: bool, indent: str) -> str:
    inner = indent + "  "
    lines = [f'{indent}<body name="link8" pos="0 0 {FLANGE_OFFSET}">', f'{inner}<site name="flange"/>']
    if hand:
        # Franka Hand: -45 degrees about the flange z (quat of -pi/4 about z).
        c, s = math.cos(-math.pi / 8), math.sin(-math.pi / 8)
        i2 = inner + "  "
        i3 = i2 + "  "
        lines += [
            f'{inner}<body name="hand" quat="{c:.9g} 0 0 {s:.9g}" gravcomp="1">',
            f'{i2}<inertial mass="0.73" pos="-0.01 0 0.03" diaginertia="0.001 0.0025 0.0017"/>',
            f'{i2}<geom name="hand_collision" class="panda_geom" fromto="0 -0.085 0.055 0 0.085 0.055" size="0.03"/>',
            f'{i2}<geom name="hand_collision1" class="panda_geom" fromto="0 0 0.005 0 0 0.04" size="0.04"/>',
            f'{i2}<site name="tcp" pos="0 0 {TCP_OFFSET}" size="0.008" rgba="1 0.4 0 1"/>',
            f'{i2}<camera name="wrist" pos="0.08 0 0.05" xyaxes="0 -1 0 -0.781 0 -0.625" fovy="70"/>',
        ]
        for side, quat in (("left", "1 0 0 0"), ("right", "0 0 0 1")):
            lines += [
                f'{i2}<body name="{side}_finger" pos="0 0 0.0584" quat="{quat}" gravcomp="1">',
                f'{i3}<inertial mass="0.015" pos="0 0.01 0.02" diaginertia="2.375e-06 2.375e-06 7.5e-07"/>',
                f'{i3}<joint name="finger_joint_{side}" class="panda_finger"/>',
                f'{i3}<geom name="{side}_finger_pad" class="panda_finger_geom" type="box" pos="0 0.008 0.035" size="0.009 0.006 0.018"/>',
                f"{i2}</body>",
            ]
        lines.append(f"{inner}</body>")
    lines.append(f"{indent}</body>")
    return "\n".join(lines)


def _cubes(n: int, size: float, mass: float | None) -> list[str]:
    """The bodies of ``n`` cubes: mocap markers without collisions (``mass`` ``None``) or free
    bodies that collide (friction like rubber on wood, so that the fingers hold them; contacts
    stiffer than MuJoCo's default, so that fingers squeezing a cube sink about 2 mm into it
    rather than 7)."""
    half = size / 2
    box = f'type="box" size="{half:.9g} {half:.9g} {half:.9g}" rgba="1 1 1 1"'
    out = []
    for i in range(n):
        pos = f'pos="0.5 {0.1 * i:.9g} {half:.9g}"'
        if mass is None:
            out += [
                f'    <body name="cube{i}" mocap="true" {pos}>',
                f'      <geom name="cube{i}" {box} contype="0" conaffinity="0"/>',
                "    </body>",
            ]
        else:
            out += [
                f'    <body name="cube{i}" {pos}>',
                f'      <freejoint name="cube{i}"/>',
                f'      <geom name="cube{i}" {box} mass="{mass:.9g}" friction="1 0.005 0.0001" '
                'solref="0.01 1" solimp="0.95 0.99 0.001" contype="1" conaffinity="1"/>',
                "    </body>",
            ]
    return out


def panda_mjcf(
    *,
    hand: bool = True,
    scene: bool = True,
    timestep: float = 0.002,
    cubes: int = 0,
    cube_size: float = CUBE_SIZE,
    cube_mass: float | None = None,
    target_marker: bool = True,
) -> str:
    """The MJCF text of the Panda.

    Parameters:
        hand: attach the Franka Hand (two position-controlled fingers) and a ``tcp`` site.
        scene: add a floor, a table top, a ``target`` mocap marker, lights, the cameras
            ``front``, ``table`` (looking down at the table in front of the robot from the side
            opposite it) and ``wrist``, and position actuators (``actuator1..7`` on the joints
            with the Menagerie gains, ``finger_left/right`` on the fingers). Without it the model
            has no actuators, which is what franka-sim wants (it drives ``qfrc_applied``).
        timestep: the physics step (s).
        cubes: number of cubes ``cube0..`` (edge ``cube_size`` metres, lying on the table; their
            colour is set at run time through ``geom_rgba``). Without ``cube_mass`` they are
            markers (mocap bodies without collisions, placed through ``mocap_pos``).
        cube_mass: make the cubes solid: free bodies of this mass (kg) that collide with the
            table, the arm, the fingers and each other (joints ``cube0..``, placed through
            ``qpos``; listed after the arm's joints in ``qpos``).
        target_marker: show the ``target`` sphere (a task whose target must be found in the
            image leaves it out).

    Returns:
        The XML as a string; load it with ``mujoco.MjModel.from_xml_string``.
    """
    arm = _arm_body(0, hand, "    ")
    defaults = f"""  <default>
    <default class="panda_joint1">
      <joint axis="0 0 1" armature="0.1" damping="1.0" frictionloss="0.1"/>
      <position forcerange="-87 87"/>
    </default>
    <default class="panda_joint2">
      <joint axis="0 0 1" armature="0.1" damping="1.0" frictionloss="0.1"/>
      <position forcerange="-12 12"/>
    </default>
    <default class="panda_geom">
      <geom type="capsule" rgba="0.92 0.92 0.95 1" group="2" contype="1" conaffinity="1" density="0"/>
    </default>
    <default class="panda_finger">
      <joint type="slide" axis="0 1 0" range="0 {FINGER_TRAVEL}" armature="0.1" damping="10"/>
    </default>
    <default class="panda_finger_geom">
      <geom rgba="0.2 0.2 0.2 1" group="2" contype="1" conaffinity="1" friction="1.5 0.05 0.001" density="0"/>
    </default>
  </default>"""
    parts = [
        '<mujoco model="franka_panda">',
        '  <compiler angle="radian" autolimits="true"/>',
        f'  <option timestep="{timestep:.9g}" integrator="implicitfast"/>',
        defaults,
    ]
    if scene:
        parts += [
            '  <visual><headlight diffuse="0.6 0.6 0.6" ambient="0.3 0.3 0.3"/><global offwidth="640" offheight="480"/></visual>',
            "  <asset>",
            '    <texture name="grid" type="2d" builtin="checker" rgb1="0.25 0.3 0.35" rgb2="0.2 0.25 0.3" width="256" height="256"/>',
            '    <material name="grid" texture="grid" texrepeat="6 6" reflectance="0.1"/>',
            "  </asset>",
        ]
    parts.append("  <worldbody>")
    if scene:
        parts += [
            '    <light pos="0 0 3" dir="0 0 -1" directional="true"/>',
            '    <geom name="floor" type="plane" size="2 2 0.05" material="grid" pos="0 0 -0.05"/>',
            '    <geom name="table" type="box" pos="0.5 0 -0.02" size="0.35 0.5 0.02" rgba="0.55 0.45 0.35 1" contype="1" conaffinity="1"/>',
            '    <camera name="front" pos="1.5 0 0.8" xyaxes="0 1 0 -0.45 0 0.9" fovy="50"/>',
            f'    <camera name="table" pos="{_fmt(TABLE_CAMERA_POS)}" xyaxes="{_fmt(TABLE_CAMERA_XYAXES)}" fovy="{TABLE_CAMERA_FOVY:g}"/>',
        ]
        if target_marker:
            parts += [
                '    <body name="target" mocap="true" pos="0.5 0 0.3">',
                '      <geom name="target" type="sphere" size="0.02" rgba="0.1 0.8 0.2 0.6" contype="0" conaffinity="0" group="1"/>',
                "    </body>",
            ]
        if cube_mass is None:
            parts += _cubes(cubes, cube_size, None)
    parts.append(arm)
    if scene and cube_mass is not None:
        parts += _cubes(cubes, cube_size, cube_mass)
    parts.append("  </worldbody>")
    if scene:
        acts = ["  <actuator>"]
        gains = (4500, 4500, 3500, 3500, 2000, 2000, 2000)
        for j in range(1, 8):
            cls = "panda_joint1" if j <= 4 else "panda_joint2"
            kp = gains[j - 1]
            lo, hi = JOINT_LIMITS[j - 1]
            acts.append(
                f'    <position name="actuator{j}" class="{cls}" joint="joint{j}" kp="{kp}" kv="{kp // 20}" ctrlrange="{lo:.9g} {hi:.9g}"/>'
            )
        if hand:
            for side in ("left", "right"):
                acts.append(
                    f'    <position name="finger_{side}" joint="finger_joint_{side}" kp="1000" kv="20" ctrlrange="0 {FINGER_TRAVEL}" forcerange="-70 70"/>'
                )
        acts.append("  </actuator>")
        parts += acts
        if hand:
            parts += [
                '  <contact><exclude body1="link7" body2="hand"/></contact>',
            ]
        home = list(HOME_Q) + ([FINGER_TRAVEL, FINGER_TRAVEL] if hand else [])
        if cube_mass is not None:
            for i in range(cubes):
                home += [0.5, 0.1 * i, cube_size / 2, 1.0, 0.0, 0.0, 0.0]
        ctrl = list(HOME_Q) + ([FINGER_TRAVEL, FINGER_TRAVEL] if hand else [])
        parts.append(f'  <keyframe><key name="home" qpos="{_fmt(home)}" ctrl="{_fmt(ctrl)}"/></keyframe>')
    parts.append('  <contact><exclude body1="link0" body2="link1"/></contact>')
    parts.append("</mujoco>")
    return "\n".join(parts) + "\n"


def write_mjcf(path: str | os.PathLike[str], *, hand: bool = False, scene: bool = False) -> Path:
    """Write :func:`panda_mjcf` to ``path`` atomically (temp file + rename) and return the path.

    The defaults write the bare 7-joint arm that franka-sim loads via ``FR3_MJCF``.
    """
    return atomic_write_text(path, panda_mjcf(hand=hand, scene=scene), perms=0o644)


def main(argv: list[str] | None = None) -> int:
    """``python -m rlinf_hw_franka.mjcf OUT.xml [--hand] [--scene]``."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m rlinf_hw_franka.mjcf",
        description="Write the Panda MJCF (by default the bare 7-joint arm franka-sim loads via FR3_MJCF).",
    )
    parser.add_argument("out", help="output path of the MJCF file")
    parser.add_argument("--hand", action="store_true", help="attach the Franka Hand")
    parser.add_argument("--scene", action="store_true", help="add table, target, cameras and actuators")
    args = parser.parse_args(argv)
    print(write_mjcf(args.out, hand=args.hand, scene=args.scene))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
