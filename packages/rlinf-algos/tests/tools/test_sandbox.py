"""The ``python`` tool's sandbox against hostile programs (issue 53, item 1).

Each program is one a model could write: it reads the caller's secrets through ``/proc``, kills
its caller, leaves processes behind (forked through ``ctypes``, or after switching the audit hook
off through ``gc``), connects to a Unix socket or a TCP server of the host, writes a ``.pth`` into
the venv, fills the disk, forks without end. Each is contained and the caller goes on. Every case
here fails on the former sandbox (``isolation: netns``: a network namespace and rlimits), which
these programs got through; the last test shows it, on the isolations a user may still opt into.

bubblewrap must be installed (``sudo apt-get install bubblewrap``); where it cannot run at all
the tests are skipped, saying why.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from rlinf_algos.tools import sandbox as sandbox_mod
from rlinf_algos.tools.sandbox import Python, isolation_problem, run_python
from rlinf_core.errors import ConfigError

pytestmark = pytest.mark.skipif(
    isolation_problem("bwrap") is not None, reason=f"bubblewrap cannot run here: {isolation_problem('bwrap')}"
)

DISABLE_HOOK = textwrap.dedent(
    """
    import gc
    for f in gc.get_objects():
        if getattr(f, "__name__", "") == "_guard" and "_DENY" in getattr(f, "__globals__", {}):
            f.__globals__["_DENY"] = ("no-such-event",)
    import socket
    socket.socket().close()
    print("hook off")
    """
)

LIBC = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"


def _marked(marker: str) -> list[int]:
    """Pids of the processes named ``marker`` (``prctl(PR_SET_NAME)``)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "comm").read_text().strip() == marker:
                    out.append(int(d.name))
            except OSError:
                pass
    return out


def _gone(marker: str, wait_s: float = 2.0) -> list[int]:
    """The processes named ``marker`` still alive after ``wait_s`` (killed, for the next test)."""
    deadline = time.monotonic() + wait_s
    while (left := _marked(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return left


CALLER = textwrap.dedent(
    """
    import json, os, sys
    from rlinf_algos.tools.sandbox import run_python
    code = open(sys.argv[1]).read().replace("CALLER_PID", str(os.getpid()))
    res = run_python(code, wall_s=20)
    print(json.dumps({"stdout": res.stdout, "stderr": res.stderr, "rc": res.returncode}))
    """
)


def _from_a_caller(
    tmp_path: Path, code: str, env: dict[str, str] | None = None
) -> tuple[int, dict[str, Any]]:
    """Run ``code`` in the sandbox from a Python process of its own (its environment ``env``
    added; ``CALLER_PID`` in the code is that process's pid): its exit code and the result."""
    (tmp_path / "caller.py").write_text(CALLER)
    (tmp_path / "code.py").write_text(code)
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "caller.py"), str(tmp_path / "code.py")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )
    lines = proc.stdout.strip().splitlines()
    return proc.returncode, (json.loads(lines[-1]) if lines else {"stderr": proc.stderr[-2000:]})


def test_it_cannot_read_the_callers_environment_or_files(tmp_path: Path) -> None:
    """A secret in the caller's environment (as a run's ``*_API_KEY``), searched for in
    ``/proc/<ppid>/environ``, the caller's, every ``/proc/*/environ``; a file of the caller's user."""
    secret = f"sk-{uuid.uuid4().hex}"
    private = tmp_path / "private.txt"
    private.write_text(secret)
    code = textwrap.dedent(
        f"""
        import os
        pids = [os.getppid(), CALLER_PID] + [p for p in os.listdir("/proc") if p.isdigit()]
        print("pids", len(pids))
        for pid in pids:
            try:
                env = open(f"/proc/{{pid}}/environ", "rb").read().decode(errors="replace").split("\\0")
                hits = [v for v in env if "RLINF_TEST_API_KEY" in v]
                print(*(["LEAK", pid, hits] if hits else ["read", pid]))
            except OSError as err:
                print(type(err).__name__)
        for path in [{str(private)!r}, os.path.expanduser("~/.ray"), "/root", "/home"]:
            try:
                print("read", open(path).read() if os.path.isfile(path) else os.listdir(path))
            except OSError as err:
                print(type(err).__name__)
        """
    )
    rc, res = _from_a_caller(tmp_path, code, {"RLINF_TEST_API_KEY": secret})
    assert rc == 0 and res.get("rc") == 0, res
    out = res["stdout"]
    assert "pids " in out and "FileNotFoundError" in out  # the search ran
    assert "LEAK" not in out and secret not in out, out


