"""Camera observations for any rendering gymnasium env (``env.obs_mode``).

``env.obs_mode: pixels`` replaces an env's observation with ``{"image"}``, the frame its
``render()`` draws (``render_mode="rgb_array"``), and ``pixels+state`` gives ``{"image",
"state"}`` (the env's own vector as ``state``). Images are ``(H, W, 3)`` ``uint8`` of
``env.image_size``: MuJoCo envs render at that size (their ``width``/``height``); any other env's
frames are resized (nearest pixel). ``state`` (the default) leaves the observation as the env
gives it: a vector, or the flat dict of an env that emits ``image``/``state``/``instruction``
itself (``rlinf/FrankaInstructReach-v0``).

MuJoCo draws offscreen through EGL here (software Mesa, or a GPU's): ``MUJOCO_GL=egl``, set by
rlinf when the variable is unset; a context that cannot be created is a :class:`ConfigError`
naming ``MUJOCO_GL``.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from rlinf_core.errors import ConfigError

__all__ = ["OBS_MODES", "PixelObservation", "pixel_env_kwargs", "pixel_mode_kwargs", "prepare_gl"]

OBS_MODES = ("state", "pixels", "pixels+state")


def prepare_gl() -> None:
    """Get this process ready to render: MuJoCo's offscreen backend ``egl`` unless the user set
    ``MUJOCO_GL`` (and ``PYOPENGL_PLATFORM`` to match), and triton loaded first (see below).
    Call it before the first env that renders is made."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    if os.environ["MUJOCO_GL"] in ("egl", "osmesa"):
        os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
    # Triton's native library crashes the process (SIGSEGV) when it first loads after an EGL
    # context exists; torch loads it lazily (the first optimiser, the first compile), so load it
    # before any context is made. Nothing to do where triton is not installed.
    try:
        import triton.knobs  # noqa: F401
    except Exception:
        pass
    try:
        import mujoco  # noqa: F401  (loads the GL backend MUJOCO_GL names)
    except ModuleNotFoundError as err:
        if err.name != "mujoco":
            raise
        return  # no MuJoCo (the device check's machine): no MuJoCo env, and gymnasium says so if one is made
    except (ImportError, RuntimeError) as err:
        if "MUJOCO_GL" not in str(err):
            raise
        raise ConfigError(
            f"MuJoCo cannot load its OpenGL backend ({str(err).splitlines()[0]}): set MUJOCO_GL=egl "
            "to render offscreen (osmesa does not work on these machines; unset it for no rendering)",
            "env",
        ) from None


def pixel_env_kwargs(env_id: str, image_size: tuple[int, int]) -> dict[str, Any]:
    """The ``gymnasium.make`` keyword arguments that make ``env_id`` render ``rgb_array`` frames
    (``render_mode``, and ``width``/``height`` of ``image_size`` where its constructor takes
    them). The pixel modes need none for MuJoCo envs, which they render themselves."""
    from gymnasium.envs.registration import load_env_creator

    kwargs: dict[str, Any] = {"render_mode": "rgb_array"}
    try:
        entry = gymnasium.spec(env_id).entry_point
        creator = load_env_creator(entry) if isinstance(entry, str) else entry
        params = inspect.signature(creator).parameters
    except Exception:  # no signature to read: render at the env's own size and resize
        return kwargs
    if "width" in params and "height" in params:
        kwargs["height"], kwargs["width"] = int(image_size[0]), int(image_size[1])
    return kwargs


def _is_mujoco(env_id: str) -> bool:
    try:
        entry = gymnasium.spec(env_id).entry_point
    except Exception:
        return False
    return isinstance(entry, str) and entry.startswith("gymnasium.envs.mujoco")


def pixel_mode_kwargs(env_id: str, image_size: tuple[int, int]) -> dict[str, Any]:
    """What the pixel modes add to ``gymnasium.make``'s kwargs: nothing for gymnasium's MuJoCo
    envs (rendered by the wrapper), :func:`pixel_env_kwargs` for the others."""
    return {} if _is_mujoco(env_id) else pixel_env_kwargs(env_id, image_size)


