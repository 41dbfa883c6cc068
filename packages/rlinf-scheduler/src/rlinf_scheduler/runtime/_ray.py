"""Importing Ray the way rlinf needs it, and Ray errors in one line.

Ray 2.x propagates a driver started with ``uv run`` to every worker by rewriting the job's
``runtime_env`` (``py_executable = "uv run ..."`` plus the whole working directory). rlinf manages
interpreters per node itself (``python_interpreter_path``) and ships code only when asked
(``RLINF_CODE_WORKING_DIR``), so it turns that hook off unless the user set
``RAY_ENABLE_UV_RUN_RUNTIME_ENV`` explicitly.
"""

from __future__ import annotations

import os
from typing import Any

UV_HOOK_ENV = "RAY_ENABLE_UV_RUN_RUNTIME_ENV"


_RAY: Any = None


def import_ray() -> Any:
    """``import ray`` with the ``uv run`` runtime-env hook off (unless the user turned it on)."""
    global _RAY
    if _RAY is not None:
        return _RAY
    os.environ.setdefault(UV_HOOK_ENV, "0")
    import ray
    from ray._private import ray_constants

    if os.environ[UV_HOOK_ENV].strip().lower() in ("0", "false", "no", "off", ""):
        ray_constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV = False  # ray may have been imported earlier
    _RAY = ray
    return ray


def short_error(err: BaseException) -> str:
    """The last line of a Ray error (the remote cause's type and message when it carries one), at most
    500 characters."""
    text = str(err).strip()
    cause = getattr(err, "cause", None)
    if cause is not None:
        text = f"{type(cause).__name__}: {cause}"
    first = text.splitlines()[-1] if text else type(err).__name__
    return first[:500]
