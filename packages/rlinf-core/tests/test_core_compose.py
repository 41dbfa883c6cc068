"""Config composition (rlinf_core.compose): defaults lists with packages as RLinf's example
configs write them, interpolation, oc.env, command-line overrides, sweeps and error messages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rlinf_core.compose import compose, load_config, sweep
from rlinf_core.errors import ConfigError


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / next(iter(files))


# The shape of RLinf's examples/embodiment/config/frankasim_ppo_mlp.yaml, written here.
RLINF_STYLE = {
    "frankasim_ppo_mlp.yaml": """\
defaults:
  - env/frankasim_pickcube_state@env.train
  - env/frankasim_pickcube_state@env.eval
  - model/mlp_policy@actor.model
  - training_backend/fsdp@actor.fsdp_config
  - override hydra/job_logging: stdout
  - _self_

hydra:
  run:
    dir: ../results/${runner.experiment_name}
  searchpath:
    - file://${oc.env:EMBODIED_PATH}/config/

algorithm:
  group_size: 8
env:
  train:
    total_num_envs: ${algorithm.group_size}
  eval:
    seed: 7
runner:
  experiment_name: frankasim_ppo
  logger:
    log_path: ${oc.env:RLINF_COMPOSE_TEST_LOGS,../results}/${runner.experiment_name}
actor:
  model:
    hidden_dim: 64
  micro_batch_size: ${env.train.total_num_envs}
""",
    "env/frankasim_pickcube_state.yaml": """\
defaults:
  - frankasim_base
simulator_type: frankasim
total_num_envs: 4
seed: 0
""",
    "env/frankasim_base.yaml": "max_episode_steps: 100\nobs_mode: state\n",
    "model/mlp_policy.yaml": "model_type: mlp\nhidden_dim: 256\nadd_value_head: true\n",
    "model/cnn_policy.yaml": "model_type: cnn\nchannels: [32, 64]\n",
    "training_backend/fsdp.yaml": "strategy: fsdp\nsharding: full_shard\n",
    "training_backend/ddp.yaml": "strategy: ddp\n",
}


def test_rlinf_style_defaults_packages_and_interpolation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RLINF_COMPOSE_TEST_LOGS", raising=False)
    monkeypatch.delenv("EMBODIED_PATH", raising=False)  # only the dropped hydra section reads it
    cfg = load_config(write(tmp_path, RLINF_STYLE))
    assert cfg["env"]["train"] == {
        "max_episode_steps": 100,
        "obs_mode": "state",
        "simulator_type": "frankasim",
        "total_num_envs": 8,  # ${algorithm.group_size}: the primary file's _self_ comes last
        "seed": 0,
    }
    assert cfg["env"]["eval"]["seed"] == 7 and cfg["env"]["eval"]["total_num_envs"] == 4
    assert cfg["actor"]["model"] == {"model_type": "mlp", "hidden_dim": 64, "add_value_head": True}
    assert cfg["actor"]["fsdp_config"] == {"strategy": "fsdp", "sharding": "full_shard"}
    assert cfg["actor"]["micro_batch_size"] == 8  # an interpolation of an interpolation, typed
    assert cfg["runner"]["logger"]["log_path"] == "../results/frankasim_ppo"  # oc.env's default
    assert "hydra" not in cfg and "defaults" not in cfg

    monkeypatch.setenv("RLINF_COMPOSE_TEST_LOGS", "/data/logs")
    assert load_config(tmp_path / "frankasim_ppo_mlp.yaml")["runner"]["logger"]["log_path"] == (
        "/data/logs/frankasim_ppo"
    )


def test_self_position_optional_entries_and_mapping_forms(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "first.yaml": "defaults: [_self_, db/mysql]\ndb: {port: 1}\n",
            "last.yaml": "defaults: [db/mysql]\ndb: {port: 1}\n",
            "forms.yaml": """\
defaults:
  - db: mysql
  - optional extra: missing
  - cache: null
  - server/apache@web
  - _self_
