"""The Panda MJCF written from published parameters: kinematics, inertia, limits, files."""

from __future__ import annotations

import numpy as np
import pytest

from rlinf_hw_franka.mjcf import HOME_Q, JOINT_LIMITS, main, panda_mjcf, write_mjcf

mujoco = pytest.importorskip("mujoco")


def dh_flange(q) -> np.ndarray:
    """Forward kinematics from Franka's modified DH table (Craig convention) to the flange."""
    a = [0, 0, 0, 0.0825, -0.0825, 0, 0.088, 0]
    d = [0.333, 0, 0.316, 0, 0.384, 0, 0, 0.107]
    alpha = [0, -np.pi / 2, np.pi / 2, np.pi / 2, -np.pi / 2, np.pi / 2, np.pi / 2, 0]
    T = np.eye(4)
    for i, th in enumerate([*q, 0.0]):
        ca, sa, ct, st = np.cos(alpha[i]), np.sin(alpha[i]), np.cos(th), np.sin(th)
        T = T @ np.array(
            [
                [ct, -st, 0, a[i]],
                [st * ca, ct * ca, -sa, -d[i] * sa],
                [st * sa, ct * sa, ca, d[i] * ca],
                [0, 0, 0, 1],
            ]
        )
    return T


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kinematics_match_the_dh_table(seed) -> None:
    m = mujoco.MjModel.from_xml_string(panda_mjcf(hand=False, scene=False))
    d = mujoco.MjData(m)
    rng = np.random.default_rng(seed)
    q = HOME_Q if seed == 0 else rng.uniform([lo for lo, _ in JOINT_LIMITS], [hi for _, hi in JOINT_LIMITS])
    d.qpos[:7] = q
    mujoco.mj_forward(m, d)
    T = dh_flange(q)
    np.testing.assert_allclose(d.site("flange").xpos, T[:3, 3], atol=1e-6)
    np.testing.assert_allclose(d.site("flange").xmat.reshape(3, 3), T[:3, :3], atol=1e-6)


def test_model_contents() -> None:
    arm = mujoco.MjModel.from_xml_string(panda_mjcf(hand=False, scene=False))
    assert arm.nq == 7 and arm.nu == 0  # what franka-sim expects: joints only, no actuators
    assert sum(arm.body_mass) == pytest.approx(16.69, abs=0.05)  # links 0-7 of Gaz et al.
    for i, (lo, hi) in enumerate(JOINT_LIMITS):
        assert tuple(arm.jnt_range[i]) == pytest.approx((lo, hi))
    for i in range(8):
        assert mujoco.mj_name2id(arm, mujoco.mjtObj.mjOBJ_GEOM, f"link{i}_collision") >= 0
    twin = mujoco.MjModel.from_xml_string(panda_mjcf(hand=True, scene=True))
    assert twin.nq == 9 and twin.nu == 9
    d = mujoco.MjData(twin)
    mujoco.mj_resetDataKeyframe(twin, d, 0)
    mujoco.mj_forward(twin, d)
    # The hand's TCP in the ready pose: 0.1034 m below the flange, pointing down.
    np.testing.assert_allclose(d.site("tcp").xpos, [0.3069, 0.0, 0.4869], atol=2e-4)
    np.testing.assert_allclose(d.site("tcp").xmat.reshape(3, 3), np.diag([1.0, -1.0, -1.0]), atol=1e-6)


def test_links_three_apart_are_clear_at_home() -> None:
    """franka-sim raises a self-collision reflex for links >= 3 apart closer than 50 mm."""
    m = mujoco.MjModel.from_xml_string(panda_mjcf(hand=False, scene=False))
    d = mujoco.MjData(m)
    for q in (HOME_Q, (0, 0, 0, -1.57, 0, 1.57, 0.785)):
        d.qpos[:7] = q
        mujoco.mj_forward(m, d)
        for i in range(8):
            for j in range(i + 3, 8):
                g1 = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, f"link{i}_collision")
                g2 = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, f"link{j}_collision")
                assert mujoco.mj_geomDistance(m, d, g1, g2, 1.0, None) > 0.1, (i, j)


def test_write_mjcf(tmp_path, capsys) -> None:
    path = write_mjcf(tmp_path / "sub" / "arm.xml")
    assert path.read_text() == panda_mjcf(hand=False, scene=False)
    assert [p.name for p in path.parent.iterdir()] == ["arm.xml"]  # no temp file left behind
    assert main([str(tmp_path / "twin.xml"), "--hand", "--scene"]) == 0
    assert (tmp_path / "twin.xml").read_text() == panda_mjcf(hand=True, scene=True)
    assert "twin.xml" in capsys.readouterr().out
