"""The ``DemoArm`` hardware type: an arm whose controller answers on a TCP port."""

from __future__ import annotations

import socket
from ipaddress import IPv4Address

from pydantic import Field

from rlinf_core import HardwareConfig, HardwareError, HardwarePlugin, HardwareResource


class DemoArmConfig(HardwareConfig):
    """One ``hardware.configs`` entry of a DemoArm group."""

    host: IPv4Address = Field(description="Address of the arm's controller.")
    port: int = Field(default=7000, ge=1, le=65535, description="Controller TCP port.")


class DemoArm(HardwarePlugin):
    PLUGIN_NAME = "DemoArm"
    config_model = DemoArmConfig

    @classmethod
    def validate(cls, resource: HardwareResource, *, timeout: float = 5.0) -> None:
        cfg: DemoArmConfig = resource.config  # type: ignore[assignment]  # validated by config_model
        try:
            with socket.create_connection((str(cfg.host), cfg.port), timeout=timeout):
                pass
        except OSError as err:
            raise HardwareError(
                f"DemoArm {cfg.host}:{cfg.port} on node {resource.node_rank} is not reachable "
                f"within {timeout:g} s ({err.strerror or err}); check that the controller is on and the cable in"
            ) from None
