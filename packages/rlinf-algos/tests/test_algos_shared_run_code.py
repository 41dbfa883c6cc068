"""A shared run directory runs none of its author's code unasked (issue 53, item 5).

Each crafted run names code that leaves a marker file when it runs: an env wrapper in
``policy.safetensors``' metadata (``pydoc:pipepager`` runs its ``cmd`` in a shell), an
``env.id`` of ``antigravity:X-v0`` (its import opens a web browser: ``BROWSER`` is the marker
command), ``model.trust_remote_code: true`` with code in ``policy/``, a tool file and a reward
file named in ``config.yaml``, and the run's own ``config.yaml`` given to ``--resume``. Without
``--trust`` each is refused in one line, exit 2, naming the reference, and no marker appears;
with ``--trust`` the marker does appear (the test can see the code run)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]


def _appears(marker: Path, within_s: float = 10.0) -> bool:
    """Whether ``marker`` exists within ``within_s`` (a shell command may still be starting)."""
    import time

    deadline = time.monotonic() + within_s
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return marker.exists()


def _refused(code: int, out: str, *names: str) -> None:
    assert code == 2, out
    assert "Traceback" not in out
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1, out
    assert "--trust" in lines[0]
    for name in names:
        assert name in lines[0], (name, out)


SPEC = {
    "type": "mlp",
    "cls": "ActorCritic",
    "action_space": {"kind": "discrete", "n": 2, "start": 0},
    "obs_dim": 4,
    "obs_space": {"kind": "box", "shape": [4], "dtype": "float32"},
    "act_dim": 1,
    "hidden": [8],
    "activation": "tanh",
    "log_std_init": 0.0,
    "normalize_obs": True,
    "ortho_init": True,
}


@pytest.fixture(scope="module")
def embodied_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CartPole PPO run directory as ``rlinf train`` writes it (its config.yaml and a policy
    of the spec such a run saves; untrained weights: the tests never look at its actions)."""
    from rlinf_algos.models import build_policy
    from rlinf_algos.run_files import write_state

    run_dir = tmp_path_factory.mktemp("shared") / "run"
    run_dir.mkdir()
    cfg = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    cfg["env"] = {"id": "CartPole-v1", "num_envs": 2}
    cfg["runner"] = {"scheduler": "local", "total_steps": 64}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg))
    record = {
        "env_id": "CartPole-v1",
        "env_kwargs": {},
        "max_episode_steps": None,
        "obs_mode": "state",
        "image_size": [64, 64],
        "env_wrappers": [],
        "algorithm": "ppo",
        "spec": SPEC,
        "state_dict": build_policy(dict(SPEC)).state_dict(),
    }
    write_state(record, run_dir / "policy.safetensors")
    return run_dir


def _crafted(run: Path, tmp_path: Path, **record: Any) -> Path:
    """A copy of ``run`` whose policy metadata holds ``record``'s entries."""
    from rlinf_algos.run_files import read_state, write_state

    out = tmp_path / "crafted"
    shutil.copytree(run, out)
    state = read_state(out / "policy.safetensors")
    state.update(record)
    write_state(state, out / "policy.safetensors")
    return out


def test_a_wrapper_in_the_policy_metadata_is_not_run(
    embodied_run: Path, tmp_path: Path, rlinf_main: Any
) -> None:
    marker = tmp_path / "MARKER"
    evil = {"path": "pydoc:pipepager", "kwargs": {"cmd": f"touch {marker}"}}
    run = _crafted(embodied_run, tmp_path, env_wrappers=[evil])
    code, out = rlinf_main("eval", str(run), "-n", "1")
    _refused(code, out, "env_wrappers[0]", "pydoc:pipepager", "policy.safetensors")
    assert not marker.exists()

    # the Python API too: building the env is refused
    from rlinf_algos import load_policy
    from rlinf_algos.code_refs import UntrustedCode

    with pytest.raises(UntrustedCode, match="pydoc:pipepager"):
        load_policy(run).action_space  # noqa: B018
    assert not marker.exists()

    # with --trust it runs (pipepager runs its command, then fails on the env it was given)
    rlinf_main("eval", str(run), "-n", "1", "--trust")
    assert _appears(marker)