""",
            "db/mysql.yaml": "port: 3306\nuser: root\n",
            "server/apache.yaml": "defaults:\n  - db: pg\n  - /db: mysql\nname: apache\n",
            "server/db/pg.yaml": "port: 5432\n",
            "glob.yaml": "defaults: [g/top]\n",
            "g/top.yaml": "# @package _global_\ntop_level: true\n",
        },
    )
    assert compose(tmp_path / "first.yaml")["db"]["port"] == 3306  # _self_ first: defaults win
    assert compose(tmp_path / "last.yaml")["db"]["port"] == 1  # no _self_: it goes last
    forms = compose(tmp_path / "forms.yaml")
    # nested defaults: `db: pg` is relative to server/ and its package to web; `/db` names the
    # root's db/ folder, its package still relative to web (Hydra's rule: rlinf put it at the top)
    assert forms == {
        "db": {"port": 3306, "user": "root"},
        "web": {"db": {"port": 3306, "user": "root"}, "name": "apache"},
    }
    assert compose(tmp_path / "glob.yaml") == {"top_level": True}  # a `# @package _global_` header


def test_group_choices_on_the_command_line(tmp_path: Path) -> None:
    path = write(tmp_path, RLINF_STYLE)
    cfg = load_config(path, ["model@actor.model=cnn_policy", "training_backend=ddp"])
    assert cfg["actor"]["model"] == {"model_type": "cnn", "channels": [32, 64], "hidden_dim": 64}
    assert cfg["actor"]["fsdp_config"] == {"strategy": "ddp"}
    write(tmp_path, {"extra/more.yaml": "k: 1\n"})
    assert load_config(path, ["+extra=more"])["extra"] == {"k": 1}
    assert "fsdp_config" not in load_config(path, ["~training_backend"])["actor"]
    with pytest.raises(
        ConfigError, match=r"group 'env' is listed at several packages; name one: env@env\.eval"
    ):
        load_config(path, ["env=frankasim_pickcube_state"])
    with pytest.raises(ConfigError) as err:
        load_config(path, ["model=transformer"])
    assert str(err.value) == (
        f"{path}: override 'model=transformer' (for defaults entry 'model/mlp_policy@actor.model'): "
        f"no file model/transformer.yaml in {tmp_path}; model/ has: cnn_policy, mlp_policy"
    )


def test_value_overrides_add_delete_force(tmp_path: Path) -> None:
    path = write(tmp_path, RLINF_STYLE)
    cfg = load_config(
        path,
        [
            "runner.experiment_name=exp2",  # interpolations see the overridden value
            "+runner.seed=2",
            "++algorithm.group_size=16",
            "++algorithm.new_key=[1, 2]",
            "~env.eval",
            "~actor.model.add_value_head=true",
            "runner.brand.new=x",  # as before: a plain key=value may create a key
        ],
    )
    assert cfg["runner"]["seed"] == 2 and cfg["runner"]["brand"] == {"new": "x"}
    assert cfg["runner"]["logger"]["log_path"].endswith("/exp2")
    assert cfg["env"]["train"]["total_num_envs"] == 16 and cfg["algorithm"]["new_key"] == [1, 2]
    assert "eval" not in cfg["env"] and "add_value_head" not in cfg["actor"]["model"]
    for bad, message in [
        (
            "+runner.experiment_name=x",
            "override '+runner.experiment_name=x': runner.experiment_name is already set (to "
            "'frankasim_ppo'); change it with runner.experiment_name=x, or add-or-replace with "
            "++runner.experiment_name=x",
        ),
        ("~runner.nope", "override '~runner.nope': runner.nope is not in the config, nothing to delete"),
        (
            "~algorithm.group_size=3",
            "override '~algorithm.group_size=3': algorithm.group_size is 8, not 3; give "
            "~algorithm.group_size to delete it whatever it holds",
        ),
        (
            "runner",
            "override 'runner' is not of the form key.path=value (set), +key.path=value (add), "
            "++key.path=value (add or replace) or ~key.path (delete)",
        ),
    ]:
        with pytest.raises(ConfigError) as err:
            load_config(path, [bad])
        assert str(err.value) == message


def test_errors_name_the_file_and_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RLINF_COMPOSE_UNSET", raising=False)
    write(
        tmp_path,
        {
            "missing.yaml": "defaults:\n  - model/mlp_policy@actor.model\n  - env/nope@env.train\n",
            "model/mlp_policy.yaml": "hidden: ${algorithm.hidden}\n",
            "env/real.yaml": "id: x\n",
            "uses_model.yaml": "defaults: [model/mlp_policy]\nalgorithm: {width: 3}\n",
            "env_var.yaml": "runner:\n  root: ${oc.env:RLINF_COMPOSE_UNSET}\n",
            "mandatory.yaml": "runner:\n  seed: ???\n",
            "loop.yaml": "defaults: [sub/a]\n",
            "sub/a.yaml": "defaults: [b]\n",
            "sub/b.yaml": "defaults: [a]\n",
            "bad_list.yaml": "defaults: env/real\n",
            "bad_entry.yaml": "defaults:\n  - {a: 1, b: 2}\n",
        },
    )

    def error(name: str, overrides: tuple[str, ...] = ()) -> str:
        with pytest.raises(ConfigError) as err:
            load_config(tmp_path / name, overrides)
        assert "\n" not in str(err.value)
        return str(err.value)

    assert error("missing.yaml") == (
        f"{tmp_path / 'missing.yaml'}: defaults entry 'env/nope@env.train': no file env/nope.yaml in "
        f"{tmp_path}; env/ has: real"
    )
    # the interpolation is named with the file it was written in, not the primary config
    assert error("uses_model.yaml") == (
        f"{tmp_path / 'model' / 'mlp_policy.yaml'}: model.hidden: cannot resolve '${{algorithm.hidden}}': "
        "Interpolation key 'algorithm.hidden' not found; interpolations name keys from the top: ${section.key}"
    )
    assert error("env_var.yaml") == (
        f"{tmp_path / 'env_var.yaml'}: runner.root: cannot resolve '${{oc.env:RLINF_COMPOSE_UNSET}}': "
        "Environment variable 'RLINF_COMPOSE_UNSET' not found; set it, or give a default: "
        "${oc.env:NAME,default}"
    )
    assert error("mandatory.yaml") == (
        f"{tmp_path / 'mandatory.yaml'}: runner.seed: a value is required (??? in the config); give it on "
        "the command line: runner.seed=VALUE"
    )
    assert load_config(tmp_path / "mandatory.yaml", ["runner.seed=3"]) == {"runner": {"seed": 3}}
    assert "includes itself (a.yaml -> b.yaml -> a.yaml)" in error("loop.yaml")
    assert "defaults: must be a list" in error("bad_list.yaml")
    assert "is not a defaults entry; valid: `group/name`" in error("bad_entry.yaml")
    override_error = error("mandatory.yaml", ("runner.seed=${nowhere}",))
    assert override_error.startswith("override 'runner.seed=${nowhere}': runner.seed: cannot resolve")


def test_a_mapping_composes_relative_to_base_dir(tmp_path: Path) -> None:
    write(tmp_path, {"model/mlp.yaml": "hidden: 32\n"})
    data = {"defaults": ["model/mlp", "_self_"], "runner": {"seed": 1, "name": "s${runner.seed}"}}
    assert compose(data, ["runner.seed=4"], base_dir=tmp_path) == {
        "model": {"hidden": 32},
        "runner": {"seed": 4, "name": "s4"},
    }
    assert data["defaults"] == ["model/mlp", "_self_"]  # the input is not changed
    assert compose({"a": {"b": 1}}) == {"a": {"b": 1}}


def test_sweep_expands_the_cartesian_product() -> None:
    assert sweep(["runner.seed=0,1,2", "env.num_envs=4"]) == [
        ["runner.seed=0", "env.num_envs=4"],
        ["runner.seed=1", "env.num_envs=4"],
        ["runner.seed=2", "env.num_envs=4"],
    ]
    assert sweep(["a=range(2)", "model.sizes=[64,64],[32]", "~x", "+n='p,q'"]) == [
        ["a=0", "model.sizes=[64,64]", "~x", "+n='p,q'"],
        ["a=0", "model.sizes=[32]", "~x", "+n='p,q'"],
        ["a=1", "model.sizes=[64,64]", "~x", "+n='p,q'"],
        ["a=1", "model.sizes=[32]", "~x", "+n='p,q'"],
    ]
    assert sweep(["b=range(1,7,3)"]) == [["b=1"], ["b=4"]]
    with pytest.raises(ConfigError, match="an empty value in the sweep"):
        sweep(["a=1,,2"])
    with pytest.raises(ConfigError, match="the range is empty"):
        sweep(["a=range(3,1)"])


def test_omegaconf_is_imported_only_to_resolve(tmp_path: Path) -> None:
    plain = write(tmp_path, {"plain.yaml": "runner: {seed: 1}\n"})
    code = (
        "import sys, rlinf_core\n"
        "from rlinf_core.compose import load_config\n"
        "assert 'omegaconf' not in sys.modules and 'torch' not in sys.modules and 'ray' not in sys.modules\n"
        f"load_config({str(plain)!r}, ['runner.seed=2'])\n"
        "assert 'omegaconf' not in sys.modules and 'hydra' not in sys.modules\n"
        f"assert load_config({str(plain)!r}, ['+x=${{runner.seed}}'])['x'] == 1\n"
        "assert 'omegaconf' in sys.modules\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


HYDRA_FEATURES = {
    "main.yaml": """\
