"""The state files of a run directory, their names, and the only way rlinf reads them: no pickle.

A run directory is shared (a colleague's checkpoint, a policy from a paper's release, a run copied
from a cluster), so nothing in it may run code when rlinf opens it. Every state file a run writes
is a safetensors file made by :func:`rlinf_algos.safe_state.save_state`:

- ``policy.safetensors``: the final policy (``spec``, ``state_dict``, ``algorithm`` and the env
  record ``rlinf eval`` rebuilds the env from);
- ``checkpoints/step_<n>.safetensors``: everything needed to continue (``--resume``, and the
  learner restarting itself), ``<n>`` the env steps, ten digits;
- ``warm_start.safetensors``: the vla perception warm start (the weights RL started from; ``rlinf
  eval RUN --warm-start`` evaluates them).

Runs written by earlier versions hold the same trees as ``torch.save`` pickles (``policy.pt``,
``checkpoints/step_<n>.pt``, ``warm_start.pt``). They are read with ``torch.load(weights_only=True)``,
which builds only tensors, containers and (allowlisted here) numpy arrays; a file that needs
more is refused with :class:`UnsafeStateFile`, which says how to convert a run the user trusts:
``rlinf convert RUN --trust`` (:func:`convert_run`). Where both forms of a file exist, the
safetensors one is read.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlinf_algos.safe_state import StateFileError, load_state, save_state
from rlinf_core.errors import RlinfError

__all__ = [
    "LEGACY_SUFFIX",
    "POLICY",
    "SUFFIX",
    "WARM_START",
    "NonFiniteState",
    "UnsafeStateFile",
    "check_finite",
    "checkpoint_files",
    "checkpoint_name",
    "convert_run",
    "legacy_files",
    "nonfinite_tensors",
    "policy_file",
    "read_state",
    "step_of",
    "warm_start_file",
    "write_state",
]

SUFFIX = ".safetensors"
"""The suffix of every state file a run writes."""
LEGACY_SUFFIX = ".pt"
"""The suffix of the pickles earlier versions wrote."""
POLICY = "policy" + SUFFIX
"""The final policy, in the run directory."""
WARM_START = "warm_start" + SUFFIX
"""The vla perception warm start, in the run directory."""


class UnsafeStateFile(RlinfError):
    """A legacy pickle that ``torch.load(weights_only=True)`` refuses (it names more than tensors
    and plain data): rlinf does not load it, and says how to convert a run the user trusts."""

    exit_code = 2


def checkpoint_name(step: int) -> str:
    """``step_<n>.safetensors``, ``n`` with ten digits (they sort by name as by step)."""
    return f"step_{step:010d}{SUFFIX}"


def step_of(path: Path) -> int | None:
    """The step of a checkpoint file name (``step_<n>.safetensors`` or ``step_<n>.pt``), or ``None``."""
    if path.suffix not in (SUFFIX, LEGACY_SUFFIX) or not path.name.startswith("step_"):
        return None
    try:
        return int(path.stem.removeprefix("step_"))
    except ValueError:
        return None


def checkpoint_files(run_dir: Path) -> list[Path]:
    """The checkpoints of ``run_dir``, newest (highest step) first; of one step in both forms,
    the safetensors one."""
    found: dict[int, Path] = {}
    folder = Path(run_dir) / "checkpoints"
    for p in folder.glob("step_*"):
        n = step_of(p)
        if n is not None and (n not in found or p.suffix == SUFFIX):
            found[n] = p
    return [found[n] for n in sorted(found, reverse=True)]


def _preferred(run_dir: Path, name: str) -> Path:
    new = Path(run_dir) / name
    old = new.with_suffix(LEGACY_SUFFIX)
    return old if not new.exists() and old.exists() else new


def policy_file(run_dir: Path) -> Path:
    """The policy file of ``run_dir``: ``policy.safetensors``, or an earlier version's
    ``policy.pt`` when only that exists (the safetensors name when neither does)."""
    return _preferred(run_dir, POLICY)


def warm_start_file(run_dir: Path) -> Path:
    """The warm start file of ``run_dir`` (``warm_start.safetensors``, or a legacy ``.pt``)."""
    return _preferred(run_dir, WARM_START)


class NonFiniteState(RlinfError):
    """Weights (or other float tensors) to be written hold NaN or infinity: nothing is written."""

    exit_code = 2


def nonfinite_tensors(tree: Any, where: str = "") -> Iterator[str]:
    """The keys (``a.b[0]``) of the float tensors and arrays of ``tree`` (dicts, lists, tuples
    of them) that hold a NaN or an infinity."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from nonfinite_tensors(v, f"{where}.{k}" if where else str(k))
    elif isinstance(tree, list | tuple):
        for i, v in enumerate(tree):
            yield from nonfinite_tensors(v, f"{where}[{i}]")
    elif hasattr(tree, "is_floating_point") and hasattr(tree, "isfinite"):  # a torch tensor
        if getattr(tree.device, "type", "cpu") == "meta":  # no values (a test's stand-in for a GPU)
            return
        if tree.is_floating_point() and tree.numel() and not bool(tree.isfinite().all()):
            yield where
    elif hasattr(tree, "dtype") and getattr(tree.dtype, "kind", "") == "f":  # a numpy array
        import numpy as np

        if not np.isfinite(tree).all():
            yield where


