"""``python``: run a model's code in a sandbox, one per call.

Three isolations, chosen by the tool's ``isolation`` setting (:data:`ISOLATIONS`):

``bwrap`` (the default; needs bubblewrap, ``sudo apt-get install bubblewrap``)
    the code runs under `bubblewrap <https://github.com/containers/bubblewrap>`_ in new PID,
    mount, IPC, UTS, network and cgroup namespaces (and a user namespace when not run as root):

    - the root is an empty read-only tmpfs; only ``/usr`` (with the ``/bin``, ``/lib*`` links),
      the interpreter's prefixes and the run's virtual environment are bound in, read-only;
      ``/proc`` is a new procfs showing only the sandbox's own processes; ``/dev`` a minimal one;
    - the only writable place is ``/tmp``, a private tmpfs of ``scratch_mb`` (also ``HOME`` and the
      working directory): nothing of the caller (its home, ``/run``, ``/tmp``, Ray's sockets,
      the venv) exists inside, so no file of the training user can be read or written and no
      filesystem Unix socket reached; the network namespace has only a down loopback
      (abstract Unix sockets and TCP go nowhere);
    - ``--die-with-parent`` and the PID namespace: when the program's main process ends, or the
      caller kills the sandbox (wall clock), or the caller dies, the kernel kills every process
      of the namespace; nothing outlives the call; ``--new-session`` detaches the terminal;
    - run as root, the program drops to a user id of its own (a fresh, unused one per call) with
      no capabilities before the user's code runs, so it can signal only its own processes and
      ``RLIMIT_NPROC`` counts only them; run as another user, bubblewrap's user namespace does both;
    - the environment is ``PATH``, ``LANG`` and ``HOME`` only; no descriptor of the caller is
      inherited.

``netns`` (opt in by name: weaker)
    the former sandbox: a fresh interpreter in a new network namespace (``unshare -n``, or
    ``unshare -rn`` through a user namespace), in a temporary directory of the host. It cannot
    reach the network, but it sees the host's files, processes and Unix sockets as the training
    user does (it can read ``/proc/<pid>/environ`` and signal the caller). Only for machines
    without bubblewrap, when every program the policy may write is trusted as much as the run.

``rlimits-only`` (opt in by name: weakest)
    as ``netns`` without the network namespace.

In every isolation the program runs ``python -I`` with **rlimits** it sets on itself (hard equal
to soft) before the user's code: **CPU time** ``RLIMIT_CPU`` (SIGXCPU at the limit), **memory**
``RLIMIT_AS`` (``MemoryError``), **file size** ``RLIMIT_FSIZE`` (stdout and stderr go to files
capped by it, then cut to ``max_output_chars``), **processes** ``RLIMIT_NPROC`` (``bwrap`` only:
elsewhere it would count every process of the training user); the caller kills it at **wall
clock** ``wall_s``. A ``sys.addaudithook`` hook also refuses sockets, other programs and forks
from Python code: a second layer that tells a model plainly what is not allowed; it is not the
boundary (code can switch it off), the isolation is.

:func:`isolation_problem` says why an isolation cannot hold on this machine (checked once per
process); the ``python`` tool refuses to start then, and ``rlinf train --dry-run`` reports it
at the tool's YAML path.
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from rlinf_core.config import ConfigSection, validate_model
from rlinf_core.errors import ConfigError
from rlinf_core.tools import ToolSet

__all__ = [
    "ISOLATIONS",
    "Python",
    "PythonConfig",
    "SandboxResult",
    "describe_isolation",
    "isolation_problem",
    "network_isolation",
    "run_python",
]

ISOLATIONS = ("bwrap", "netns", "rlimits-only")
"""The ``python`` tool's isolations, strongest first (see the module doc)."""

INSTALL_HINT = "sudo apt-get install bubblewrap (Debian, Ubuntu; dnf install bubblewrap on Fedora)"

_SCRIPT = "/tmp/main.py"  # where the user's program lies inside the bwrap sandbox

