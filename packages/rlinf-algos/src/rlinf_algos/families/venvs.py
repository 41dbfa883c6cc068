"""The interpreters of families whose simulators cannot share rlinf's (:attr:`rlinf_core.envs.
EnvFamily.interpreter`): ``rlinf env setup FAMILY`` makes a uv venv of the family's Python with
its pinned requirements in rlinf's cache folder, and the env worker finds it there when
``env.python`` is not given.

The venv's folder name carries a hash of the Python version and the requirements, so a changed
pin makes a new venv and an old one is never used by mistake. It is built in a temporary folder
and renamed into place when its imports work (a failed or stopped setup leaves nothing that
looks ready). uv's own cache keeps the wheels: a second setup of the same pins, or one after the
folder was deleted, needs no network.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from rlinf_core.envs import EnvFamily, Interpreter
from rlinf_core.errors import ConfigError, RlinfError

__all__ = ["cache_dir", "family_python", "setup_family", "venv_dir"]


def cache_dir() -> Path:
    """rlinf's cache folder (:func:`rlinf_algos.vulkan.rlinf_cache_dir`): ``$RLINF_CACHE_DIR``,
    else ``$XDG_CACHE_HOME/rlinf``, else ``~/.cache/rlinf``."""
    from rlinf_algos.vulkan import rlinf_cache_dir

    return rlinf_cache_dir()


def venv_dir(name: str, interp: Interpreter) -> Path:
    """Where the venv of family ``name`` with these pins lives."""
    digest = hashlib.sha256("\n".join([interp.python, *sorted(interp.requirements)]).encode()).hexdigest()[
        :12
    ]
    return cache_dir() / "envs" / f"{name}-py{interp.python}-{digest}"


def _python_of(venv: Path) -> Path:
    return venv / "bin" / "python"


def family_python(family: EnvFamily, explicit: str | None, path: str = "env.python") -> str | None:
    """The interpreter ``family``'s simulator runs in: ``explicit`` (``env.python``) when
    given, else the venv ``rlinf env setup`` made; ``None`` for a family that runs in rlinf's
    own. A missing interpreter is a :class:`ConfigError` at ``path`` naming the setup command."""
    interp = family.interpreter
    if explicit:
        exe = Path(explicit).expanduser()
        if not (exe.is_file() and os.access(exe, os.X_OK)):
            raise ConfigError(
                f"{explicit!r} is not an executable Python interpreter (env.python: the interpreter of the "
                f"{family.PLUGIN_NAME} simulator; leave it out to use the one `rlinf env setup "
                f"{family.PLUGIN_NAME}` makes)",
                path=path,
            )
        return str(exe)
    if interp is None:
        return None
    exe = _python_of(venv_dir(family.PLUGIN_NAME, interp))
    if not exe.is_file():
        raise ConfigError(
            f"the {family.PLUGIN_NAME} simulator runs in an interpreter of its own, which is not set up on this "
            f"machine: run `rlinf env setup {family.PLUGIN_NAME}` (once; it needs uv and, the first time, "
            f"the package index), or give env.python",
            path="env.family",
        )
    return str(exe)


def _uv() -> list[str]:
    exe = shutil.which("uv")
    if exe:
        return [exe]
    try:
        import uv  # type: ignore[import-not-found]

        return [uv.find_uv_bin()]
    except (ImportError, FileNotFoundError):
        raise RlinfError(
            "`rlinf env setup` needs uv (https://docs.astral.sh/uv/): `python3 -m pip install uv`"
        ) from None


def setup_family(family: EnvFamily, *, force: bool = False, log: Any = print) -> Path | None:
    """Make ``family`` work here: the venv of its interpreter (made, or found with its imports
    working; made again with ``force``), then what else the family sets up
    (:meth:`~rlinf_core.envs.EnvFamily.setup`: ManiSkill's Vulkan driver). Returns the venv's
    Python, ``None`` for a family that runs in rlinf's interpreter."""
    exe = _setup_venv(family, force, log) if family.interpreter is not None else None
    family.setup(log)
    return exe


def _setup_venv(family: EnvFamily, force: bool, log: Any) -> Path:
    interp = family.interpreter
    assert interp is not None
    target = venv_dir(family.PLUGIN_NAME, interp)
    exe = _python_of(target)
    if exe.is_file() and not force and _imports_ok(exe, interp) is None:
        log(f"{family.PLUGIN_NAME}: ready at {target}")
        return exe
    uv = _uv()
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    log(f"{family.PLUGIN_NAME}: making a Python {interp.python} venv with {', '.join(interp.requirements)}")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")}
    try:
        _run([*uv, "venv", "--quiet", "--python", interp.python, str(tmp)], env)
        _run([*uv, "pip", "install", "--quiet", "--python", str(_python_of(tmp)), *interp.requirements], env)
        why = _imports_ok(_python_of(tmp), interp)
        if why is not None:
            raise RlinfError(f"{family.PLUGIN_NAME}: the new venv cannot import what it needs: {why}")
        # only the console scripts name the folder they were made in, and none is used: the
        # interpreter is a link, so the finished venv is renamed into place
        shutil.rmtree(target, ignore_errors=True)
        os.rename(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"{family.PLUGIN_NAME}: ready at {target} ({time.monotonic() - started:.0f} s)")
    return exe


def _run(cmd: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise RlinfError(
            f"`{' '.join(Path(cmd[0]).name if i == 0 else c for i, c in enumerate(cmd))}` failed: {tail}"
        )


def _imports_ok(exe: Path, interp: Interpreter) -> str | None:
    """``None`` when ``exe`` imports every module of ``interp.imports``, else why not."""
    code = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\n"
    try:
        done = subprocess.run(
            [str(exe), "-s", "-c", code, *interp.imports],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")},
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return str(err)
    if done.returncode == 0:
        return None
    return (done.stderr.strip().splitlines() or ["exit " + str(done.returncode)])[-1]
