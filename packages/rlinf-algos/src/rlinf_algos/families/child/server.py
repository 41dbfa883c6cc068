"""The main program of a simulator process: ``python server.py BACKEND_FILE`` in the simulator's
own interpreter, talking to its env worker over two pipes (file descriptors given by the
``RLINF_SIM_FDS`` variable, ``"read,write"``) with :mod:`wire` messages. Standard library and
numpy only, besides the simulator the backend imports.

It holds ``num_envs`` copies of one simulator and gives them the semantics rlinf's vector envs
have (gymnasium's ``AutoresetMode.SAME_STEP``): a copy whose episode ends is reset in the same
step, the observation returned for it is its new episode's first, and the last one of the
finished episode travels beside it with the episode's success at its last step
(``success_at_end``) and at any step (``success_once``).

Requests (``MSG`` frames, a dict each; ``cmd`` names the request) and their replies:

- ``make {spec}`` -> ``{spaces}``: build the copies (``spec`` is the backend's: task, seeds...);
- ``share {layout}`` -> ``{}``: map the shared block (the third descriptor of ``RLINF_SIM_FDS``)
  with :class:`wire.Layout` ``layout``, after which ``STEP`` frames work;
- ``reset {seeds, inits}`` -> ``{obs}``: reset every copy (``seeds[i]``: ``None`` continues its
  generator; ``inits[i]``: the index of a fixed initial state or task variation, or ``None``);
- a ``STEP`` frame -> a ``STEPPED`` frame: step every copy with the block's ``actions`` and
  write the results into the block (the fields :mod:`wire` lists);
- ``render`` -> ``{frames}`` (``[N, H, W, 3]`` uint8, the right way up);
- ``expert`` -> ``{actions}``: the backend's scripted expert's actions for the current states;
- ``close`` -> ``{}``, then the process exits.

A request that fails (a step included) answers ``{"error": "Type: message", "where":
"file:line"}``; the parent raises it. The process ends when its parent's pipe closes.
"""

from __future__ import annotations

import importlib.util
import json
import mmap
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


def _keys(path: str) -> tuple[str, ...]:
    return tuple(path.split("/")) if path else ()


def _leaf(obs: Any, keys: tuple[str, ...]) -> Any:
    for key in keys:
        obs = obs[key]
    return obs


def _where(err: BaseException) -> str:
    """``file:line`` of the innermost frame of ``err``'s traceback outside this file."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if not f.filename.endswith("server.py")]
    f = frames[-1] if frames else None
    return f"{f.filename}:{f.lineno}" if f else "?"


class Server:
    def __init__(self, backend: Any, shared_fd: int = -1) -> None:
        self.backend = backend
        self.sim: Any = None
        self.once: list[bool] = []
        self.shared_fd = shared_fd
        self.block_map: mmap.mmap | None = None
        self.views: dict[str, np.ndarray] = {}
        self.slots: list[tuple[tuple[str, ...], np.ndarray, np.ndarray]] = []  # obs leaves: keys, views
        self.text_slots: list[tuple[str, tuple[str, ...]]] = []

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

    def share(self, layout: dict[str, Any]) -> dict[str, Any]:
        if self.shared_fd < 0:
            raise ValueError("no shared block was given to this process (RLINF_SIM_FDS)")
        lay = wire.Layout.from_plain(layout)
        if os.fstat(self.shared_fd).st_size < lay.size:
            raise ValueError(f"the shared block is smaller than its layout's {lay.size} bytes")
        if self.block_map is not None:
            self.views = {}
            self.block_map.close()
        self.block_map = mmap.mmap(self.shared_fd, lay.size)
        self.views = lay.views(self.block_map)
        paths = [k[len("obs/") :] for k in self.views if k.startswith("obs/")]
        self.slots = [(_keys(p), self.views["obs/" + p], self.views["final_obs/" + p]) for p in paths]
        self.text_slots = [(p, _keys(p)) for p in lay.text]
        return {}

    def step(self) -> bytes:
        """Step every copy with the block's actions and write the results there; the
        ``STEPPED`` body (the text leaves, or nothing)."""
        v = self.views
        if not v:
            raise ValueError("step before share: the shared block is not mapped")
        n, sim, once, slots, texts = self.sim.num_envs, self.sim, self.once, self.slots, self.text_slots
        actions, reward, success = v["actions"], v["reward"], v["success"]
        term, trunc, done = v["terminated"], v["truncated"], v["done"]
        final_success, final_once = v["final_success"], v["final_success_once"]
        done.fill(False)
        obs_text: dict[str, list[Any]] = {p: [] for p, _ in texts} if texts else {}
        final_text: dict[str, list[Any]] = {p: [None] * n for p, _ in texts} if texts else {}
        for i in range(n):
            obs, r, te, tr, info = sim.step(i, actions[i].copy())  # not a view the next step changes
            ok = bool(info.get("success", False))
            once[i] = once[i] or ok
            reward[i], term[i], trunc[i], success[i] = r, te, tr, ok
            if te or tr:
                done[i], final_success[i], final_once[i] = True, ok, once[i]
                for keys, _, final in slots:
                    final[i] = _leaf(obs, keys)
                for p, keys in texts:
                    final_text[p][i] = str(_leaf(obs, keys))
                obs, _ = sim.reset(i, None, None)
                once[i] = False
            for keys, view, _ in slots:
                view[i] = _leaf(obs, keys)
            for p, keys in texts:
                obs_text[p].append(str(_leaf(obs, keys)))
        if not texts:
            return b""
        return json.dumps({"obs": obs_text, "final_obs": final_text}, separators=(",", ":")).encode()

    def render(self) -> dict[str, Any]:
        return {"frames": np.stack([self.sim.render(i) for i in range(self.sim.num_envs)])}

    def expert(self) -> dict[str, Any]:
        if not hasattr(self.sim, "expert"):
            raise ValueError("this simulator has no scripted expert")
        return {"actions": np.asarray(self.sim.expert(), np.float32)}

    def close(self) -> dict[str, Any]:
        if self.sim is not None:
            self.sim.close()
            self.sim = None
        return {}


def _error(err: BaseException) -> dict[str, Any]:
    return {"error": f"{type(err).__name__}: {err}".splitlines()[0][:400], "where": _where(err)}


def main() -> None:
    fds = [int(x) for x in os.environ["RLINF_SIM_FDS"].split(",")]
    rfd, wfd = fds[0], fds[1]
    server = Server(_load_backend(sys.argv[1]), fds[2] if len(fds) > 2 else -1)
    requests = ("make", "share", "reset", "render", "expert", "close")
    while True:
        try:
            kind, size = wire.read_frame(rfd, None, "a request")
            msg = wire.read_value(rfd, size, None, "a request") if kind == wire.MSG else None
        except wire.WireError:
            server.close()  # the parent is gone (or talks nonsense)
            return
        if kind == wire.STEP:
            try:
                body = server.step()
            except Exception as err:
                reply: Any = _error(err)
            else:
                try:
                    wire.write_frame(wfd, wire.STEPPED, body)
                except OSError:
                    return
                continue
        else:
            cmd = msg.pop("cmd", None) if isinstance(msg, dict) else None
            try:
                reply = getattr(server, cmd)(**msg) if cmd in requests else None
                if reply is None:
                    reply = {"error": f"ValueError: unknown request {cmd!r}", "where": "server.py"}
            except Exception as err:
                reply = _error(err)
        try:
            wire.write_message(wfd, reply)
        except OSError:
            return
        if kind == wire.MSG and cmd == "close":
            return


if __name__ == "__main__":
    main()
