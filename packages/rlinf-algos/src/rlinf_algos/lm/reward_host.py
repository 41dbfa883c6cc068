"""User reward code, contained: each call runs in a child process with a deadline.

Why a process and not a thread: a thread cannot be stopped. A reward that sleeps forever, spins
in a Python loop, or spins in C code that holds the GIL (a regex that backtracks forever, a
numeric kernel) would keep a thread, and with the GIL held the whole worker, busy for good; a
watchdog thread in the same process might not even get to run. A child process can always be
killed. So :class:`ContainedReward` starts one child per reward worker
(``python -m rlinf_algos.lm.reward_host``), which imports the reward file once and scores what
it is sent over a socket pair; the parent waits at most ``reward.timeout_s`` for each answer and,
past it, kills the child (SIGKILL) and starts a fresh one for the next call. The same covers a
reward that calls ``sys.exit()``, ``os._exit()`` or crashes the interpreter: the child ends,
the parent names the sample.

What a failure does is ``reward.on_error``: ``stop`` raises a one-line
:class:`~rlinf_algos.lm.rewards.RewardError` naming the reward (file and function), the sample
(``file:row``), the user's own frame (``file:line``) and the elapsed time; ``zero`` scores the
sample 0, counts it in :attr:`ContainedReward.failures` (``reward_failures`` in the metrics and
``summary.json``) and goes on.

The child's stdout and stderr go to a pipe the parent drains into ``log_path``
(``RUN/logs/reward-<worker>.log``) up to ``LOG_CAP`` bytes; past it the rest is dropped and one
line on the console says so and where the log is. The messages between the two processes are
pickled, as :mod:`multiprocessing` does between a process and the child it started; nothing
read from a run directory or a shared file is unpickled.

Only rewards the user brings are contained (``reward.path``, or a plugin's registered reward);
rlinf-algos' built-ins (``exact_match``, ``math``, ``arith``) run in the calling process.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

__all__ = ["LOG_CAP", "ContainedReward", "contain_reward"]

LOG_CAP = 1 << 20
"""Bytes of a reward child's output kept in its log file (1 MiB); the rest is dropped."""

LOAD_TIMEOUT_S = 60.0
"""How long a child may take to start and import the reward file (at least ``reward.timeout_s``):
an interpreter start on a loaded machine is not the reward's time."""


def contain_reward(score: Any, log_path: str | Path | None = None) -> Any:
    """``score`` (a :class:`~rlinf_algos.lm.rewards.ScoreFn`) behind a :class:`ContainedReward`
    when it runs user code (a file, or a plugin's registered reward); rlinf-algos' built-in
    rewards are returned as they are."""
    from rlinf_algos.lm.rewards import BUILTIN_REWARDS

    if score.cfg.path is None and type(score._fn) in BUILTIN_REWARDS.values():
        return score
    return ContainedReward(score, log_path)