def test_it_cannot_kill_its_caller(tmp_path: Path) -> None:
    """Its parent and the process that called the tool (on the former sandbox this program
    killed it: exit -9)."""
    code = textwrap.dedent(
        """
        import os, signal
        for pid in (os.getppid(), CALLER_PID, 1):
            try:
                os.kill(pid, signal.SIGKILL)
                print("killed", pid)
            except OSError as err:
                print(type(err).__name__)
        """
    )
    rc, res = _from_a_caller(tmp_path, code)
    assert rc == 0, (rc, res)
    assert "killed" not in res["stdout"]


def test_no_process_outlives_the_call() -> None:
    """Children forked through ctypes (below the audit hook) and through os.fork once the hook is
    switched off through gc, each sleeping past the call: the call returns and none is left."""
    marker = f"rlz{uuid.uuid4().hex[:10]}"
    code = (
        LIBC
        + DISABLE_HOOK
        + textwrap.dedent(
            f"""
            import os, time
            def linger():
                libc.prctl(15, {marker.encode()!r}, 0, 0, 0)
                time.sleep(60)
                os._exit(0)
            if libc.fork() == 0:
                linger()
            if os.fork() == 0:
                os.setsid()
                linger()
            time.sleep(0.3)
            print("parent done")
            """
        )
    )
    res = run_python(code, wall_s=20)
    assert "hook off" in res.stdout and "parent done" in res.stdout, res.stderr
    assert _gone(marker) == []
    # a program that is killed at the wall clock leaves nothing either
    res = run_python(code.replace('print("parent done")', "time.sleep(60)"), wall_s=2)
    assert res.limit == "wall"
    assert _gone(marker) == []