defaults:
  - dataset: imagenet
  - model: alexnet
  - pair: ${dataset}_${model}
  - extras: [a, b]
  - _self_
""",
    "dataset/imagenet.yaml": "size: 224\n",
    "dataset/cifar.yaml": "size: 32\n",
    "model/alexnet.yaml": "layers: 8\n",
    "pair/imagenet_alexnet.yaml": "lr: 0.01\n",
    "pair/cifar_alexnet.yaml": "lr: 0.1\n",
    "extras/a.yaml": "x: 1\n",
    "extras/b.yaml": "y: 2\n",
}


def test_hydra_composes_choices_interpolated_from_other_choices(tmp_path: Path) -> None:
    """Hydra's defaults-list interpolation (``pair: ${dataset}_${model}``): a choice made from
    the others, following a command-line swap. rlinf's own composer looked for a file named
    ``${dataset}_${model}.yaml``."""
    path = write(tmp_path, HYDRA_FEATURES)
    cfg = load_config(path)
    assert cfg == {
        "dataset": {"size": 224},
        "model": {"layers": 8},
        "pair": {"lr": 0.01},
        "extras": {"x": 1, "y": 2},
    }
    assert load_config(path, ["dataset=cifar"])["pair"] == {"lr": 0.1}


def test_hydra_refusals_are_one_line_naming_the_file(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            **HYDRA_FEATURES,
            "late.yaml": "defaults:\n  - override dataset: cifar\n  - dataset: imagenet\n",
            "twice.yaml": "defaults:\n  - dataset: imagenet\n  - dataset: cifar\n",
            "nul.yaml": "defaults:\n  - bad: x\n",
            "bad/x.yaml": "a: 1\x00\n",
            "choice.yaml": "defaults:\n  - dataset: ???\n",
        },
    )
    cases = {
        "late.yaml": "late.yaml: Override 'dataset : cifar' is defined before 'dataset: imagenet'.",
        "twice.yaml": "twice.yaml: Multiple values for dataset. To override a value use 'override dataset: cifar'",
        "nul.yaml": f"{tmp_path / 'bad' / 'x.yaml'}: invalid YAML: a NUL byte at line 1, column 5",
        "choice.yaml": "choice.yaml: defaults entry 'dataset: ???' needs a choice: give dataset=NAME on the "
        "command line",
    }
    for name, message in cases.items():
        with pytest.raises(ConfigError) as err:
            load_config(tmp_path / name)
        text = str(err.value)
        assert "\n" not in text and message in text and "__rlinf_primary__" not in text, text
    rlinf_style = write(tmp_path / "rlinf", RLINF_STYLE)
    with pytest.raises(ConfigError) as err:
        load_config(rlinf_style, ["model@wrong.pkg=cnn_policy"])
    assert str(err.value) == (
        f"{rlinf_style}: Could not override 'model@wrong.pkg'. Did you mean to override model@actor.model? "
        "To append to your default list use +model@wrong.pkg=cnn_policy"
    )


def test_composing_leaves_the_process_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No ``_target_`` is instantiated (no code runs from a shared file), the working directory,
    its contents and logging stay as they were, and a program's own Hydra keeps its state."""
    import logging

    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    marker = tmp_path / "instantiated"
    conf = tmp_path / "conf"
    path = write(
        conf,
        {
            "main.yaml": "defaults:\n  - tool: opener\n  - _self_\nhydra:\n  run:\n    dir: outputs/x\n",
            "tool/opener.yaml": f"_target_: builtins.open\n_args_: [{marker}, w]\n",
        },
    )
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    handlers, level = list(logging.getLogger().handlers), logging.getLogger().level
    own = write(tmp_path / "own", {"app.yaml": "mine: 1\n"})
    with initialize_config_dir(config_dir=str(own.parent), version_base="1.3"):
        for _ in range(3):
            cfg = load_config(path)
            assert cfg == {"tool": {"_target_": "builtins.open", "_args_": [str(marker), "w"]}}
        assert hydra_compose("app") == {"mine": 1}  # the program's Hydra, untouched
    assert not GlobalHydra.instance().is_initialized()
    load_config(path)
    assert not GlobalHydra.instance().is_initialized()
    assert not marker.exists()
    assert Path.cwd() == work and list(work.iterdir()) == [] and not (conf / "outputs").exists()
    assert logging.getLogger().handlers == handlers and logging.getLogger().level == level