class ContainedReward:
    """``score(completions, samples) -> list[float]`` run in a killable child process.

    Args:
        score: the :class:`~rlinf_algos.lm.rewards.ScoreFn` loaded in this process (its
            ``reward`` section is what the child loads again; its label names the reward).
        log_path: where the child's output goes (capped at :data:`LOG_CAP`); ``None``: this
            process's own stdout/stderr.

    Attributes:
        failures: samples scored 0 because the reward failed (``reward.on_error: zero``).
        last_info: per sample of the last call, the extra keys of a verl dict result.
    """

    def __init__(self, score: Any, log_path: str | Path | None = None) -> None:
        self.cfg = score.cfg
        self.root = score.root
        self.label = score.label
        self.kind = score.kind
        self.timeout = float(self.cfg.timeout_s)
        self.on_error = str(self.cfg.on_error)
        self.log_path = Path(log_path) if log_path is not None else None
        self.failures = 0
        self.last_info: list[dict[str, Any]] = []
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._drain: _Drain | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ContainedReward({self.kind}: {self.label}, timeout {self.timeout:g} s, on_error {self.on_error})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_contained, (self.cfg.model_dump(), None if self.root is None else str(self.root)))

    # -- scoring ----------------------------------------------------------------------------
    def __call__(self, completions: Sequence[str], samples: Sequence[Any]) -> list[float]:
        """Score ``completions[i]`` against ``samples[i]``, one call of the user's function per
        sample (verl) or per batch (TRL-style and registered rewards), each within
        ``reward.timeout_s``."""
        completions, samples = list(completions), list(samples)
        self.last_info = [{} for _ in samples]
        if not samples:
            return []
        with self._lock:
            if self.kind == "verl":
                out = []
                for i, (c, s) in enumerate(zip(completions, samples, strict=True)):
                    ok, value, info = self._score([c], [s])
                    out.append(value[0] if ok else 0.0)
                    if ok and info:
                        self.last_info[i] = info[0]
                return out
            ok, value, info = self._score(completions, samples)
            if ok:
                self.last_info = list(info) or self.last_info
                return list(value)
            if value == "error" and len(samples) > 1:  # zero: find which samples fail
                out = []
                for c, s in zip(completions, samples, strict=True):
                    ok1, v1, _ = self._score([c], [s])
                    out.append(v1[0] if ok1 else 0.0)
                return out
            return [0.0] * len(samples)

    def _score(self, completions: list[str], samples: list[Any]) -> tuple[bool, Any, Any]:
        """``(True, scores, info)``, or with ``on_error: zero`` ``(False, "error" | "gone", None)``
        after counting the samples failed; with ``stop`` a failure raises."""
        if self._conn is None:
            self._start()  # not counted in the call's time
        t0 = time.monotonic()
        try:
            reply = self._ask(("score", completions, samples))
        except _Gone as gone:
            return self._failed(gone.why, samples, time.monotonic() - t0, "gone")
        if reply[0] == "ok":
            return True, reply[1], reply[2]
        return self._failed(reply[1], samples, time.monotonic() - t0, "error", where=False)

    def _failed(
        self, why: str, samples: list[Any], elapsed: float, kind: str, where: bool = True
    ) -> tuple[bool, Any, Any]:
        from rlinf_algos.lm.rewards import RewardError

        what = (
            f"sample {samples[0].source}"
            if len(samples) == 1
            else f"a batch of {len(samples)} samples from {samples[0].source}"
        )
        msg = f"reward {self.label} {why} on {what}" if where else why
        msg = f"{msg} (after {elapsed:.1f} s)"
        if self.on_error != "zero":
            raise RewardError(f"{msg}; reward.on_error: zero scores such samples 0 and goes on")
        self.failures += len(samples)
        if self.failures == len(samples):  # the first: say it once
            print(
                f"rlinf: {msg}; scored 0 (reward.on_error: zero), counted in reward_failures", file=sys.stderr
            )
        return False, kind, None

    # -- the child --------------------------------------------------------------------------
    def _ask(self, msg: tuple[Any, ...], timeout: float | None = None) -> tuple[Any, ...]:
        if self._conn is None:
            self._start()
        conn = self._conn
        assert conn is not None
        limit = self.timeout if timeout is None else timeout
        try:
            conn.send(msg)
            ready = conn.poll(limit)
        except (OSError, EOFError):
            ready = True
        if not ready:
            self.close()
            what = f"reward.timeout_s={self.timeout:g} s" if timeout is None else f"{limit:g} s"
            raise _Gone(f"did not return within {what} (stopped)")
        try:
            return conn.recv()
        except (OSError, EOFError):
            code = self._reap()
            raise _Gone(_exit_text(code)) from None

    def _start(self) -> None:
        from rlinf_algos.lm.rewards import RewardError

        parent, child = socket.socketpair()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        cmd = [sys.executable, "-m", "rlinf_algos.lm.reward_host", str(child.fileno())]
        out = subprocess.PIPE if self.log_path is not None else None
        self._proc = subprocess.Popen(
            cmd, pass_fds=[child.fileno()], stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env
        )
        child.close()
        self._conn = Connection(parent.detach())
        if self.log_path is not None:
            assert self._proc.stdout is not None and self._proc.stderr is not None
            if self._drain is None:
                self._drain = _Drain(self.log_path)
            self._drain.follow(self._proc.stdout)
            self._drain.follow(self._proc.stderr)
        t0 = time.monotonic()
        try:
            reply = self._ask(
                ("load", self.cfg.model_dump(), None if self.root is None else str(self.root)),
                max(self.timeout, LOAD_TIMEOUT_S),
            )
        except _Gone as gone:
            raise RewardError(
                f"reward {self.label}: its process, loading the file, {gone.why} "
                f"(after {time.monotonic() - t0:.1f} s)"
            ) from None
        if reply[0] != "ok":
            self.close()
            raise RewardError(reply[1])

    def _reap(self) -> int | None:
        proc, self._proc = self._proc, None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if proc is None:
            return None
        try:
            return proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()

    def close(self) -> None:
        """Kill the child (a fresh one starts on the next call)."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
        self._reap()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class _Gone(Exception):
    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"crashed its process ({name})"
    return f"ended its process (exit code {code}; sys.exit() or os._exit() in the reward?)"


def _contained(cfg: dict[str, Any], root: str | None) -> ContainedReward:
    from rlinf_algos.lm.rewards import reload_reward

    return ContainedReward(reload_reward(cfg, root))


class _Drain:
    """Copies a child's output into ``path`` up to :data:`LOG_CAP` bytes, then drops the rest
    (still reading, so the child never blocks on a full pipe) after one console notice."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.file = open(path, "ab")  # noqa: SIM115 - closed when the last stream ends
        self.written = path.stat().st_size
        self.noticed = False
        self.lock = threading.Lock()

    def follow(self, stream: Any) -> None:
        threading.Thread(target=self._copy, args=(stream,), daemon=True, name="reward-output").start()

    def _copy(self, stream: Any) -> None:
        with stream:
            while True:
                chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
                if not chunk:
                    return
                with self.lock:
                    room = LOG_CAP - self.written
                    if room > 0:
                        self.file.write(chunk[:room])
                        self.written += min(room, len(chunk))
                        self.file.flush()
                    if len(chunk) > room and not self.noticed:
                        self.noticed = True
                        self.file.write(f"\n[rlinf: output truncated at {LOG_CAP >> 20} MiB]\n".encode())
                        self.file.flush()
                        print(
                            f"rlinf: the reward's output passed {LOG_CAP >> 20} MiB; the rest is dropped "
                            f"(the first {LOG_CAP >> 20} MiB are in {self.path})",
                            file=sys.stderr,
                            flush=True,
                        )