def check_finite(tree: Any, path: Path) -> None:
    """Raise :class:`NonFiniteState` when ``tree`` (to be written to ``path``) holds a
    non-finite float tensor: a learner never saves non-finite weights."""
    bad = list(nonfinite_tensors(tree))
    if bad:
        raise NonFiniteState(
            f"not writing {Path(path).name}: {len(bad)} tensor(s) hold NaN or inf (the first: {bad[0]!r}); "
            "training diverged or was given non-finite values (env.on_nonfinite: ignore lets them through); "
            "the files written before are kept"
        )


def write_state(tree: dict[str, Any], path: Path) -> Path:
    """``tree`` to ``path`` as an rlinf state file, atomically (temp file, fsync, rename); a tree
    with a non-finite float tensor is refused (:func:`check_finite`)."""
    check_finite(tree, path)
    return save_state(tree, path)


def read_state(path: Path) -> Any:
    """The tree of the state file ``path``, tensors on the CPU, built without running code.

    Raises:
        FileNotFoundError: no file at ``path``.
        UnsafeStateFile: a legacy pickle that names more than tensors and plain data.
        StateFileError: a damaged file (cut short, garbage, not an rlinf state file).
    """
    path = Path(path)
    if path.suffix == LEGACY_SUFFIX:
        return _load_legacy(path)
    return load_state(path)


