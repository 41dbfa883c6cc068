"""Importing Ray the way rlinf needs it.

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
