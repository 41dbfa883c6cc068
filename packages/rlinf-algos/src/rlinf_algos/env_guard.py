"""``env.timeout_s`` for envs that run in rlinf's own process: the user's code on a thread of its
own, waited for with a bound.

An env family with an interpreter of its own (MetaWorld, LIBERO...) already runs its simulator
in a child process that is killed when a request takes longer than ``env.timeout_s``
(:class:`~rlinf_algos.families.subproc.SimProcess`). An env in rlinf's process (a
``module:EnvName-vN`` id, a plugin's id, ``env.wrappers``) cannot be killed: a ``step`` that
never returns would hold the env worker's thread, and with ``runner.scheduler: local`` the whole
run, forever. :class:`EnvThread` builds, resets, steps and closes such an env on one daemon
thread (so an env that needs its calls on the thread that built it, a GL context say, keeps them
there), and the caller waits at most ``env.timeout_s`` for each ``reset`` and ``step``. A call
that does not return in time is an :class:`~rlinf_algos.envs.EnvError` naming the env, the
call, how long it ran and the line of the user's code it was blocked at; the thread is left to
its call (a daemon thread: it never holds the process at exit) and the env is never called
again (its ``close`` is skipped, and said so).

gymnasium's own envs (MuJoCo, Box2D, classic control) without ``env.wrappers`` are stepped
directly: they cannot block, and the hand-off to a thread would cost a few tens of microseconds
a step (:func:`needs_guard`).
"""

from __future__ import annotations

import concurrent.futures
import os
import queue
import sys
import threading
import time
from typing import Any

__all__ = ["CallThread", "EnvThread", "EnvTimeout", "needs_guard", "user_place"]

_OWN = (
    f"{os.sep}gymnasium{os.sep}",
    f"{os.sep}rlinf_algos{os.sep}",
    f"{os.sep}numpy{os.sep}",
    f"{os.sep}threading.py",
    f"{os.sep}concurrent{os.sep}",
)


def user_place(err: BaseException) -> str:
    """``file:line`` of the innermost frame of ``err``'s traceback outside gymnasium, numpy, rlinf
    and the standard library's threading (the user's env), or of the innermost frame."""
    import traceback

    frames = traceback.extract_tb(err.__traceback__)
    mine = [f for f in frames if not any(part in f.filename for part in _OWN)]
    f = (mine or frames or [None])[-1]
    return f"{f.filename}:{f.lineno}" if f is not None else "?"


class EnvTimeout(Exception):
    """A call on an :class:`EnvThread` did not return within its bound (``call``, ``waited``
    seconds, ``place``: the ``file:line`` the thread was at)."""

    def __init__(self, call: str, waited: float, place: str, earlier: bool = False) -> None:
        self.call, self.waited, self.place, self.earlier = call, waited, place, earlier
        super().__init__(f"{call} did not return within {waited:g} s")


def needs_guard(family: Any, env_id: str, wrappers: Any) -> bool:
    """Whether the env's calls run on an :class:`EnvThread`: every env in rlinf's process
    (``family`` without an interpreter of its own) except gymnasium's own ids without
    ``env.wrappers``."""
    if getattr(family, "interpreter", None) is not None:
        return False  # its simulator process has the bound (families.subproc)
    if getattr(family, "PLUGIN_NAME", "") != "gymnasium" or wrappers or ":" in env_id:
        return True
    try:
        import gymnasium

        entry = gymnasium.spec(env_id).entry_point
    except Exception:
        return True
    return not (isinstance(entry, str) and entry.startswith("gymnasium."))


class CallThread:
    """One daemon thread that runs the calls submitted to it in order (the part of a
    ``ThreadPoolExecutor(1)`` a rank uses). Daemon: a call that never returns (a user's code
    that blocks) never holds the process at its exit, as a ``ThreadPoolExecutor``'s thread
    would (the interpreter joins those)."""

    def __init__(self, name: str) -> None:
        self.jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            fut, fn, args, kwargs = job
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn(*args, **kwargs))
                except BaseException as err:
                    fut.set_exception(err)
            del fut, fn, args, kwargs, job

    def submit(self, fn: Any, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.jobs.put((fut, fn, args, kwargs))
        return fut

    def shutdown(self, wait: bool = False, cancel_futures: bool = True) -> None:
        """End the thread after its current call; calls not yet started are cancelled."""
        while cancel_futures:
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job[0].cancel()
        self.jobs.put(None)
        if wait:
            self.thread.join()


class EnvThread:
    """One daemon thread that runs an env's calls in order; :meth:`call` waits for each at most
    ``timeout`` seconds (see the module docstring). ``name``: the thread's name."""

    def __init__(self, name: str) -> None:
        self.calls = CallThread(name)
        self.thread = self.calls.thread
        self.stuck: tuple[str, float] | None = None
        """``(call, monotonic start)`` of a call that did not return in time (the env is lost)."""

    def call(self, what: str, timeout: float, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` on the thread; raises what it raises, or :class:`EnvTimeout`
        when it has not returned after ``timeout`` seconds (or an earlier call never did)."""
        if self.stuck is not None:
            call, since = self.stuck
            raise EnvTimeout(call, time.monotonic() - since, self.place(), earlier=True)
        start = time.monotonic()
        fut = self.calls.submit(fn, *args, **kwargs)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            if fut.done():  # it returned just as the wait ended
                return fut.result()
            self.stuck = (what, start)
            raise EnvTimeout(what, timeout, self.place()) from None

    def place(self) -> str:
        """``file:line`` the thread is at now: the innermost frame outside gymnasium, numpy,
        rlinf and the standard library's threading (the user's code), else the innermost."""
        frame = sys._current_frames().get(self.thread.ident or -1)
        innermost = None
        while frame is not None:
            here = f"{frame.f_code.co_filename}:{frame.f_lineno}"
            innermost = innermost or here
            if not any(part in frame.f_code.co_filename for part in _OWN):
                return here
            frame = frame.f_back
        return innermost or "?"

    def close(self, fn: Any = None, timeout: float = 10.0) -> str | None:
        """Run ``fn`` (the env's ``close``) on the thread, waiting at most ``timeout`` s, and end
        the thread. Returns what was skipped (``None``: nothing): the env's close when a call
        never returned, or when the close itself did not return in time."""
        if self.stuck is not None:
            call, since = self.stuck
            return (
                f"its close (its {call} has been blocked at {self.place()} for "
                f"{time.monotonic() - since:.0f} s; the thread is left to it)"
            )
        try:
            if fn is not None:
                self.call("close", timeout, fn)
        except EnvTimeout:
            return f"the rest of its close (blocked at {self.place()} after {timeout:g} s)"
        finally:
            self.calls.shutdown(cancel_futures=False)
        return None
