"""The ``Franka`` hardware type: enumeration (one hardware rank per robot) and validation.

Validation never moves the robot: it opens a TCP connection to the control box's command port
(1337; not ICMP, which needs privileges) and, with a Franka Hand, to the gripper port (1338),
imports the camera SDK and looks for every configured serial. Each failure is a
:class:`HardwareError` naming the robot and the node.
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from rlinf_core.errors import HardwareError
from rlinf_core.hardware import HardwareConfig, HardwarePlugin, HardwareResource
from rlinf_hw_franka.config import (
    COMMAND_PORT,
    GRIPPER_PORT,
    FrankaConfig,
    missing_ip_message,
    resolve_node_configs,
)

__all__ = ["Check", "Franka", "tcp_probe"]


@dataclass(frozen=True)
class Check:
    """The outcome of one validation step of one robot (a row of ``rlinf hw check``)."""

    name: str
    ok: bool | None  # None: skipped
    detail: str


def tcp_probe(host: str, port: int, timeout: float) -> str | None:
    """Open and close a TCP connection to ``host:port``. ``None`` if it succeeded, else why not."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except ConnectionRefusedError:
        return f"connection to {host}:{port} refused (the host answers but nothing listens on port {port})"
    except TimeoutError:
        return f"no answer from {host}:{port} within {timeout:g}s"
    except OSError as err:
        if err.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
            return f"no route to {host} ({os.strerror(err.errno)})"
        return f"cannot connect to {host}:{port}: {err.strerror or err}"


def _as_franka(cfg: HardwareConfig) -> FrankaConfig:
    return cfg if isinstance(cfg, FrankaConfig) else FrankaConfig.model_validate(cfg.model_dump())


def _realsense_serials() -> list[str]:
    import pyrealsense2 as rs  # type: ignore[import-not-found]

    ctx = rs.context()
    return [dev.get_info(rs.camera_info.serial_number) for dev in ctx.query_devices()]


class Franka(HardwarePlugin):
    """Franka Emika Panda / FR3 arms owned by a node group (``hardware.type: Franka``)."""

    PLUGIN_NAME: ClassVar[str] = "Franka"
    config_model: ClassVar[type[HardwareConfig]] = FrankaConfig
    isolates_accelerators: ClassVar[bool] = False

    @classmethod
    def enumerate(
        cls,
        node_rank: int,
        configs: Sequence[HardwareConfig],
        environ: Mapping[str, str] | None = None,
    ) -> list[HardwareResource]:
        """One resource per robot of node ``node_rank``, in config order.

        Fields an entry leaves out come from ``environ`` (default: this process's environment):
        ``ROBOT_IP`` and ``CAMERA_SERIALS``, one comma-separated value per robot on the node. A
        count mismatch or a robot without an IP is a :class:`~rlinf_core.errors.ConfigError`.
        ``info`` of each resource is what the env worker placed on it receives.
        """
        franka = [_as_franka(c) for c in configs]
        mine = resolve_node_configs(node_rank, franka, os.environ if environ is None else environ)
        return [
            HardwareResource(cls.PLUGIN_NAME, node_rank, i, cfg, {**cfg.info(), "local_rank": i})
            for i, cfg in enumerate(mine)
        ]

    @classmethod
    def describe(cls, resource: HardwareResource) -> str:
        cfg = resource.config
        ip = getattr(cfg, "robot_ip", None) or "?"
        return f"Franka robot {resource.local_rank} on node {resource.node_rank} ({ip})"

    @classmethod
    def checks(
        cls, resource: HardwareResource, *, timeout: float = 5.0, on_node: int | None = None
    ) -> list[Check]:
        """Every validation step for ``resource`` as seen from node ``on_node`` (default: the
        robot's own node). The controller node checks the robot's ports; the robot's node
        checks the cameras (and the ports too when it is also the controller node)."""
        cfg = _as_franka(resource.config)
        here = resource.node_rank if on_node is None else on_node
        out: list[Check] = []
        if cfg.disable_validate:
            return [Check("validation", None, "disabled (disable_validate: true)")]
        ip = cfg.robot_ip or "?"
        if here == cfg.controller_node and cfg.robot_ip is None:
            out.append(Check("robot", False, missing_ip_message(resource.local_rank, resource.node_rank)))
        elif here == cfg.controller_node:
            why = tcp_probe(ip, COMMAND_PORT, timeout)
            out.append(
                Check(
                    "robot",
                    why is None,
                    f"{ip}:{COMMAND_PORT} accepts connections"
                    if why is None
                    else f"{why}; check the network cable and address, and that FCI is activated in Desk",
                )
            )
            if cfg.gripper_type == "franka":
                why = tcp_probe(ip, GRIPPER_PORT, timeout)
                out.append(
                    Check(
                        "gripper",
                        why is None,
                        f"{ip}:{GRIPPER_PORT} accepts connections"
                        if why is None
                        else f"{why}; is the Franka Hand attached? (gripper_type: none if not)",
                    )
                )
        else:
            out.append(Check("robot", None, f"checked on the controller node {cfg.controller_node}"))
        if here != cfg.node_rank:
            return out
        if cfg.cameras == "realsense":
            try:
                present = _realsense_serials()
            except ImportError:
                out.append(
                    Check(
                        "camera sdk",
                        False,
                        "pyrealsense2 is not installed; pip install pyrealsense2 (or camera_type: none)",
                    )
                )
                for serial in cfg.camera_serials or []:
                    out.append(Check(f"camera {serial}", False, "not checked: the camera SDK is missing"))
                return out
            except Exception as err:  # the SDK itself failed (driver, USB permissions)
                out.append(Check("camera sdk", False, f"pyrealsense2 failed to list devices: {err}"))
                return out
            out.append(Check("camera sdk", True, f"pyrealsense2 lists {len(present)} device(s)"))
            for serial in cfg.camera_serials or []:
                found = serial in present
                out.append(
                    Check(
                        f"camera {serial}",
                        found,
                        "present"
                        if found
                        else f"not connected (connected: {', '.join(present) or 'none'}); check its USB cable",
                    )
                )
        return out

    @classmethod
    def validate(cls, resource: HardwareResource, *, timeout: float = 5.0) -> None:
        """Run :meth:`checks` on the robot's node; raise one :class:`HardwareError` listing every
        failed check, naming the robot and the node."""
        failed = [c for c in cls.checks(resource, timeout=timeout) if c.ok is False]
        if failed:
            lines = "; ".join(f"{c.name}: {c.detail}" for c in failed)
            raise HardwareError(f"{cls.describe(resource)}: {lines}")

    @classmethod
    def resource_for(cls, config: FrankaConfig | Mapping[str, Any], local_rank: int = 0) -> HardwareResource:
        """A resource for one already-resolved config (tests, single-robot scripts)."""
        cfg = config if isinstance(config, FrankaConfig) else FrankaConfig.model_validate(dict(config))
        return HardwareResource(
            cls.PLUGIN_NAME, cfg.node_rank, local_rank, cfg, {**cfg.info(), "local_rank": local_rank}
        )
