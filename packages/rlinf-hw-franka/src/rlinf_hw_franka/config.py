"""The ``Franka`` hardware entry: one robot arm in a node group's ``hardware.configs``.

Example (the seeds' robot node group)::

    hardware:
      type: Franka
      configs:
        - robot_ip: "10.10.10.1"
          node_rank: 16
          camera_serials: ["322142001230", "322142001231"]

Fields left out of an entry can come from the node's environment: ``ROBOT_IP`` and
``CAMERA_SERIALS`` are comma lists with one value per robot on that node, in config order
(several cameras of one robot are separated by ``|``: ``CAMERA_SERIALS="s1|s2,s3"``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from rlinf_core.errors import ConfigError
from rlinf_core.hardware import HardwareConfig

__all__ = [
    "COMMAND_PORT",
    "GRIPPER_PORT",
    "FrankaConfig",
    "resolve_node_configs",
]

#: libfranka's TCP command port (fixed by the protocol) and the Franka Hand's.
COMMAND_PORT = 1337
GRIPPER_PORT = 1338

ENV_ROBOT_IP = "ROBOT_IP"
ENV_CAMERA_SERIALS = "CAMERA_SERIALS"


def parse_ip(value: Any) -> str:
    """A robot address, normalised; :class:`ValueError` saying what is valid otherwise."""
    if not isinstance(value, str):
        raise ValueError(f'robot_ip must be an IP address in quotes, e.g. "10.10.10.1" (got {value!r})')
    try:
        return str(ipaddress.ip_address(value.strip()))
    except ValueError:
        raise ValueError(
            f'robot_ip must be an IPv4 or IPv6 address such as "172.16.0.2", not a hostname (got {value!r})'
        ) from None


class FrankaConfig(HardwareConfig):
    """One Franka arm (Panda or FR3) attached to node ``node_rank``."""

    robot_ip: str | None = Field(
        default=None,
        description="IPv4/IPv6 address of the robot's control box (FCI). Left out: ROBOT_IP on the node.",
    )
    camera_serials: list[str] | None = Field(
        default=None,
        description="Serial numbers of the robot's cameras (quoted strings). Left out: CAMERA_SERIALS on the node.",
    )
    camera_type: Literal["realsense", "none"] | None = Field(
        default=None,
        description="Camera SDK: 'realsense' (pyrealsense2) or 'none'. Default: realsense if serials are given.",
    )
    gripper_type: Literal["franka", "none"] = Field(
        default="franka", description="'franka' (the Franka Hand, port 1338) or 'none'."
    )
    controller_node_rank: int | None = Field(
        default=None,
        ge=0,
        description="Run the arm controller on this node instead of node_rank (e.g. a realtime-kernel PC).",
    )
    control_hz: float = Field(default=10.0, gt=0, le=1000, description="Env control rate (Hz).")
    disable_validate: bool = Field(default=False, description="Skip the reachability and camera checks.")

    @field_validator("robot_ip", mode="before")
    @classmethod
    def _check_ip(cls, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, str):
            raise ValueError(f'robot_ip must be an IP address in quotes, e.g. "10.10.10.1" (got {value!r})')
        try:
            return str(ipaddress.ip_address(value.strip()))
        except ValueError:
            raise ValueError(
                f'robot_ip must be an IPv4 or IPv6 address such as "172.16.0.2", not a hostname (got {value!r})'
            ) from None

    @field_validator("camera_serials", mode="before")
    @classmethod
    def _check_serials(cls, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list | tuple):
            raise ValueError(f"camera_serials must be a list of quoted serial numbers (got {value!r})")
        out = []
        for item in value:
            if not isinstance(item, str):
                raise ValueError(
                    f"camera serial {item!r} must be a quoted string (YAML reads unquoted digits as a number "
                    f'and drops leading zeros): write "{item}"'
                )
            if not item.strip():
                raise ValueError("camera serials must not be empty")
            out.append(item.strip())
        if len(set(out)) != len(out):
            raise ValueError(f"camera_serials lists a serial twice: {out}")
        return out

    @field_validator("camera_type", "gripper_type", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _cameras(self) -> FrankaConfig:
        if self.camera_type == "none" and self.camera_serials:
            raise ValueError(
                "camera_serials are given but camera_type is 'none'; set camera_type: realsense or drop the serials"
            )
        return self

    @property
    def cameras(self) -> str:
        """The effective camera type: ``camera_type``, else ``realsense`` when serials are given."""
        if self.camera_type is not None:
            return self.camera_type
        return "realsense" if self.camera_serials else "none"

    @property
    def controller_node(self) -> int:
        """The node that runs the arm controller (``controller_node_rank`` or ``node_rank``)."""
        return self.node_rank if self.controller_node_rank is None else self.controller_node_rank

    def info(self) -> dict[str, Any]:
        """The facts a worker placed on this robot receives (``WorkerInfo.hardware``)."""
        return {
            "type": "Franka",
            "node_rank": self.node_rank,
            "robot_ip": self.robot_ip,
            "camera_serials": list(self.camera_serials or []),
            "camera_type": self.cameras,
            "gripper_type": self.gripper_type,
            "controller_node_rank": self.controller_node,
            "control_hz": self.control_hz,
        }


def _split_env(environ: Mapping[str, str], var: str) -> list[str] | None:
    raw = environ.get(var)
    if raw is None or not raw.strip():
        return None
    return [part.strip() for part in raw.split(",")]


def missing_ip_message(local_rank: int, node_rank: int) -> str:
    return (
        f"robot {local_rank} on node {node_rank} has no robot_ip: set robot_ip in its hardware config entry "
        f"or export {ENV_ROBOT_IP} (one comma-separated address per robot, in config order) on node {node_rank}"
    )


def robot_ip_from_env(local_rank: int, node_rank: int, environ: Mapping[str, str]) -> str:
    """The address of robot ``local_rank`` of this node from ``ROBOT_IP``; :class:`ConfigError`
    if it is unset, too short or not an IP address."""
    ips = _split_env(environ, ENV_ROBOT_IP)
    if ips is None or local_rank >= len(ips):
        raise ConfigError(missing_ip_message(local_rank, node_rank))
    try:
        return parse_ip(ips[local_rank])
    except ValueError as err:
        raise ConfigError(f"{ENV_ROBOT_IP} on node {node_rank}, value {local_rank}: {err}") from None


def resolve_node_configs(
    node_rank: int, configs: Sequence[FrankaConfig], environ: Mapping[str, str], *, require_ip: bool = False
) -> list[FrankaConfig]:
    """The entries of node ``node_rank`` in config order, with ``robot_ip`` and ``camera_serials``
    that were left out filled from ``ROBOT_IP`` / ``CAMERA_SERIALS`` (one comma-separated value per
    robot on the node, in config order).

    Raises :class:`ConfigError` when a list has the wrong number of values or a value is invalid,
    and with ``require_ip`` when a robot ends up without an IP. (Planning on the driver does not
    require it: the node that drives the robot resolves ``ROBOT_IP`` from its own environment.)
    """
    mine = [c for c in configs if c.node_rank == node_rank]
    if not mine:
        return []
    ips = _split_env(environ, ENV_ROBOT_IP)
    serials = _split_env(environ, ENV_CAMERA_SERIALS)
    problems = []
    for var, values in ((ENV_ROBOT_IP, ips), (ENV_CAMERA_SERIALS, serials)):
        if values is not None and len(values) != len(mine):
            problems.append(
                f"{var}={','.join(values)!r} on node {node_rank} has {len(values)} value(s) but node {node_rank} has "
                f"{len(mine)} Franka robot(s) in the config; give exactly one comma-separated value per robot, in config order"
            )
    if problems:
        raise ConfigError("\n".join(problems))
    out = []
    for i, cfg in enumerate(mine):
        update: dict[str, Any] = {}
        if cfg.robot_ip is None and ips is not None:
            update["robot_ip"] = ips[i]
        if cfg.camera_serials is None and serials is not None:
            update["camera_serials"] = [s for s in serials[i].split("|") if s.strip()]
        if update:
            data = cfg.model_dump(exclude_unset=True)
            data.update(update)
            try:
                cfg = FrankaConfig.model_validate(data)
            except Exception as err:  # pydantic ValidationError: name the variable
                from pydantic import ValidationError

                if isinstance(err, ValidationError):
                    msgs = "; ".join(e["msg"].removeprefix("Value error, ") for e in err.errors())
                    raise ConfigError(
                        f"robot {i} on node {node_rank}: invalid value from {ENV_ROBOT_IP}/{ENV_CAMERA_SERIALS}: {msgs}"
                    ) from None
                raise
        if cfg.robot_ip is None and require_ip:
            raise ConfigError(missing_ip_message(i, node_rank))
        out.append(cfg)
    return out