def test_concurrent_composes_each_get_their_own(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    path = write(tmp_path, RLINF_STYLE)

    def one(i: int) -> dict:
        backend = "ddp" if i % 2 else "fsdp"
        return load_config(path, [f"runner.experiment_name=e{i}", f"training_backend={backend}"])

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one, range(4)))
    for i, cfg in enumerate(results):
        assert cfg["runner"]["logger"]["log_path"].endswith(f"/e{i}")
        assert cfg["actor"]["fsdp_config"]["strategy"] == ("ddp" if i % 2 else "fsdp")


def test_secrets_from_included_files_stay_masked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rlinf_core.compose import compose_traced, mask_secrets

    monkeypatch.setenv("RLINF_COMPOSE_TEST_KEY", "sk-included-file-secret")
    path = write(
        tmp_path,
        {
            "main.yaml": "defaults: [creds/api]\nrunner: {seed: 1}\n",
            "creds/api.yaml": "key: ${oc.env:RLINF_COMPOSE_TEST_KEY}\n",
        },
    )
    composition = compose_traced(path)
    assert composition.data["creds"]["key"] == "sk-included-file-secret"
    assert composition.unresolved(composition.data)["creds"]["key"] == "${oc.env:RLINF_COMPOSE_TEST_KEY}"
    assert composition.source_of("creds.key") == str(tmp_path / "creds" / "api.yaml")
    assert "sk-included" not in mask_secrets(f"failed with {composition.data['creds']['key']}")