_BOOT = r"""
import os, resource, sys
cpu, mem, fsize, nproc, uid = (int(x) for x in sys.argv[1:6])
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
if nproc:
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
if uid:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
_DENY = ("socket.", "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
         "pty.spawn")
def _guard(event, args):
    if event.startswith(_DENY):
        raise PermissionError(f"sandbox: {event} is not allowed (no network, no other programs)")
sys.addaudithook(_guard)
path = sys.argv[6]
sys.argv = [path]
del resource, cpu, mem, fsize, nproc, uid
import runpy
runpy.run_path(path, run_name="__main__")
"""


class PythonConfig(ConfigSection):
    """The ``python`` tool's ``kwargs`` (every limit positive and finite)."""

    cpu_s: int = Field(5, ge=1, le=3600, description="CPU-time limit of one program, in seconds.")
    memory_mb: int = Field(
        1024, ge=32, le=1 << 20, description="Address-space limit of each process, in MiB."
    )
    wall_s: float = Field(
        10.0,
        gt=0,
        le=3600,
        description="Wall-clock limit of one program (give the entry a timeout_s above it).",
    )
    max_output_chars: int = Field(
        2000, ge=1, le=1 << 24, description="stdout and stderr are each cut to this."
    )
    max_file_mb: int = Field(
        16, ge=1, le=1 << 16, description="Largest file (stdout included) it may write, MiB."
    )
    max_procs: int = Field(
        16, ge=1, le=4096, description="Processes (and threads) it may run at once (bwrap isolation only)."
    )
    scratch_mb: int = Field(
        64, ge=1, le=1 << 16, description="Size of its private /tmp (bwrap isolation only), MiB."
    )
    isolation: Literal["bwrap", "netns", "rlimits-only"] = Field(
        "bwrap",
        description="bwrap (bubblewrap namespaces; the default), or by name the weaker netns (a network "
        "namespace only) or rlimits-only, for machines without bubblewrap (see the sandbox doc).",
    )


# -- what this machine allows -------------------------------------------------------------------


def _run_ok(cmd: list[str]) -> tuple[bool, str]:
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as err:
        return False, f"{type(err).__name__}: {err}"
    detail = proc.stderr.decode("utf-8", "replace").strip().splitlines()
    return proc.returncode == 0, (detail[-1] if detail else f"exit code {proc.returncode}")


@functools.cache
def network_isolation() -> str:
    """``"netns"`` (``unshare -n``), ``"netns-user"`` (``unshare -rn``) or ``"audit-hook"``: the
    network namespace the ``netns`` isolation can make here (checked once per process)."""
    exe = shutil.which("unshare")
    if exe is None:
        return "audit-hook"
    for mode, flags in (("netns", ["-n"]), ("netns-user", ["-rn"])):
        if _run_ok([exe, *flags, "true"])[0]:
            return mode
    return "audit-hook"


@functools.cache
def _bwrap_problem() -> str | None:
    """Why bubblewrap cannot run a program here (``None``: a trial program ran as
    :func:`run_python` would run it)."""
    exe = shutil.which("bwrap")
    if exe is None:
        return f"bubblewrap (bwrap) is not installed; install it: {INSTALL_HINT}"
    options = _bwrap_options(exe)
    missing = [o for o in ("--perms", "--die-with-parent", "--new-session") if o not in options]
    if missing:
        return f"bubblewrap at {exe} is too old (no {', '.join(missing)}; 0.5 or newer needed)"
    work = Path(tempfile.mkdtemp(prefix="rlinf-python-probe-"))
    try:
        script = work / "main.py"
        script.write_text("print('sandboxed')\n", encoding="utf-8")
        os.chmod(script, 0o644)
        uid = _sandbox_uid() if os.geteuid() == 0 else 0
        boot = ["-I", "-c", _BOOT, "5", str(1 << 30), str(1 << 20), "16", str(uid), _SCRIPT]
        cmd = [*_bwrap_command(exe, script, 1 << 20), "--", sys.executable, *boot]
        try:
            proc = subprocess.run(cmd, capture_output=True, timeout=30, stdin=subprocess.DEVNULL, cwd="/")
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"bubblewrap cannot make a sandbox on this machine ({type(err).__name__}: {err})"
        if proc.stdout != b"sandboxed\n":
            lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            detail = lines[-1] if lines else f"exit code {proc.returncode}"
            return f"bubblewrap cannot make a sandbox on this machine ({detail})"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return None