# -- the child process --------------------------------------------------------------------------


def _child(fd: int) -> None:
    """Serve ``load`` and ``score`` requests on the socket ``fd`` until it closes."""
    from rlinf_algos.lm.rewards import RewardError, load_reward
    from rlinf_core.errors import RlinfError

    conn = Connection(fd)
    score: Any = None
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg[0] == "load":
            from rlinf_algos.lm.config import RewardConfig

            try:
                score = load_reward(RewardConfig.model_validate(msg[1]), root=msg[2])
                conn.send(("ok",))
            except RlinfError as err:
                conn.send(("err", str(err)))
            continue
        completions, samples = msg[1], msg[2]
        try:
            values = score(completions, samples)
            reply: tuple[Any, ...] = ("ok", [float(v) for v in values], _plain(score.last_info))
        except RewardError as err:
            reply = ("err", str(err))
        except SystemExit as err:
            reply = ("err", _where(score, f"called sys.exit({err.code!r})", samples, err))
        except BaseException as err:
            reply = ("err", _where(score, f"raised {type(err).__name__}: {err}", samples, err))
        sys.stdout.flush()
        sys.stderr.flush()
        conn.send(reply)


def _where(score: Any, problem: str, samples: list[Any], err: BaseException) -> str:
    from rlinf_algos.lm.rewards import user_frame

    what = (
        f"sample {samples[0].source}"
        if len(samples) == 1
        else f"a batch of {len(samples)} samples from {samples[0].source}"
    )
    return f"reward {score.label} {problem.splitlines()[0] if problem else problem}{user_frame(err, score.cfg.path)} on {what}"


def _plain(info: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Extra verl keys as plain values (numbers, strings, booleans; anything else as its repr)."""
    out = []
    for d in info:
        row = {}
        for k, v in d.items():
            if isinstance(v, bool | int | str) or v is None:
                row[str(k)] = v
            elif isinstance(v, float):
                row[str(k)] = v if math.isfinite(v) else None
            else:
                try:
                    row[str(k)] = float(v)
                except (TypeError, ValueError):
                    row[str(k)] = repr(v)[:200]
        out.append(row)
    return out


if __name__ == "__main__":
    _child(int(sys.argv[1]))