def _resize(img: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    h, w = size
    if img.shape[0] == h and img.shape[1] == w:
        return img
    rows = (np.arange(h) * img.shape[0] // h).clip(0, img.shape[0] - 1)
    cols = (np.arange(w) * img.shape[1] // w).clip(0, img.shape[1] - 1)
    return img[rows][:, cols]


class PixelObservation:
    """A ``gymnasium.ObservationWrapper`` factory: ``PixelObservation(mode, image_size)(env)``
    wraps one env (``gymnasium.make_vec``'s ``wrappers`` take it). Imported only where envs are
    built (it imports gymnasium)."""

    def __init__(self, mode: str, image_size: tuple[int, int]) -> None:
        if mode not in ("pixels", "pixels+state"):
            raise ConfigError(
                f"obs_mode {mode!r} has no camera; one of: pixels, pixels+state", "env.obs_mode"
            )
        self.mode = mode
        self.size = (int(image_size[0]), int(image_size[1]))

    def __call__(self, env: Any) -> Any:
        return _PixelWrapper(env, self.mode, self.size)


def _mujoco_parts(env: Any) -> tuple[Any, Any] | None:
    """``(model, data)`` of a gymnasium MuJoCo env, else ``None``."""
    u = env.unwrapped
    model, data = getattr(u, "model", None), getattr(u, "data", None)
    if model is None or data is None or type(model).__name__ != "MjModel":
        return None
    return model, data


def _free_camera(env: Any, model: Any) -> Any:
    """The env's default view (its ``default_camera_config``) as a free ``MjvCamera``."""
    import mujoco

    cam = mujoco.MjvCamera()
    mujoco.mjv_defaultFreeCamera(model, cam)
    renderer = getattr(env.unwrapped, "mujoco_renderer", None)
    for key, value in (getattr(renderer, "default_cam_config", None) or {}).items():
        if isinstance(value, np.ndarray | list | tuple):
            getattr(cam, key)[:] = value
        else:
            setattr(cam, key, value)
    return cam


class _PixelWrapper(gymnasium.ObservationWrapper):
    """MuJoCo envs render through a ``mujoco.Renderer`` of their own (its GL context is made
    current at every frame, so several envs in one process each read their own framebuffer;
    gymnasium's viewer does not); other envs through their ``render()``."""

    def __init__(self, env: Any, mode: str, size: tuple[int, int]) -> None:
        super().__init__(env)
        self.size = size
        self.mujoco = _mujoco_parts(env)
        self.renderer: Any = None
        if self.mujoco is None and env.render_mode != "rgb_array":
            raise ConfigError(
                f"env.obs_mode {mode!r} needs the env to render rgb_array frames; it renders "
                f"{env.render_mode!r}",
                "env.obs_mode",
            )
        parts: dict[str, Any] = {"image": spaces.Box(0, 255, (*size, 3), np.uint8)}
        if mode == "pixels+state":
            inner = env.observation_space
            if not isinstance(inner, spaces.Box) or len(inner.shape) != 1:
                raise ConfigError(
                    f"env.obs_mode 'pixels+state' takes an env whose observation is a vector; this one "
                    f"is {inner}",
                    "env.obs_mode",
                )
            parts["state"] = spaces.Box(-np.inf, np.inf, inner.shape, np.float32)
        self.observation_space = spaces.Dict(parts)
        self.with_state = mode == "pixels+state"

    def _render(self) -> np.ndarray:
        if self.mujoco is None:
            return np.asarray(self.env.render(), dtype=np.uint8)
        model, data = self.mujoco
        if self.renderer is None:
            import mujoco

            self.renderer = mujoco.Renderer(model, self.size[0], self.size[1])
            self.camera = _free_camera(self.env, model)
        self.renderer.update_scene(data, self.camera)
        return self.renderer.render()

    def observation(self, observation: Any) -> dict[str, np.ndarray]:
        try:
            frame = self._render()
        except Exception as err:
            gl = os.environ.get("MUJOCO_GL", "<unset>")
            raise ConfigError(
                f"the env cannot render camera images for env.obs_mode ({type(err).__name__}: "
                f"{str(err).splitlines()[0] if str(err) else ''}); MuJoCo renders offscreen through "
                f"an OpenGL context: set MUJOCO_GL=egl (it is {gl}; osmesa does not work on these "
                "machines) and make sure libEGL is installed",
                "env.obs_mode",
            ) from None
        out = {"image": np.ascontiguousarray(_resize(frame, self.size))}
        if self.with_state:
            out["state"] = np.asarray(observation, dtype=np.float32)
        return out

    def close(self) -> None:
        if self.renderer is not None:
            self.renderer.close()
            self.renderer = None
        super().close()