@functools.cache
def _bwrap_options(exe: str) -> frozenset[str]:
    """The options this bubblewrap knows (older ones lack ``--size``, ``--disable-userns``)."""
    try:
        proc = subprocess.run([exe, "--help"], capture_output=True, timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return frozenset()
    text = (proc.stdout + proc.stderr).decode("utf-8", "replace")
    return frozenset(w for w in text.split() if w.startswith("--"))


def isolation_problem(isolation: str) -> str | None:
    """Why ``isolation`` cannot hold on this machine (``None``: it holds)."""
    if isolation not in ISOLATIONS:
        return f"unknown isolation {isolation!r}; one of {', '.join(ISOLATIONS)}"
    if isolation == "bwrap":
        problem = _bwrap_problem()
        if problem is not None:
            return (
                f"{problem}; or opt into a weaker sandbox by name: kwargs: {{isolation: netns}} (a network "
                "namespace only: the code sees the host's files and processes) or {isolation: rlimits-only}"
            )
    if isolation == "netns" and network_isolation() == "audit-hook":
        return (
            "no network namespace can be made here (unshare -n and unshare -rn fail); "
            f"install bubblewrap ({INSTALL_HINT}) or set kwargs: {{isolation: rlimits-only}}"
        )
    return None


def describe_isolation(isolation: str) -> str:
    """One line saying what holds for ``isolation`` here (``rlinf train --dry-run`` prints it)."""
    problem = isolation_problem(isolation)
    if problem is not None:
        return f"{isolation}: does not hold here ({problem})"
    if isolation == "bwrap":
        user = "a user id of its own" if os.geteuid() == 0 else "a user namespace"
        sized = "--size" in _bwrap_options(shutil.which("bwrap") or "bwrap")
        return (
            f"bwrap: bubblewrap PID, mount, IPC, UTS, network namespaces, {user}, read-only root, private "
            f"/tmp{'' if sized else ' (no size limit: bubblewrap older than 0.7)'}; rlimits on CPU, memory, "
            "file size, processes; wall clock"
        )
    if isolation == "netns":
        return (
            f"netns (weaker, opted in): {network_isolation()} network namespace, rlimits on CPU, memory, file "
            "size; wall clock; the code sees the host's files and processes"
        )
    return (
        "rlimits-only (weakest, opted in): rlimits on CPU, memory, file size; wall clock; no namespace: "
        "the code sees the host's network, files and processes"
    )


# -- the bubblewrap command ---------------------------------------------------------------------


def _ro_roots() -> list[Path]:
    """The interpreter's folders bound read-only (besides ``/usr``), none inside another."""
    found = {
        Path(p).resolve()
        for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)
        if p and Path(p).is_dir()
    }
    found.add(Path(sys.prefix))  # the venv as the interpreter names it (its pyvenv.cfg)
    found.add(Path(os.path.realpath(sys.executable)).parent.parent)
    out: list[Path] = []
    for p in sorted(found, key=lambda x: len(x.parts)):
        if p == Path("/"):
            continue
        if p == Path("/usr") or Path("/usr") in p.parents or any(q == p or q in p.parents for q in out):
            continue
        out.append(p)
    return out