def _numpy_globals() -> list[Any]:
    """What a pickled numpy array or scalar names: its rebuild function, class and dtypes."""
    import numpy as np

    try:
        from numpy._core import multiarray
    except ImportError:  # numpy 1.x
        from numpy.core import multiarray  # type: ignore[no-redef]
    kinds = (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
    kinds += (np.float16, np.float32, np.float64)
    return [
        multiarray._reconstruct,
        multiarray.scalar,
        np.ndarray,
        np.dtype,
        *{type(np.dtype(k)) for k in kinds},
    ]


def _convert_hint(path: Path) -> str:
    run = path.parent.parent if path.parent.name == "checkpoints" else path.parent
    return f"if you trust where this run came from, convert it with `rlinf convert {run} --trust`"


def _load_legacy(path: Path) -> Any:
    import torch

    if not path.is_file():
        raise FileNotFoundError(str(path))
    try:
        with torch.serialization.safe_globals(_numpy_globals()):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        if "weights only" not in str(err).lower() and "weights_only" not in str(err).lower():
            raise StateFileError(f"{path} is damaged ({_first_line(err)})") from None
        names = _unsafe_names(path)
        what = f"it names {', '.join(names[:3])}" if names else "it holds more than tensors"
        raise UnsafeStateFile(
            f"{path} is a pickle from an earlier rlinf version that rlinf will not load: {what}, and "
            f"loading it could run code; {_convert_hint(path)}"
        ) from None
    except Exception as err:  # a truncated zip, a zero-byte file, garbage
        raise StateFileError(f"{path} is damaged ({_first_line(err)})") from None


def _unsafe_names(path: Path) -> list[str]:
    import torch

    try:
        allowed = {f"{g.__module__}.{g.__qualname__}" for g in _numpy_globals()}
        return [n for n in torch.serialization.get_unsafe_globals_in_checkpoint(path) if n not in allowed]
    except Exception:  # not a zip checkpoint: the unpickler's refusal is all there is
        return []


def _first_line(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}".strip().splitlines()[0]
    return text if len(text) <= 160 else text[:157] + "..."


def legacy_files(run_dir: Path) -> Iterator[Path]:
    """The legacy pickles of ``run_dir`` that have no safetensors twin: ``policy.pt``,
    ``warm_start.pt`` and ``checkpoints/step_<n>.pt``."""
    run_dir = Path(run_dir)
    candidates = [run_dir / "policy.pt", run_dir / "warm_start.pt"]
    candidates += sorted((run_dir / "checkpoints").glob(f"step_*{LEGACY_SUFFIX}"))
    for p in candidates:
        named = p.name in ("policy.pt", "warm_start.pt") or step_of(p) is not None
        if named and p.is_file() and not p.with_suffix(SUFFIX).exists():
            yield p


def convert_run(run_dir: Path, *, trust: bool) -> list[tuple[Path, Path]]:
    """Rewrite the legacy pickles of ``run_dir`` as safetensors state files, each written
    atomically beside its pickle (which is left as it was); returns ``(pickle, new file)`` pairs.
    Deques and sets become lists; anything else the state format cannot hold is an error naming
    the file and where in it.

    ``trust`` must be true: a pickle is loaded with ``torch.load(weights_only=False)``, which runs
    whatever code the file names. Only for a run whose origin the user trusts.

    Raises:
        RlinfError: ``trust`` not given, no legacy file to convert, or a file that cannot be
            loaded or stored (naming it).
    """
    import torch

    if not trust:
        raise _NoTrust(run_dir)
    todo = list(legacy_files(run_dir))
    done = []
    for old in todo:
        try:
            tree = torch.load(old, map_location="cpu", weights_only=False)
        except Exception as err:
            raise RlinfError(
                f"{old} cannot be loaded ({_first_line(err)}); nothing more was converted"
            ) from None
        if not isinstance(tree, dict):
            raise RlinfError(
                f"{old} holds a {type(tree).__name__}, not an rlinf state; nothing more was converted"
            )
        new = old.with_suffix(SUFFIX)
        try:
            write_state(_plain(tree), new)
        except TypeError as err:
            raise RlinfError(f"{old} cannot be stored without pickle: {err}") from None
        done.append((old, new))
    return done


def _plain(obj: Any) -> Any:
    """Containers the state format has no word for as the ones it has: a deque or a set as a
    list, a mapping (``OrderedDict``) as a dict."""
    from collections import deque
    from collections.abc import Mapping

    if isinstance(obj, Mapping):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (deque, set, frozenset)):
        return [_plain(v) for v in obj]
    if isinstance(obj, list):
        return [_plain(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_plain(v) for v in obj)
    return obj


class _NoTrust(RlinfError):
    exit_code = 2

    def __init__(self, run_dir: Path) -> None:
        super().__init__(
            f"rlinf convert loads the pickles of {run_dir} with torch.load(weights_only=False), which runs any "
            "code they name: add --trust only if you trust where this run came from"
        )