def test_it_reaches_no_unix_socket_and_no_network(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(str(path))
    unix.listen(4)
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(4)
    port = tcp.getsockname()[1]
    code = (
        LIBC
        + textwrap.dedent(
            f"""
            import struct
            fd = libc.socket(1, 1, 0)
            addr = struct.pack("=H", 1) + {str(path).encode()!r}.ljust(108, b"\\0")
            print("unix", fd, libc.connect(fd, addr, len(addr)))
            fd = libc.socket(2, 1, 0)
            addr = struct.pack("=H", 2) + struct.pack("!H4s8x", {port}, bytes([127, 0, 0, 1]))
            print("tcp", fd, libc.connect(fd, addr, len(addr)))
            """
        )
        + DISABLE_HOOK
        + textwrap.dedent(
            f"""
            for family, target in ((socket.AF_UNIX, {str(path)!r}), (socket.AF_INET, ("127.0.0.1", {port}))):
                try:
                    socket.socket(family).connect(target)
                    print("connected", family)
                except OSError as err:
                    print("refused", type(err).__name__)
            """
        )
    )
    try:
        res = run_python(code, wall_s=20)
        unix.setblocking(False)
        tcp.setblocking(False)
        for server in (unix, tcp):
            with pytest.raises(BlockingIOError):
                server.accept()  # nobody came
    finally:
        unix.close()
        tcp.close()
    assert "hook off" in res.stdout, res.stderr
    assert "unix " in res.stdout and "tcp " in res.stdout and "connected" not in res.stdout
    assert res.stdout.count("refused") == 2


def test_it_writes_nothing_outside_its_scratch_folder(tmp_path: Path) -> None:
    pth = Path(sysconfig.get_paths()["purelib"]) / f"rlinf_sandbox_test_{uuid.uuid4().hex[:8]}.pth"
    host_file = tmp_path / "host.txt"
    host_file.write_text("untouched")
    code = textwrap.dedent(
        f"""
        import os
        for path in [{str(pth)!r}, {str(host_file)!r}, "/usr/lib/x", "/etc/x", "/x", os.path.expanduser("~/.bashrc")]:
            try:
                with open(path, "w") as fh:
                    fh.write("/nonexistent-dir\\n")
                print("wrote", path)
            except OSError as err:
                print("refused", path, type(err).__name__)
        with open("scratch.txt", "w") as fh:
            fh.write("ok")
        print("scratch", open("scratch.txt").read(), os.getcwd())
        """
    )
    try:
        res = run_python(code, wall_s=20)
        assert not pth.exists(), "the sandbox wrote a .pth into the venv"
        assert host_file.read_text() == "untouched"
    finally:
        pth.unlink(missing_ok=True)
    assert res.stdout.count("refused") == 5 and "scratch ok /tmp" in res.stdout, res.stdout + res.stderr
    assert "wrote /tmp/.bashrc" in res.stdout  # HOME is the private scratch folder


def test_disk_file_size_and_process_limits_hold() -> None:
    fill = textwrap.dedent(
        """
        n = 0
        try:
            for i in range(40):
                with open(f"f{i}", "wb") as fh:
                    fh.write(b"x" * (1 << 20))
                n += 1
        except OSError as err:
            print("disk full after", n, type(err).__name__)
        try:
            with open("big", "wb") as fh:
                fh.write(b"x" * (3 << 20))
        except OSError as err:
            print("file too big", type(err).__name__)
        """
    )
    res = run_python(fill, wall_s=20, scratch_mb=8, max_file_mb=2)
    assert "disk full after" in res.stdout and int(res.stdout.split("after ")[1].split()[0]) < 9, res.stdout
    assert "file too big" in res.stdout
    bomb = LIBC + textwrap.dedent(
        """
        import os
        n = 0
        for i in range(60):
            pid = libc.fork()
            if pid == 0:
                libc.pause()
                os._exit(0)
            if pid < 0:
                break
            n += 1
        print("forked", n)
        """
    )
    res = run_python(bomb, wall_s=20, max_procs=8)
    assert "forked" in res.stdout, res.stderr
    assert int(res.stdout.split()[1]) < 8


def test_a_fork_bomb_ends_at_its_limits_and_leaves_nothing() -> None:
    """Every child forks too (through ctypes, below the audit hook)."""
    marker = f"rlb{uuid.uuid4().hex[:10]}"
    real = LIBC + f"libc.prctl(15, {marker.encode()!r}, 0, 0, 0)\nwhile True:\n    libc.fork()\n"
    start = time.monotonic()
    res = run_python(real, wall_s=3, cpu_s=2, max_procs=16)
    assert time.monotonic() - start < 15 and res.limit in ("cpu", "wall")
    assert _gone(marker) == []


def test_limits_are_validated_and_bwrap_is_required_unless_opted_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for bad in ({"memory_mb": -1}, {"wall_s": float("nan")}, {"cpu_s": 0}, {"wall_s": float("inf")}):
        with pytest.raises(ConfigError, match=r"python\.(memory_mb|wall_s|cpu_s)"):
            run_python("print(1)", **bad)  # type: ignore[arg-type]
        with pytest.raises(ConfigError):
            Python(**bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="isolation"):
        Python(isolation="none")
    # without bubblewrap on PATH: the tool refuses to start, naming the weaker modes to opt into
    monkeypatch.setenv("PATH", str(tmp_path))
    sandbox_mod._bwrap_problem.cache_clear()
    try:
        with pytest.raises(ConfigError, match=r"bubblewrap.*isolation: netns.*rlimits-only"):
            Python()
        assert Python(isolation="rlimits-only").python("print(6 * 7)") == "42\n"
    finally:
        monkeypatch.undo()
        sandbox_mod._bwrap_problem.cache_clear()
        sandbox_mod.network_isolation.cache_clear()