def _bwrap_command(exe: str, script: Path, scratch_bytes: int) -> list[str]:
    root = os.geteuid() == 0
    options = _bwrap_options(exe)
    cmd = [exe, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if root:
        # no user namespace: the program drops to an unused uid itself (RLIMIT_NPROC then holds)
        cmd += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        cmd += ["--unshare-user", *(["--disable-userns"] if "--disable-userns" in options else [])]
    cmd += ["--die-with-parent", "--new-session", "--hostname", "sandbox", "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        p = Path("/") / name
        if p.is_symlink():
            cmd += ["--symlink", os.readlink(p), str(p)]
        elif p.is_dir():
            cmd += ["--ro-bind", str(p), str(p)]
    for name in ("ld.so.cache", "localtime"):
        if (Path("/etc") / name).exists():
            cmd += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    made: set[Path] = {Path("/tmp")}
    tmp = Path("/tmp")
    roots = _ro_roots()
    # the interpreter's folders and the venv, read-only; those under /tmp (a checkout there) are
    # bound after /tmp's private tmpfs, which would hide them
    late = [p for p in roots if tmp in p.parents]

    def bind(p: Path) -> list[str]:
        out = []
        for parent in reversed(p.parents):
            if parent != Path("/") and parent not in made:
                made.add(parent)
                out += ["--perms", "0755", "--dir", str(parent)]
        return [*out, "--ro-bind", str(p), str(p)]

    for p in roots:
        if p not in late:
            cmd += bind(p)
    cmd += ["--proc", "/proc", "--dev", "/dev"]
    if "--size" in options:  # bubblewrap 0.7: older ones give /tmp no size limit
        cmd += ["--size", str(scratch_bytes)]
    cmd += ["--perms", "01777", "--tmpfs", "/tmp"]
    for p in late:
        cmd += bind(p)
    cmd += ["--ro-bind", str(script), _SCRIPT, "--chdir", "/tmp"]
    cmd += ["--remount-ro", "/", "--clearenv", "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin"]
    cmd += ["--setenv", "LANG", "C.UTF-8", "--setenv", "HOME", "/tmp"]
    return cmd


# -- running ------------------------------------------------------------------------------------


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
    """The file's text (at most ``limit`` characters from its first ``4 * limit`` bytes)."""
    try:
        with path.open("rb") as fh:
            data = fh.read(4 * limit + 4)
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    if len(text) <= limit and len(data) <= 4 * limit:
        return text
    return text[:limit] + "\n[truncated]"


def _tail(path: Path, limit: int) -> tuple[str, bool]:
    """The file's text from about its last ``4 * limit`` bytes (a traceback's last lines say what
    went wrong) and whether its head was cut."""
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - 4 * limit))
            data = fh.read()
    except OSError:
        return "", False
    return data.decode("utf-8", errors="replace"), len(data) < size


def _clean_traceback(stderr: str, script: str) -> str:
    """The user's traceback without the sandbox's own frames, the script called ``main.py``."""
    out: list[str] = []
    skipping = False
    for line in stderr.replace(script, "main.py").splitlines(keepends=True):
        if line.startswith(('  File "<string>"', '  File "<frozen runpy>"')):
            skipping = True
            continue
        if skipping and line.startswith("    "):
            continue
        skipping = False
        out.append(line)
    return "".join(out)


def _sandbox_uid() -> int:
    """A user id no account has (one per call, so ``RLIMIT_NPROC`` counts this call alone)."""
    return (1 << 30) + secrets.randbelow(1 << 29)


