"""What a run writes into its directory, and how: files, metrics, checkpoints, the summary.

A run directory holds:

- ``config.yaml``: the resolved configuration (written before training starts);
- ``metrics.csv``: a fixed header and one row per ``runner.log_interval`` env steps (embodied
  runs: :data:`~rlinf_algos.runtime.recorder.BASE_COLUMNS`, the algorithm's columns,
  ``success_rate``) or per iteration (language-model runs, which also write ``metrics.jsonl``);
- ``tensorboard/``: the same scalars as TensorBoard event files; ``wandb/`` with the ``wandb``
  logger;
- checkpoints: everything needed to continue (``--resume``), in the flow's layout:
  ``checkpoints/step_<n>.safetensors`` (embodied) or ``checkpoints/step_<n>/state.safetensors``
  (language models); both load through :func:`load_checkpoint`;
- the policy: ``policy.safetensors`` (weights and the spec to rebuild it) or ``policy/`` (a
  Hugging Face model folder);
- ``summary.json``: the run's headline figures.

Every file is written atomically (a temp file in the same folder, fsync, ``os.replace``): a
crash never leaves a truncated checkpoint, policy or summary behind. State files are
safetensors, never pickles (:mod:`rlinf_algos.run_files`: names, readers, earlier versions'
``.pt`` files).
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import shutil
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from rlinf_algos.run_files import (
    POLICY,
    UnsafeStateFile,
    check_finite,
    checkpoint_files,
    checkpoint_name,
    read_state,
    step_of,
    write_state,
)
from rlinf_algos.safe_state import save_state
from rlinf_core.errors import ConfigError, ConfigProblem, RlinfError
from rlinf_core.io import atomic_write_text

__all__ = [
    "RUN_FILES",
    "STATE_FILE",
    "MetricsLog",
    "MetricsSinks",
    "check_resume_config",
    "checkpoint_state_file",
    "default_run_dir",
    "env_record",
    "existing_run",
    "find_checkpoints",
    "latest_checkpoint",
    "load_checkpoint",
    "make_sinks",
    "move_aside",
    "prepare_run_dir",
    "remove_stale_temp_files",
    "tensorboard_tag",
    "write_checkpoint",
    "write_summary",
]

# -- files ---------------------------------------------------------------------------------------


def env_record(env_cfg: Any) -> dict[str, Any]:
    """What ``policy.safetensors`` records of the ``env`` section, so that ``rlinf eval`` builds the env
    the policy was trained in (its kwargs, time limit and observation mode)."""
    return {
        "env_id": env_cfg.id,
        "env_kwargs": dict(env_cfg.kwargs),
        "max_episode_steps": env_cfg.max_episode_steps,
        "obs_mode": env_cfg.obs_mode,
        "image_size": list(env_cfg.image_size),
        "env_wrappers": [w.model_dump() for w in env_cfg.wrappers],
        "env_family": getattr(env_cfg, "family", "gymnasium"),
        "env_options": dict(getattr(env_cfg, "options", None) or {}),
        "env_timeout_s": float(getattr(env_cfg, "timeout_s", 60.0)),
    }


def write_summary(run_dir: Path, summary: Mapping[str, Any]) -> None:
    """``summary.json`` (atomic)."""
    atomic_write_text(Path(run_dir) / "summary.json", json.dumps(dict(summary), indent=2) + "\n")


STATE_FILE = "state.safetensors"
"""The state file of a checkpoint folder (``checkpoints/step_<n>/``)."""


def _folder_step(path: Path) -> int | None:
    try:
        return int(path.name.removeprefix("step_"))
    except ValueError:
        return None


def find_checkpoints(run_dir: Path) -> list[Path]:
    """The checkpoints of ``run_dir``, newest (highest step) first, in either layout a run
    writes: files ``checkpoints/step_<n>.safetensors`` (or an earlier version's ``.pt``; of one
    step in both forms, the safetensors one) and folders ``checkpoints/step_<n>/`` holding
    :data:`STATE_FILE` (a folder whose state was never written is listed too: loading skips it)."""
    found = {step_of(p): p for p in checkpoint_files(run_dir)}
    for p in (Path(run_dir) / "checkpoints").glob("step_*"):
        n = _folder_step(p) if p.is_dir() else None
        if n is not None and n not in found:
            found[n] = p
    return [found[n] for n in sorted(found, reverse=True)]


def checkpoint_state_file(path: Path) -> Path:
    """The state file of the checkpoint ``path`` (a file, or a folder's :data:`STATE_FILE`)."""
    return path / STATE_FILE if path.is_dir() else path


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest checkpoint of ``run_dir`` (by step) that holds a state file (not checked
    further: :func:`load_checkpoint` skips a damaged one), or ``None``."""
    for path in find_checkpoints(run_dir):
        if checkpoint_state_file(path).is_file():
            return path
    return None


def write_checkpoint(
    run_dir: Path, step: int, state: dict[str, Any], *, layout: str = "file", keep: int | None = None
) -> Path:
    """Write ``state`` as the checkpoint of ``step`` atomically (a temp file beside it, fsync,
    rename) and return it: ``checkpoints/step_<n>.safetensors`` (``layout="file"``, ``n`` with
    ten digits) or ``checkpoints/step_<n>/state.safetensors`` (``"folder"``). ``keep``: drop all
    but the newest ``keep`` checkpoints (``None``: keep every one)."""
    folder = Path(run_dir) / "checkpoints"
    if layout == "folder":
        path = folder / f"step_{step}"
        check_finite(state, path / STATE_FILE)
        path.mkdir(parents=True, exist_ok=True)
        save_state(
            state, path / STATE_FILE, meta={"algorithm": str(state.get("algorithm", "")), "step": str(step)}
        )
    else:
        path = folder / checkpoint_name(step)
        write_state(state, path)
    if keep is not None:
        for old in find_checkpoints(run_dir)[keep:]:
            if old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
            else:
                old.unlink(missing_ok=True)
    return path


def load_checkpoint(run_dir: Path, algorithm: str) -> tuple[Path, dict[str, Any]]:
    """The newest checkpoint of ``run_dir`` that loads, and its contents (either layout). A
    damaged one (a crash of the disk or the machine, a file cut short by a copy, a folder whose
    state was never written) is skipped with a warning naming it, and the one before is tried;
    an error if none loads or the newest that loads belongs to another algorithm. Nothing is
    loaded with pickle: a legacy ``.pt`` that holds more than tensors and plain data ends the
    search with :class:`~rlinf_algos.run_files.UnsafeStateFile` (it is not damaged, and the ones
    before it are of the same run)."""
    found = find_checkpoints(run_dir)
    if not found:
        raise RlinfError(
            f"nothing to resume in {run_dir}: no checkpoints/step_<n>/ or checkpoints/step_<n>.safetensors there"
        )
    skipped = []
    for path in found:
        try:
            state = read_state(checkpoint_state_file(path))
            # "run": the driver's run counters; "loop": a language-model checkpoint of an earlier version
            if not isinstance(state, dict) or not ("run" in state or "loop" in state):
                raise ValueError("not an rlinf checkpoint")
        except UnsafeStateFile:
            raise
        except Exception as err:  # any damage: a truncated file, a zero-byte file, garbage
            why = (
                "no state file (a checkpoint cut short)"
                if isinstance(err, FileNotFoundError)
                else f"{type(err).__name__}: {str(err)[:120]}"
            )
            skipped.append(f"{path.name} ({why})")
            logging.getLogger("rlinf.train").warning("skipping the damaged checkpoint %s: %s", path, why)
            continue
        if state.get("algorithm") != algorithm:
            raise RlinfError(f"{path} is a {state.get('algorithm')!r} checkpoint, not {algorithm!r}")
        state["skipped_checkpoints"] = skipped
        return path, state
    raise RlinfError(
        f"no checkpoint of {run_dir} loads: {'; '.join(skipped)}; the run cannot be resumed "
        "(start a new one with another --run-dir)"
    )


RUN_FILES = ("config.yaml", "metrics.csv", "summary.json", POLICY, "policy.pt", "checkpoints")
"""What makes a directory a run's."""


def existing_run(run_dir: Path) -> list[str]:
    """The run files :data:`RUN_FILES` of ``run_dir`` when it holds something a run saved (a
    metrics row, a checkpoint, a policy, a summary); empty when there is no run there, or only
    one that failed before it saved anything: its ``config.yaml`` (written before training
    starts) alone does not make the directory a run, so the same ``--run-dir`` can be used
    again once the mistake is fixed, where ``--resume`` would have nothing to continue."""
    run_dir = Path(run_dir)
    found = [name for name in RUN_FILES if (run_dir / name).exists()]
    saved = [name for name in found if name != "config.yaml" and _holds_something(run_dir / name)]
    saved += [n for n in ("policy", "metrics.jsonl") if _holds_something(run_dir / n)]
    return found if saved else []


def _holds_something(path: Path) -> bool:
    """A file with content beyond a header line, or a folder with an entry."""
    try:
        if path.is_dir():
            return any(path.iterdir())
        if not path.is_file():
            return False
        if path.suffix in (".csv", ".jsonl"):
            with path.open("rb") as f:
                lines = sum(1 for line in f if line.strip())
            return lines > (1 if path.suffix == ".csv" else 0)
        return path.stat().st_size > 0
    except OSError:
        return True  # unreadable: treat as a run rather than reuse it


def move_aside(run_dir: Path) -> Path:
    """Rename ``run_dir`` to ``<run_dir>.replaced-<YYYYmmdd-HHMMSS>`` (``--overwrite``)."""
    base = Path(f"{run_dir}.replaced-{time.strftime('%Y%m%d-%H%M%S')}")
    target, i = base, 1
    while target.exists():
        i += 1
        target = Path(f"{base}-{i}")
    Path(run_dir).rename(target)
    return target


def prepare_run_dir(
    run_dir: str | Path, overwrite: bool = False, log: Callable[[str], None] | None = None
) -> Path:
    """Create ``run_dir`` for a new run (``rlinf sft``'s); one that holds a run (see
    :func:`existing_run`; ``policy/`` and ``adapter/`` folders too) is refused unless
    ``overwrite``, which moves it aside to ``RUN_DIR.replaced-<time>`` (never deletes it)."""
    run_dir = Path(run_dir)
    found = existing_run(run_dir) + [n for n in ("policy", "adapter") if (run_dir / n).exists()]
    if found:
        if not overwrite:
            raise RlinfError(
                f"{run_dir} holds a run ({', '.join(found)}); write elsewhere with another --run-dir, "
                "or replace it with --overwrite (the old run is moved aside, not deleted)"
            )
        moved = move_aside(run_dir)
        if log is not None:
            log(f"moved the run that was in {run_dir} to {moved} (--overwrite)")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise RlinfError(f"cannot create the run directory {run_dir}: {err.strerror or err}") from None
    return run_dir


def remove_stale_temp_files(run_dir: Path) -> list[Path]:
    """Delete the temp files an atomic write leaves when the process is killed mid-write
    (``.<name>.*.tmp`` in the run directory and its ``checkpoints``); returns them."""
    gone = []
    for folder in (Path(run_dir), Path(run_dir) / "checkpoints"):
        for p in folder.glob(".*.tmp"):
            try:
                p.unlink()
                gone.append(p)
            except OSError:
                pass
    return gone


def default_run_dir(config_path: str | Path | None, root: str | Path = "runs") -> Path:
    """``runs/<config stem>-<YYYYmmdd-HHMMSS>`` (a suffix is added if it exists)."""
    stem = Path(config_path).stem if config_path else "run"
    base = Path(root) / f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    path, i = base, 1
    while path.exists():
        i += 1
        path = Path(f"{base}-{i}")
    return path


def check_resume_config(path: Path, now: Mapping[str, Any]) -> None:
    """A resumed run must keep the env, the model and the algorithm of the run it continues
    (``runner`` settings such as ``total_steps`` may change): compare with its ``config.yaml``."""
    from rlinf_core.config import describe_value, load_yaml

    if not path.is_file():
        return
    then = load_yaml(path, what="config.yaml of the run")
    problems = []
    for section in ("env", "model"):
        a, b = then.get(section) or {}, now.get(section) or {}
        if section == "model" and isinstance(a, Mapping):  # a run written when every type listed every option
            from rlinf_algos.models import holds_a_default_option

            a = {k: v for k, v in a.items() if k in b or not holds_a_default_option(str(k), v)}
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                problems.append(
                    ConfigProblem(
                        f"{section}.{key}",
                        f"is {describe_value(b.get(key))}, but the run being resumed used "
                        f"{describe_value(a.get(key))}",
                    )
                )
    name_then = (then.get("algorithm") or {}).get("name")
    name_now = (now.get("algorithm") or {}).get("name")
    if name_then != name_now:
        problems.append(
            ConfigProblem("algorithm.name", f"is {name_now!r}, but the run being resumed used {name_then!r}")
        )
    if problems:
        raise ConfigError(problems)


# -- metrics ---------------------------------------------------------------------------------------


class MetricsLog:
    """``metrics.csv`` with a fixed header (empty cells where a row has no value, e.g. before SAC
    learns). With ``append`` a resumed run adds to the file it finds."""

    def __init__(self, path: Path, columns: Iterable[str], append: bool) -> None:
        self.path = path
        self.columns = list(columns)
        self._file: Any = None
        self.append = append and path.exists() and path.stat().st_size > 0

    def write(self, row: Mapping[str, Any]) -> None:
        if self._file is None:
            self._file = self.path.open("a" if self.append else "w", newline="", encoding="utf-8")
            if not self.append:
                csv.writer(self._file).writerow(self.columns)
        csv.writer(self._file).writerow([_fmt(row.get(c, "")) for c in self.columns])
        self._file.flush()

    def drop_rows_after(self, step: int) -> int:
        """Keep only the rows up to ``step`` (a resumed run starts from a checkpoint behind the
        last rows a killed run wrote: without this they would appear twice); returns how many
        were dropped. Atomic."""
        if self._file is not None or not self.path.is_file():
            return 0
        with self.path.open(newline="", encoding="utf-8", errors="replace") as f:
            rows = list(csv.reader(f))
        if not rows or "step" not in rows[0]:
            return 0
        col = rows[0].index("step")

        def keep(row: list[str]) -> bool:
            try:
                return float(row[col]) <= step
            except (IndexError, ValueError):
                return False

        kept = [rows[0]] + [r for r in rows[1:] if keep(r)]
        dropped = len(rows) - len(kept)
        if dropped:
            out = io.StringIO(newline="")
            csv.writer(out).writerows(kept)
            atomic_write_text(self.path, out.getvalue(), perms=self.path.stat().st_mode & 0o777)
        return dropped

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _fmt(v: Any) -> Any:
    return f"{v:.6g}" if isinstance(v, float) else v


def tensorboard_tag(key: str) -> str:
    """The TensorBoard tag of a metrics column (``charts/``, ``perf/`` or ``train/``)."""
    if key.startswith("episode_") or key in ("episodes", "success_rate"):
        return f"charts/{key}"
    if key in ("env_steps_per_s", "wall_s", "rollout_s", "update_s", "wait_s", "policy_lag"):
        return f"perf/{key}"
    return f"train/{key}"


def _scalars(row: Mapping[str, Any]) -> dict[str, float]:
    return {
        k: float(v)
        for k, v in row.items()
        if k != "step" and isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(float(v))
    }


class _TensorBoard:
    """Event files under ``run_dir/tensorboard`` (tensorboardX), opened on the first row and
    flushed at every row (rows are few; a run killed outright keeps what it wrote). A run
    resumed where event files are already (``--resume``) starts its file with a purge at its
    first row's step: TensorBoard hides what the stopped run wrote from there on, which the
    resumed run writes again from its checkpoint, so each step shows once."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.writer: Any = None
        self.resumed = any((run_dir / "tensorboard").glob("events.out.tfevents.*"))

    def add(self, row: Mapping[str, Any]) -> None:
        # tensorboardX's events writer, written in this thread (its SummaryWriter queues the
        # events to a thread of its own, whose flush() does not wait for)
        import time

        from tensorboardX.event_file_writer import EventsWriter
        from tensorboardX.proto.event_pb2 import Event, SessionLog
        from tensorboardX.summary import scalar

        step = int(row["step"])
        if self.writer is None:
            folder = self.run_dir / "tensorboard"
            folder.mkdir(parents=True, exist_ok=True)
            # a resumed run's file gets a name of its own (the stopped run's may have this second's)
            self.writer = EventsWriter(str(folder / "events"), f".resumed-{step}" if self.resumed else "")
            if self.resumed:
                start = SessionLog(status=SessionLog.START)
                self.writer.write_event(Event(wall_time=time.time(), step=step, session_log=start))
        for key, value in _scalars(row).items():
            summary = scalar(tensorboard_tag(key), value)
            self.writer.write_event(Event(wall_time=time.time(), step=step, summary=summary))
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


class _Wandb:
    """A Weights & Biases run in ``run_dir/wandb`` (``WANDB_MODE=offline`` needs no network;
    ``wandb sync`` uploads it later), opened on the first row, with the run's resolved config."""

    def __init__(self, run_dir: Path, config: Mapping[str, Any]) -> None:
        self.run_dir, self.config = run_dir, dict(config)
        self.run: Any = None

    def add(self, row: Mapping[str, Any]) -> None:
        if self.run is None:
            import wandb

            (self.run_dir / "wandb").mkdir(parents=True, exist_ok=True)
            # a resumed run (--resume RUN_DIR) logs to the same wandb run as the run it continues
            id_file = self.run_dir / "wandb" / "rlinf-run-id"
            run_id = id_file.read_text(encoding="utf-8").strip() if id_file.is_file() else ""
            self.run = wandb.init(
                dir=str(self.run_dir),
                name=self.run_dir.name,
                config=self.config,
                reinit="create_new",
                **({"id": run_id, "resume": "allow"} if run_id else {}),
            )
            if not run_id:
                atomic_write_text(id_file, str(self.run.id))
        self.run.log({tensorboard_tag(k): v for k, v in _scalars(row).items()}, step=int(row["step"]))

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None


class MetricsSinks:
    """The metrics backends of ``runner.loggers`` other than ``csv`` (which the runtime writes
    with its fixed columns): every row goes to each, at its ``step``."""

    def __init__(self, sinks: list[Any]) -> None:
        self.sinks = sinks

    def add(self, row: Mapping[str, Any]) -> None:
        if "step" not in row:
            return
        for sink in self.sinks:
            sink.add(row)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def make_sinks(names: Iterable[str], run_dir: Path, config: Mapping[str, Any]) -> MetricsSinks:
    """The :class:`MetricsSinks` for ``runner.loggers`` (``wandb`` must be importable: the
    run configuration check reports it otherwise)."""
    sinks: list[Any] = []
    for name in names:
        if name == "tensorboard":
            sinks.append(_TensorBoard(run_dir))
        elif name == "wandb":
            sinks.append(_Wandb(run_dir, config))
    return MetricsSinks(sinks)
