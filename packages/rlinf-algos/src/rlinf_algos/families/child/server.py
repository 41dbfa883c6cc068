"""The main program of a simulator process: ``python server.py BACKEND_FILE`` in the simulator's
own interpreter, talking to its env worker over two pipes (file descriptors given by the
``RLINF_SIM_FDS`` variable, ``"read,write"``) with :mod:`wire` messages. Standard library and
numpy only, besides the simulator the backend imports.

It holds ``num_envs`` copies of one simulator and gives them the semantics rlinf's vector envs
have (gymnasium's ``AutoresetMode.SAME_STEP``): a copy whose episode ends is reset in the same
step, the observation returned for it is its new episode's first, and the last one of the
finished episode travels beside it with the episode's success at its last step
(``success_at_end``) and at any step (``success_once``).

Requests and replies (a dict each; ``cmd`` names the request):

- ``make {spec}`` -> ``{spaces}``: build the copies (``spec`` is the backend's: task, seeds...);
- ``reset {seeds, inits}`` -> ``{obs}``: reset every copy (``seeds[i]``: ``None`` continues its
  generator; ``inits[i]``: the index of a fixed initial state or task variation, or ``None``);
- ``step {actions}`` -> ``{obs, reward, terminated, truncated, success, done, final_obs,
  final_success, final_success_once}``;
- ``render`` -> ``{frames}`` (``[N, H, W, 3]`` uint8, the right way up);
- ``expert`` -> ``{actions}``: the backend's scripted expert's actions for the current states;
- ``close`` -> ``{}``, then the process exits.

A request that fails answers ``{"error": "Type: message", "where": "file:line"}``; the parent
raises it. The process ends when its parent's pipe closes.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import traceback
from typing import Any

import numpy as np
import wire


def _load_backend(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("rlinf_sim_backend", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load the backend {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _stack(rows: list[Any]) -> Any:
    """Per-copy observations as one batch: arrays stacked, a dict per key (strings as a list)."""
    first = rows[0]
    if isinstance(first, dict):
        return {k: _stack([r[k] for r in rows]) for k in first}
    if isinstance(first, str):
        return list(rows)
    return np.stack([np.asarray(r) for r in rows])


def _where(err: BaseException) -> str:
    """``file:line`` of the innermost frame of ``err``'s traceback outside this file."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if not f.filename.endswith("server.py")]
    f = frames[-1] if frames else None
    return f"{f.filename}:{f.lineno}" if f else "?"


class Server:
    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.sim: Any = None
        self.once: list[bool] = []

    def make(self, spec: dict[str, Any]) -> dict[str, Any]:
        self.sim = self.backend.make(spec)
        self.once = [False] * self.sim.num_envs
        return {"spaces": self.sim.spaces()}

    def reset(self, seeds: list[Any], inits: list[Any]) -> dict[str, Any]:
        rows = []
        for i in range(self.sim.num_envs):
            obs, _ = self.sim.reset(i, seeds[i], inits[i])
            self.once[i] = False
            rows.append(obs)
        return {"obs": _stack(rows)}

    def step(self, actions: np.ndarray) -> dict[str, Any]:
        n = self.sim.num_envs
        rows, finals = [], []
        reward = np.zeros(n, np.float64)
        term = np.zeros(n, bool)
        trunc = np.zeros(n, bool)
        success = np.zeros(n, bool)
        done_idx, final_success, final_once = [], [], []
        for i in range(n):
            obs, r, te, tr, info = self.sim.step(i, actions[i])
            ok = bool(info.get("success", False))
            self.once[i] = self.once[i] or ok
            reward[i], term[i], trunc[i], success[i] = float(r), bool(te), bool(tr), ok
            if te or tr:
                done_idx.append(i)
                finals.append(obs)
                final_success.append(ok)
                final_once.append(self.once[i])
                obs, _ = self.sim.reset(i, None, None)
                self.once[i] = False
            rows.append(obs)
        return {
            "obs": _stack(rows),
            "reward": reward,
            "terminated": term,
            "truncated": trunc,
            "success": success,
            "done": done_idx,
            "final_obs": _stack(finals) if finals else None,
            "final_success": final_success,
            "final_success_once": final_once,
        }

    def render(self) -> dict[str, Any]:
        return {"frames": np.stack([self.sim.render(i) for i in range(self.sim.num_envs)])}

    def expert(self) -> dict[str, Any]:
        if not hasattr(self.sim, "expert"):
            raise ValueError("this simulator has no scripted expert")
        return {"actions": np.asarray(self.sim.expert(), np.float32)}

    def close(self) -> dict[str, Any]:
        if self.sim is not None:
            self.sim.close()
        return {}


def main() -> None:
    rfd, wfd = (int(x) for x in os.environ["RLINF_SIM_FDS"].split(","))
    server = Server(_load_backend(sys.argv[1]))
    while True:
        try:
            msg = wire.read_message(rfd, None, "a request")
        except wire.WireError:
            server.close()  # the parent is gone
            return
        cmd = msg.pop("cmd", None)
        try:
            reply = (
                getattr(server, cmd)(**msg)
                if cmd in ("make", "reset", "step", "render", "expert", "close")
                else None
            )
            if reply is None:
                reply = {"error": f"ValueError: unknown request {cmd!r}", "where": "server.py"}
        except Exception as err:
            reply = {"error": f"{type(err).__name__}: {err}".splitlines()[0][:400], "where": _where(err)}
        try:
            wire.write_message(wfd, reply)
        except OSError:
            return
        if cmd == "close":
            return


if __name__ == "__main__":
    main()
