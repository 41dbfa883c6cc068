"""``python``: run a model's code in a subprocess with limits and without network.

What holds, layer by layer (:func:`run_python`):

- **a fresh interpreter** (``python -I``: no user site, no ``PYTHON*`` variables) in a new
  session, in an empty temporary directory that is removed afterwards; its environment is only
  ``PATH``, ``LANG`` and ``HOME`` (the temporary directory): no secrets of the parent leak in;
- **CPU time**: ``RLIMIT_CPU`` (the kernel sends SIGXCPU at the limit and SIGKILL one second
  later); **memory**: ``RLIMIT_AS`` (allocations beyond it fail, Python raises ``MemoryError``);
  **output**: stdout and stderr go to files capped by ``RLIMIT_FSIZE``, then cut to
  ``max_output_chars``; the limits are set by the child on itself, hard limit equal to soft,
  before the user's code runs, so the code cannot raise them;
- **wall clock**: the parent waits ``wall_s`` and then kills the whole process group (a sleeping
  or blocked program uses no CPU time, so RLIMIT_CPU alone would not end it);
- **network**: where the kernel lets this process create a network namespace (``unshare -n`` as
  root, ``unshare -rn`` through a user namespace otherwise), the child runs in a new one, which
  has no interface but a loopback that is down: nothing, native code included, can reach another
  host. Always, in addition, a ``sys.addaudithook`` hook refuses socket creation, connection and
  name resolution and the start of other programs (``subprocess``, ``os.system``, ``os.exec*``,
  ``os.posix_spawn``) from Python code. The hook alone does not stop native code (a C extension
  or ``ctypes`` calling libc's ``socket``): where no namespace can be made,
  :func:`network_isolation` says ``"audit-hook"`` so the operator knows only that layer holds.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from rlinf_core.tools import ToolSet

__all__ = ["Python", "SandboxResult", "network_isolation", "run_python"]

_BOOT = r"""
import resource, sys
cpu, mem, fsize = (int(x) for x in sys.argv[1:4])
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
_DENY = ("socket.", "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
         "pty.spawn")
def _guard(event, args):
    if event.startswith(_DENY):
        raise PermissionError(f"sandbox: {event} is not allowed (no network, no other programs)")
sys.addaudithook(_guard)
path = sys.argv[4]
sys.argv = [path]
del resource, cpu, mem, fsize
import runpy
runpy.run_path(path, run_name="__main__")
"""


@functools.cache
def network_isolation() -> str:
    """``"netns"`` (``unshare -n``), ``"netns-user"`` (``unshare -rn``) or ``"audit-hook"``: the
    strongest network isolation this machine allows the sandbox (checked once per process)."""
    exe = shutil.which("unshare")
    if exe is None:
        return "audit-hook"
    for mode, flags in (("netns", ["-n"]), ("netns-user", ["-rn"])):
        try:
            ok = subprocess.run([exe, *flags, "true"], capture_output=True, timeout=10).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return mode
    return "audit-hook"


@dataclass
class SandboxResult:
    """What a run printed and how it ended. ``limit``: ``""``, ``cpu``, ``memory``, ``wall``
    (the limit that ended it, if one did)."""

    stdout: str
    stderr: str
    returncode: int
    limit: str = ""
    isolation: str = ""

    def as_text(self) -> str:
        """The model's view: stdout, then stderr and how the run ended when there is anything."""
        parts = [self.stdout] if self.stdout else []
        if self.stderr:
            parts.append(f"[stderr]\n{self.stderr}")
        if self.limit == "cpu":
            parts.append("[killed: CPU time limit exceeded]")
        elif self.limit == "wall":
            parts.append("[killed: wall-clock limit exceeded]")
        elif self.limit == "memory":
            parts.append("[error: memory limit exceeded]")
        elif self.returncode != 0:
            parts.append(f"[exit code {self.returncode}]")
        return "\n".join(parts) if parts else "[no output]"