def test_an_antigravity_env_id_is_not_imported(
    embodied_run: Path, tmp_path: Path, rlinf_main: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "MARKER"
    browser = tmp_path / "browser.sh"  # what antigravity's import would open the web page with
    browser.write_text(f"#!/bin/sh\ntouch {marker}\n")
    browser.chmod(0o755)
    monkeypatch.setenv("BROWSER", str(browser))
    run = _crafted(embodied_run, tmp_path, env_id="antigravity:X-v0")
    code, out = rlinf_main("eval", str(run), "-n", "1")
    _refused(code, out, "env_id", "antigravity:X-v0")
    assert "antigravity" not in sys.modules and not marker.exists()


def test_resume_with_the_runs_own_config_runs_none_of_its_code(
    embodied_run: Path, tmp_path: Path, rlinf_main: Any
) -> None:
    marker = tmp_path / "MARKER"
    run = tmp_path / "run"
    shutil.copytree(embodied_run, run)
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["env"]["wrappers"] = [{"path": "pydoc:pipepager", "kwargs": {"cmd": f"touch {marker}"}}]
    cfg["env"]["id"] = "rlinf_no_such_user_module:Env-v0"
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    code, out = rlinf_main("train", str(run / "config.yaml"), "--resume", str(run))
    _refused(code, out, "env.wrappers[0]", "env.id", "rlinf_no_such_user_module:Env-v0", "overrides")
    assert not marker.exists()
    # what the command line gives anew is the user's own: only the rest is named
    code, out = rlinf_main(
        "train", str(run / "config.yaml"), "--resume", str(run), "env.id=CartPole-v1", "--dry-run"
    )
    _refused(code, out, "env.wrappers[0]")
    assert "env.id" not in out
    assert not marker.exists()


def test_gymnasium_and_plugin_references_pass_the_gate() -> None:
    from rlinf_algos.code_refs import config_references, untrusted_references

    cfg = {
        "env": {
            "id": "gymnasium.envs.classic_control:CartPole-v1",
            "wrappers": [
                "gymnasium.wrappers:ClipReward",
                {"path": "gymnasium.wrappers.FlattenObservation"},
                "gymnasium:make",  # a function of gymnasium's: not a wrapper class
                "rlinf_algos.envs:make_vector_env",
                "json:loads",
            ],
        },
        "tools": [{"name": "search"}, {"name": "f", "path": "tools.py"}],
        "reward": {"path": "score.py"},
        "model": {"trust_remote_code": True},
    }
    refs = config_references(cfg)
    bad = {r.key for r in untrusted_references(refs)}
    assert bad == {
        "env.wrappers[2]",
        "env.wrappers[3]",
        "env.wrappers[4]",
        "tools[1].path",
        "reward.path",
        "model.trust_remote_code",
    }
    assert not untrusted_references(refs, ["env.wrappers=[]", "~tools", "+reward.path=x", "model=y"])


# -- language-model runs ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from rlinf_algos.lm import hf
    from rlinf_algos.lm.config import ModelInitConfig

    root = tmp_path_factory.mktemp("lm-model")
    init = ModelInitConfig(tokenizer="bpe", vocab_size=300, hidden_size=16, num_layers=1, num_heads=2)
    return hf.new_model_folder(root / "model", init, corpus=["What is 1 + 2? 3"] * 20)


def _lm_run(tmp_path: Path, model: Path, marker: Path, route: str) -> Path:
    """A language-model run directory (``policy/`` a real model folder) whose ``config.yaml``
    names code by ``route``: ``remote`` (``trust_remote_code`` with a config class in
    ``policy/``), ``tool`` (a tool file) or ``reward`` (a reward file)."""
    run = tmp_path / "run"
    shutil.copytree(model, run / "policy")
    touch = f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n"
    rows = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(4)]
    (tmp_path / "val.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "score.py").write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n"
    )
    cfg: dict[str, Any] = {
        "algorithm": {"name": "grpo_lm", "group_size": 2, "prompts_per_iter": 2, "iterations": 1},
        "model": {"path": str(model)},
        "data": {"train_files": str(tmp_path / "val.jsonl"), "val_files": str(tmp_path / "val.jsonl")},
        "runner": {"scheduler": "local"},
    }
    if route == "remote":
        conf = json.loads((run / "policy" / "config.json").read_text())
        conf["auto_map"] = {"AutoConfig": "evil_config.EvilConfig"}
        (run / "policy" / "config.json").write_text(json.dumps(conf))
        (run / "policy" / "evil_config.py").write_text(
            touch
            + "from transformers import LlamaConfig\n\nclass EvilConfig(LlamaConfig):\n"
            + f"    model_type = {conf.get('model_type', 'llama')!r}\n"
        )
        cfg["model"]["trust_remote_code"] = True
    if route == "tool":
        (tmp_path / "evil_tools.py").write_text(
            touch + "\ndef lookup(q: str) -> str:\n    '''Look q up.'''\n    return q\n"
        )
        cfg["tools"] = [{"name": "lookup", "path": str(tmp_path / "evil_tools.py")}]
    if route == "reward":
        (tmp_path / "score.py").write_text(touch + (tmp_path / "score.py").read_text())
    cfg["reward"] = {"path": str(tmp_path / "score.py")}
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    return run


@pytest.mark.parametrize(
    ("route", "named"),
    [
        ("remote", "model.trust_remote_code"),
        ("tool", "tools[0].path"),
        ("reward", "reward.path"),
    ],
)
def test_a_language_model_run_names_its_code_and_runs_none(
    model_folder: Path, tmp_path: Path, rlinf_main: Any, route: str, named: str
) -> None:
    marker = tmp_path / "MARKER"
    run = _lm_run(tmp_path, model_folder, marker, route)
    code, out = rlinf_main("eval", str(run))
    assert not marker.exists(), out
    _refused(code, out, named, "config.yaml")
