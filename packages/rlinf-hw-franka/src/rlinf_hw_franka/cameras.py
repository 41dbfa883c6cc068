"""Cameras of a real robot: Intel RealSense through pyrealsense2 (imported lazily).

No camera exists on the development machines or in CI, so :class:`RealSenseCamera` runs only on
a robot node (tests marked ``hardware``); :class:`Camera` is the small interface
:class:`~rlinf_hw_franka.backends.franky_backend.FrankyBackend` reads images through.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlinf_core.errors import HardwareError, WaitTimeout

__all__ = ["Camera", "RealSenseCamera"]


class Camera:
    """A source of RGB images: ``name`` and :meth:`read` -> ``(H, W, 3) uint8``."""

    name: str = "camera"

    def read(self) -> np.ndarray:
        raise NotImplementedError

    def close(self) -> None:
        """Stop streaming."""


class RealSenseCamera(Camera):
    """The colour stream of the RealSense camera with ``serial``.

    Parameters:
        serial: the device's serial number (``rs-enumerate-devices`` lists them).
        width, height, fps: the colour stream's mode.
        timeout: seconds to wait for a frame before :class:`WaitTimeout`.
    """

    def __init__(
        self, serial: str, *, width: int = 640, height: int = 480, fps: int = 30, timeout: float = 1.0
    ) -> None:
        try:
            import pyrealsense2 as rs  # type: ignore[import-not-found]
        except ImportError:
            raise HardwareError(
                f"camera {serial}: pyrealsense2 is not installed; pip install pyrealsense2 (or camera_type: none)"
            ) from None
        self.name = f"realsense_{serial}"
        self.serial = serial
        self.timeout = timeout
        self._rs: Any = rs
        self._pipeline = rs.pipeline()
        cfg = rs.config()
        cfg.enable_device(serial)
        cfg.enable_stream(rs.stream.color, width, height, rs.format.rgb8, fps)
        try:
            self._pipeline.start(cfg)
        except RuntimeError as err:
            raise HardwareError(
                f"camera {serial}: cannot start streaming: {err} (is it connected?)"
            ) from None

    def read(self) -> np.ndarray:
        try:
            frames = self._pipeline.wait_for_frames(int(self.timeout * 1000))
        except RuntimeError:
            raise WaitTimeout(f"camera {self.serial}: no frame within {self.timeout:g}s") from None
        color = frames.get_color_frame()
        return np.asanyarray(color.get_data()).copy()

    def close(self) -> None:
        try:
            self._pipeline.stop()
        except RuntimeError:
            pass