def _read(path: Path, limit: int) -> str:
    """The file's text cut to its first ``limit`` characters."""
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return ""
    if len(text) <= limit:
        return text
    return text[:limit] + "\n[truncated]"


def _clean_traceback(stderr: str, script: Path) -> str:
    """The user's traceback without the sandbox's own frames, the script called ``main.py``."""
    out: list[str] = []
    skipping = False
    for line in stderr.replace(str(script), "main.py").splitlines(keepends=True):
        if line.startswith(('  File "<string>"', '  File "<frozen runpy>"')):
            skipping = True
            continue
        if skipping and line.startswith("    "):
            continue
        skipping = False
        out.append(line)
    return "".join(out)


def run_python(
    code: str,
    *,
    cpu_s: int = 5,
    memory_mb: int = 1024,
    wall_s: float = 10.0,
    max_output_chars: int = 2000,
    max_file_mb: int = 16,
) -> SandboxResult:
    """Run ``code`` as a script in a sandboxed interpreter (see the module doc)."""
    isolation = network_isolation()
    prefix: list[str] = []
    if isolation != "audit-hook":
        prefix = [shutil.which("unshare") or "unshare", "-n" if isolation == "netns" else "-rn"]
    work = Path(tempfile.mkdtemp(prefix="rlinf-python-"))
    try:
        script = work / "main.py"
        script.write_text(code, encoding="utf-8")
        out_path, err_path = work / ".stdout", work / ".stderr"
        cmd = [
            *prefix,
            sys.executable,
            "-I",
            "-c",
            _BOOT,
            str(int(cpu_s)),
            str(int(memory_mb) * 1024 * 1024),
            str(int(max_file_mb) * 1024 * 1024),
            str(script),
        ]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "HOME": str(work)}
        with out_path.open("wb") as out, err_path.open("wb") as err:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=work,
                env=env,
                start_new_session=True,
            )
            limit = ""
            try:
                rc = proc.wait(timeout=wall_s)
            except subprocess.TimeoutExpired:
                limit = "wall"
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                rc = proc.wait(timeout=10)
        stdout = _read(out_path, max_output_chars)
        # stderr keeps its end: a traceback's last lines say what went wrong
        full_err = _clean_traceback(_read(err_path, max_file_mb * 1024 * 1024), script)
        stderr = (
            full_err if len(full_err) <= max_output_chars else "[truncated]\n" + full_err[-max_output_chars:]
        )
        if not limit:
            if rc in (-signal.SIGXCPU, -signal.SIGKILL):
                limit = "cpu"
            elif "MemoryError" in full_err:
                limit = "memory"
        return SandboxResult(stdout, stderr, rc, limit, isolation)
    finally:
        shutil.rmtree(work, ignore_errors=True)


class Python(ToolSet):
    """The built-in ``python`` tool: runs code in a sandbox, one per call.

    Args:
        cpu_s: CPU-time limit (seconds).
        memory_mb: address-space limit.
        wall_s: wall-clock limit (seconds); give the tool entry a ``timeout_s`` above it.
        max_output_chars: stdout and stderr are each cut to this length.
    """

    PLUGIN_NAME: ClassVar[str] = "python"
    per_episode: ClassVar[bool] = False

    def __init__(
        self, cpu_s: int = 5, memory_mb: int = 1024, wall_s: float = 10.0, max_output_chars: int = 2000
    ) -> None:
        self.cpu_s, self.memory_mb, self.wall_s = int(cpu_s), int(memory_mb), float(wall_s)
        self.max_output_chars = int(max_output_chars)

    def python(self, code: str) -> str:
        """Run a Python program and return what it prints (stdout, then stderr).

        Args:
            code: the program's source; print the values you want to see.
        """
        return run_python(
            code,
            cpu_s=self.cpu_s,
            memory_mb=self.memory_mb,
            wall_s=self.wall_s,
            max_output_chars=self.max_output_chars,
        ).as_text()