def run_python(
    code: str,
    *,
    cpu_s: int = 5,
    memory_mb: int = 1024,
    wall_s: float = 10.0,
    max_output_chars: int = 2000,
    max_file_mb: int = 16,
    max_procs: int = 16,
    scratch_mb: int = 64,
    isolation: str = "bwrap",
) -> SandboxResult:
    """Run ``code`` as a script in a sandboxed interpreter (see the module doc).

    Raises:
        ConfigError: a limit that is not a positive finite number, or an ``isolation`` that
            cannot hold on this machine (:func:`isolation_problem`), named ``python.KEY``.
    """
    cfg = validate_model(
        PythonConfig,
        {
            "cpu_s": cpu_s,
            "memory_mb": memory_mb,
            "wall_s": wall_s,
            "max_output_chars": max_output_chars,
            "max_file_mb": max_file_mb,
            "max_procs": max_procs,
            "scratch_mb": scratch_mb,
            "isolation": isolation,
        },
        prefix="python",
    )
    _check_host(cfg.isolation)
    work = Path(tempfile.mkdtemp(prefix="rlinf-python-"))
    try:
        script = work / "main.py"
        script.write_text(code, encoding="utf-8", errors="surrogatepass")
        out_path, err_path = work / ".stdout", work / ".stderr"
        bwrap = cfg.isolation == "bwrap"
        uid = _sandbox_uid() if bwrap and os.geteuid() == 0 else 0
        if bwrap:
            prefix = [*_bwrap_command(shutil.which("bwrap") or "bwrap", script, cfg.scratch_mb << 20), "--"]
            shown, cwd = _SCRIPT, "/"
            os.chmod(script, 0o644)  # readable by the sandbox's own uid
        else:
            prefix = []
            if cfg.isolation == "netns":
                net = network_isolation()
                prefix = [shutil.which("unshare") or "unshare", "-n" if net == "netns" else "-rn"]
            shown, cwd = str(script), str(work)
        fsize = cfg.max_file_mb << 20
        cmd = [
            *prefix,
            sys.executable,
            "-I",
            "-c",
            _BOOT,
            str(cfg.cpu_s),
            str(cfg.memory_mb << 20),
            str(fsize),
            str(cfg.max_procs if bwrap else 0),
            str(uid),
            shown,
        ]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "HOME": str(work)}
        with out_path.open("wb") as out, err_path.open("wb") as err:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=cwd,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
            limit = ""
            try:
                rc = proc.wait(timeout=cfg.wall_s)
            except subprocess.TimeoutExpired:
                limit = "wall"
                _kill(proc)
                rc = proc.wait(timeout=30)
            except BaseException:
                _kill(proc)
                proc.wait(timeout=30)
                raise
            if not bwrap:  # what it left behind in its process group
                _killpg(proc.pid)
        stdout = _read(out_path, cfg.max_output_chars)
        tail, cut = _tail(err_path, cfg.max_output_chars)
        full_err = _clean_traceback(tail, shown)
        stderr = (
            full_err
            if len(full_err) <= cfg.max_output_chars and not cut
            else "[truncated]\n" + full_err[-cfg.max_output_chars :]
        )
        if not limit:
            if rc in (-signal.SIGXCPU, -signal.SIGKILL, 128 + signal.SIGXCPU, 128 + signal.SIGKILL):
                limit = "cpu"
            elif "MemoryError" in full_err:
                limit = "memory"
        return SandboxResult(stdout, stderr, rc, limit, cfg.isolation)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _check_host(isolation: str) -> None:
    problem = isolation_problem(isolation)
    if problem is not None:
        raise ConfigError(f"the python tool cannot run here: {problem}", "python.isolation")


def _kill(proc: subprocess.Popen[Any]) -> None:
    """End the sandbox: its process group (bwrap's PID namespace dies with bwrap)."""
    _killpg(proc.pid)
    try:
        proc.kill()
    except ProcessLookupError:
        pass


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class Python(ToolSet):
    """The built-in ``python`` tool: runs code in a sandbox, one per call (see the module doc;
    the arguments are :class:`PythonConfig`'s).

    Raises:
        ConfigError: a limit that is not positive and finite, or an isolation that cannot hold
            here (no bubblewrap, and no weaker isolation named).
    """

    PLUGIN_NAME: ClassVar[str] = "python"
    per_episode: ClassVar[bool] = False
    config_model: ClassVar[type[ConfigSection]] = PythonConfig

    def __init__(
        self,
        cpu_s: int = 5,
        memory_mb: int = 1024,
        wall_s: float = 10.0,
        max_output_chars: int = 2000,
        max_file_mb: int = 16,
        max_procs: int = 16,
        scratch_mb: int = 64,
        isolation: str = "bwrap",
    ) -> None:
        self.config = validate_model(
            PythonConfig,
            {
                "cpu_s": cpu_s,
                "memory_mb": memory_mb,
                "wall_s": wall_s,
                "max_output_chars": max_output_chars,
                "max_file_mb": max_file_mb,
                "max_procs": max_procs,
                "scratch_mb": scratch_mb,
                "isolation": isolation,
            },
            prefix="python",
        )
        _check_host(self.config.isolation)

    @classmethod
    def host_problems(cls, kwargs: dict[str, Any]) -> dict[str, str]:
        """What would stop this tool on this machine, by kwarg (the config check calls it):
        an isolation that cannot hold here."""
        isolation = str(kwargs.get("isolation", PythonConfig.model_fields["isolation"].default))
        problem = isolation_problem(isolation)
        return {} if problem is None else {"isolation": f"the python tool cannot run here: {problem}"}

    def python(self, code: str) -> str:
        """Run a Python program and return what it prints (stdout, then stderr).

        Args:
            code: the program's source; print the values you want to see.
        """
        return run_python(code, **self.config.model_dump()).as_text()