def test_now_resolves_with_or_without_a_defaults_list(tmp_path: Path) -> None:
    """Hydra's ``${now:FORMAT}``: the same in a file that skips Hydra (in a fresh interpreter,
    where Hydra has registered nothing) and in one Hydra composes."""
    import datetime

    plain = write(tmp_path, {"plain.yaml": "run: {day: '${now:%Y}'}\n", "g/a.yaml": "x: 1\n"})
    listed = write(tmp_path, {"listed.yaml": "defaults: [g/a]\nrun: {day: '${now:%Y}'}\n"})
    year = str(datetime.datetime.now().year)
    code = (
        "import sys\n"
        "from rlinf_core.compose import load_config\n"
        f"assert load_config({str(plain)!r})['run']['day'] == {year!r}\n"
        "assert 'hydra' not in sys.modules\n"
        f"assert load_config({str(listed)!r})['run']['day'] == {year!r}\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_where_each_key_came_from_follows_the_choices(tmp_path: Path) -> None:
    """``source_of`` names the file Hydra's choice merged (after a command-line swap and a value
    override), also once the composition has been pickled."""
    import pickle

    from rlinf_core.compose import compose_traced

    path = write(tmp_path, RLINF_STYLE)
    composition = pickle.loads(
        pickle.dumps(compose_traced(path, ["training_backend=ddp", "actor.model.hidden_dim=9"]))
    )
    assert composition.source_of("actor.fsdp_config.strategy") == str(
        tmp_path / "training_backend" / "ddp.yaml"
    )
    assert composition.source_of("actor.model.model_type") == str(tmp_path / "model" / "mlp_policy.yaml")
    assert composition.source_of("actor.model.hidden_dim") == "override 'actor.model.hidden_dim=9'"
    assert composition.source_of("env.eval.max_episode_steps") == str(
        tmp_path / "env" / "frankasim_base.yaml"
    )
    assert composition.source_of("algorithm.group_size") is None  # the primary config


def test_a_misspelt_defaults_choice_names_the_folder_and_the_nearest_option(tmp_path: Path) -> None:
    """A defaults entry or override naming a file that is not there says what the folder holds
    and, for a near miss, which one was meant; a misspelt ``_self_`` (a file of the config's own
    folder) says so too. Before, the config's own folder was called ``it/``."""
    write(
        tmp_path,
        {
            "main.yaml": "defaults:\n  - model: tiny\n  - _self\nrunner: {seed: 1}\n",
            "ok.yaml": "defaults:\n  - model: tiny\n  - _self_\n",
            "model/tiny.yaml": "width: 2\n",
            "model/big.yaml": "width: 8\n",
        },
    )

    def error(name: str, overrides: tuple[str, ...] = ()) -> str:
        with pytest.raises(ConfigError) as err:
            load_config(tmp_path / name, overrides)
        assert "\n" not in str(err.value)
        return str(err.value)

    assert error("main.yaml") == (
        f"{tmp_path / 'main.yaml'}: defaults entry '_self': no file _self.yaml in {tmp_path}; "
        f"{tmp_path.name}/ has: main, ok (did you mean _self_?)"
    )
    assert error("ok.yaml", ("model=tinny",)).endswith(
        "no file model/tinny.yaml in " + str(tmp_path) + "; model/ has: big, tiny (did you mean tiny?)"
    )
