"""Rewards (rlinf_algos.lm.rewards): the built-ins, verl's compute_score and TRL-style callables
from a file, rewards registered by a third-party plugin, and every failure reported with the
sample it happened on."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, ClassVar

import pytest

from rlinf_algos.lm.data import Sample
from rlinf_algos.lm.rewards import (
    BUILTIN_REWARDS,
    RewardConfig,
    RewardError,
    ScoreFn,
    extract_math_answer,
    last_boxed,
    load_reward,
    math_equal,
)
from rlinf_core.config import validate_model
from rlinf_core.errors import ConfigError, RlinfError
from rlinf_core.plugins import hookimpl, load_plugins
from rlinf_core.reward import RewardFunction


def sample(answer: str, i: int = 0, *, messages: bool = False, **columns: Any) -> Sample:
    msgs = [{"role": "user", "content": f"q{i}"}] if messages else None
    return Sample(
        f"prompt {i}", msgs, answer, {"answer": answer, **columns}, f"data/train.jsonl:{i + 1}", answer
    )


def rcfg(**kw: Any) -> RewardConfig:
    return validate_model(RewardConfig, kw, "reward")


def write(tmp_path: Path, source: str, name: str = "reward.py") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(source), encoding="utf-8")
    return p


# -- the section --------------------------------------------------------------------------------


def test_reward_section_defaults_and_validation() -> None:
    assert rcfg().name == "math"
    assert rcfg(path="r.py").name == "compute_score"
    assert rcfg(path="r.py", name="my_fn").name == "my_fn"
    for raw, path in [
        ({"nmae": "math"}, "reward.nmae"),
        ({"kwargs": {"tol": float("nan")}}, "reward.kwargs"),
        ({"conversational": "yes"}, "reward.conversational"),
        ({"name": ""}, "reward.name"),
    ]:
        with pytest.raises(ConfigError) as info:
            rcfg(**raw)
        assert info.value.problems[0].path == path


# -- built-ins ----------------------------------------------------------------------------------


def test_exact_match_normalises_whitespace() -> None:
    score = load_reward(rcfg(name="exact_match"))
    assert score.kind == "registered"
    assert score(
        ["  Paris\n", "paris", "New   York"], [sample("Paris"), sample("Paris"), sample("New York")]
    ) == [
        1.0,
        0.0,
        1.0,
    ]
    folded = load_reward(rcfg(name="exact_match", kwargs={"ignore_case": True}))
    assert folded(["paris"], [sample("Paris")]) == [1.0]


def test_boxed_extraction_with_nested_braces() -> None:
    assert last_boxed(r"first \boxed{1} then \boxed{\frac{1}{\sqrt{2}}} done") == r"\frac{1}{\sqrt{2}}"
    assert last_boxed(r"\boxed 7 apples") == "7"
    assert last_boxed(r"\boxed{open") is None and last_boxed("nothing") is None
    assert extract_math_answer(r"so $\boxed{\dfrac{3}{4}}$.") == r"\dfrac{3}{4}"
    assert extract_math_answer("reasoning...\n#### 1,234\nextra") == "1,234"
    assert extract_math_answer("first 12, then 7.5 and finally -3/4.") == "-3/4"
    assert extract_math_answer("no digits") is None


@pytest.mark.parametrize(
    ("completion", "answer", "expected"),
    [
        (r"The answer is \boxed{\frac{3}{4}}", "0.75", 1.0),
        (r"\boxed{\frac{3}{4}}", "3/4", 1.0),
        (r"\boxed{{6}/{8}}", "3/4", 1.0),
        ("so she has 18 eggs\n#### 18", "18", 1.0),
        ("#### 1,000", "1000", 1.0),
        ("total: 1,000 dollars", "#### 1000", 1.0),  # a GSM8K-style reference is extracted too
        ("it is 3/4", "0.75", 1.0),
        ("it is 0.3333333333", "1/3", 1.0),
        (r"\boxed{-\frac{1}{2}}", "-0.5", 1.0),
        (r"\boxed{x + 1}", "x+1", 1.0),
        (r"\boxed{\text{Yes}}", "yes", 1.0),
        ("it is 0.76", "3/4", 0.0),
        (r"\boxed{5} but then 6", "6", 0.0),  # the box wins over the last number
        ("no answer here", "3", 0.0),
        ("#### 17", r"\boxed{17}", 1.0),
    ],
)
def test_math_reward(completion: str, answer: str, expected: float) -> None:
    assert load_reward(rcfg(name="math"))([completion], [sample(answer)]) == [expected]


def test_math_equal_tolerance() -> None:
    assert math_equal("1.0000001", "1", rel_tol=1e-6)
    assert not math_equal("1.001", "1", rel_tol=1e-6)
    assert math_equal("1.001", "1", rel_tol=1e-2)
    loose = load_reward(rcfg(name="math", kwargs={"rel_tol": 0.01}))
    assert loose(["#### 1.001"], [sample("1")]) == [1.0]


def test_arith_wraps_the_chain_verifier() -> None:
    score = load_reward(rcfg(name="arith", kwargs={"format_reward": 0.1}))
    good = "<step>0084+0001=0085<ans>85<eos>"  # the verifier checks the format and the final answer
    assert score([good, good.replace("85<eos>", "86<eos>"), "85"], [sample("85")] * 3) == [1.0, 0.1, 0.0]
    with pytest.raises(RlinfError) as info:
        score([good], [sample("eighty-five", 4)])
    msg = str(info.value)
    assert "reward 'arith'" in msg and "integer answer" in msg and "data/train.jsonl:5" in msg


def test_builtins_reject_unknown_kwargs_and_names() -> None:
    with pytest.raises(ConfigError) as info:
        load_reward(rcfg(name="math", kwargs={"tolerance": 1}))
    assert info.value.problems[0].path == "reward.kwargs" and "rel_tol, abs_tol" in str(info.value)
    with pytest.raises(ConfigError) as info:
        load_reward(rcfg(name="nope"), plugins=load_plugins(entry_points=[]))
    assert info.value.problems[0].path == "reward.name"
    assert "unknown reward function 'nope'" in str(info.value) and "reward.path" in str(info.value)


# -- files: verl's compute_score and TRL-style callables ----------------------------------------

VERL = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):
    assert data_source == "openai/gsm8k", data_source
    base = 1.0 if solution_str.strip() == ground_truth else 0.0
    return base + bonus + (extra_info or {}).get("index", 0) / 100

def dict_score(data_source, solution_str, ground_truth):
    return {"score": float(solution_str == ground_truth), "acc": solution_str == ground_truth}
"""


def test_verl_compute_score_float_and_dict(tmp_path: Path) -> None:
    write(tmp_path, VERL)
    samples = [
        sample("4", 0, data_source="openai/gsm8k", extra_info={"index": 3}),
        sample("5", 1, data_source="openai/gsm8k"),
    ]
    score = load_reward(rcfg(path="reward.py", kwargs={"bonus": 0.5}), root=tmp_path)
    assert score.kind == "verl" and score.name == "compute_score"
    assert score([" 4 ", "6"], samples) == pytest.approx([1.53, 0.5])
    as_dict = load_reward(rcfg(path=str(tmp_path / "reward.py"), name="dict_score"))
    assert as_dict.kind == "verl"
    assert as_dict(["4", "6"], samples) == [1.0, 0.0]
    assert as_dict.last_info == [{"acc": True}, {"acc": False}]


def test_verl_gets_the_stored_ground_truth(tmp_path: Path) -> None:
    write(
        tmp_path,
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return float(solution_str in ground_truth)\n",
    )
    s = Sample("p", None, '["a", "b"]', {"data_source": "x"}, "f.parquet:0", ["a", "b"])
    assert load_reward(rcfg(path="reward.py"), root=tmp_path)(["b", "c"], [s, s]) == [1.0, 0.0]
    write(tmp_path, "def compute_score(solution_str, ground_truth):\n    return 0.25\n", "two.py")
    assert load_reward(rcfg(path="two.py"), root=tmp_path)(["b"], [s]) == [0.25]  # only what it takes


TRL = """
import math

seen = []

def trl_reward(completions, prompts, ground_truth, difficulty, scale=1.0, **kwargs):
    seen.append({"completions": completions, "prompts": prompts, "ground_truth": ground_truth,
                 "difficulty": difficulty, "answer": kwargs["answer"]})
    return [scale * float(c == g) for c, g in zip(completions, ground_truth)]

def chat_reward(completions, **kwargs):
    return [float(c[0]["content"] == a) for c, a in zip(completions, kwargs["answer"])]

def narrow(completions, ground_truth):
    return tuple(len(c) / 10 for c in completions)

def fussy(completions, not_a_column):
    return [0.0] * len(completions)

def boom_on_b(completions, **kwargs):
    if "b" in completions:
        raise ZeroDivisionError("division by zero")
    return [1.0] * len(completions)
"""


def test_trl_style_callable_gets_columns_as_lists(tmp_path: Path) -> None:
    write(tmp_path, TRL)
    score = load_reward(rcfg(path="reward.py", name="trl_reward", kwargs={"scale": 2.0}), root=tmp_path)
    assert score.kind == "trl"
    samples = [sample("a", 0, difficulty=1), sample("b", 1, difficulty=2)]
    assert score(["a", "x"], samples) == [2.0, 0.0]
    seen = sys.modules[score._fn.__module__].seen[-1]
    assert seen == {
        "completions": ["a", "x"],
        "prompts": ["prompt 0", "prompt 1"],
        "ground_truth": ["a", "b"],
        "difficulty": [1, 2],
        "answer": ["a", "b"],
    }
    narrow = load_reward(rcfg(path="reward.py", name="narrow"), root=tmp_path)
    assert narrow(["abc", "abcdefghij"], samples) == [0.3, 1.0]  # a tuple is fine; no **kwargs: only its own


def test_trl_conversational_completions(tmp_path: Path) -> None:
    write(tmp_path, TRL)
    chat = load_reward(rcfg(path="reward.py", name="chat_reward"), root=tmp_path)
    assert chat(["a", "z"], [sample("a", messages=True), sample("b", messages=True)]) == [1.0, 0.0]
    forced = load_reward(rcfg(path="reward.py", name="narrow", conversational=False), root=tmp_path)
    assert forced(["abcde"], [sample("a", messages=True)]) == [0.5]
    fussy = load_reward(rcfg(path="reward.py", name="fussy"), root=tmp_path)
    with pytest.raises(RlinfError, match=r"requires 'not_a_column', which the data set does not provide"):
        fussy(["a"], [sample("a")])


# -- failures name the sample -------------------------------------------------------------------

BAD = """
def raises(data_source, solution_str, ground_truth, extra_info=None):
    if "bad" in solution_str:
        raise KeyError("no such thing")
    return 1.0

def word(data_source, solution_str, ground_truth, extra_info=None):
    return "correct"

def nan(completions, **kw):
    return [float("nan")] * len(completions)

def short(completions, **kw):
    return [1.0]

def nones(completions, **kw):
    return [None] * len(completions)

def no_score(data_source, solution_str, ground_truth):
    return {"acc": 1}

def scalar(completions, **kw):
    return 1.0
"""


@pytest.mark.parametrize(
    ("name", "words", "where"),
    [
        ("raises", "raised KeyError: 'no such thing'", "sample data/train.jsonl:2"),
        ("word", "returned 'correct' (str), not a number", "sample data/train.jsonl:1"),
        ("nan", "returned nan, not a finite number", "sample data/train.jsonl:1"),
        ("short", "returned 1 scores for 2 completions", "a batch of 2 samples from data/train.jsonl:1"),
        ("nones", "returned None instead of a number", "sample data/train.jsonl:1"),
        ("no_score", "returned a dict without a 'score' key (keys: acc)", "sample data/train.jsonl:1"),
        ("scalar", "returned float, not a list of 2 numbers", "a batch of 2 samples"),
    ],
)
def test_a_failing_reward_is_reported_with_its_sample(
    tmp_path: Path, name: str, words: str, where: str
) -> None:
    path = write(tmp_path, BAD)
    score = load_reward(rcfg(path="reward.py", name=name), root=tmp_path)
    long = "good " * 100
    with pytest.raises(RewardError) as info:
        score([long, "a bad one"], [sample("1", 0), sample("2", 1)])
    msg = str(info.value)
    assert msg.startswith(f"reward {name!r} from {path} ")
    assert words in msg and where in msg
    assert "completion '" in msg and len(msg) < 500  # a shortened completion, one line
    assert "\n" not in msg


def test_a_raising_batch_reward_is_narrowed_to_its_sample(tmp_path: Path) -> None:
    write(tmp_path, TRL)
    score = load_reward(rcfg(path="reward.py", name="boom_on_b"), root=tmp_path)
    with pytest.raises(RewardError) as info:
        score(["a", "b", "c"], [sample("x", 0), sample("x", 1), sample("x", 2)])
    assert f"raised ZeroDivisionError: division by zero at {tmp_path / 'reward.py'}:22 on sample" in str(
        info.value
    )
    assert "on sample data/train.jsonl:2 (completion 'b')" in str(info.value)
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_file_errors_name_the_key(tmp_path: Path) -> None:
    def problem(**kw: Any) -> tuple[str, str]:
        with pytest.raises(ConfigError) as info:
            load_reward(rcfg(**kw), root=tmp_path)
        (p,) = info.value.problems
        return p.path, p.message

    assert problem(path="missing.py") == ("reward.path", f"file not found: {tmp_path / 'missing.py'}")
    write(tmp_path, "import os\nx = 1\nraise RuntimeError('needs a GPU\\nsecond line')\n", "broken.py")
    key, msg = problem(path="broken.py")
    assert (
        key == "reward.path"
        and msg == f"{tmp_path / 'broken.py'}: import failed at line 3: RuntimeError: needs a GPU"
    )
    write(tmp_path, "def f(:\n", "syntax.py")
    assert "import failed: SyntaxError: line 1" in problem(path="syntax.py")[1]
    write(
        tmp_path,
        "import os\ndef score_a(completions): ...\ndef _private(): ...\nclass Helper: ...\n",
        "names.py",
    )
    key, msg = problem(path="names.py")
    assert key == "reward.name"
    assert "has no 'compute_score'; its callables: score_a, Helper (set reward.name to one of them)" in msg
    write(tmp_path, "def weird(a, b):\n    return [0.0]\nCONST = 3\n", "weird.py")
    key, msg = problem(path="weird.py", name="weird")
    assert key == "reward.name" and "neither verl's compute_score" in msg
    assert "not a function" in problem(path="weird.py", name="CONST")[1]
    write(tmp_path, VERL)
    key, msg = problem(path="reward.py", name="dict_score", kwargs={"bonus": 1})
    assert key == "reward.kwargs"
    assert "takes no 'bonus'; its parameters: data_source, solution_str, ground_truth" in msg


def test_a_reward_class_in_a_file(tmp_path: Path) -> None:
    write(
        tmp_path,
        """
        from rlinf_core.reward import RewardFunction

        class Length(RewardFunction):
            PLUGIN_NAME = "length"

            def __init__(self, per_char=1.0):
                self.per_char = per_char

            def __call__(self, completions, answers, *, prompts=None, columns=None):
                return [self.per_char * len(c) for c in completions]
        """,
    )
    score = load_reward(rcfg(path="reward.py", name="Length", kwargs={"per_char": 0.5}), root=tmp_path)
    assert score(["abcd"], [sample("x")]) == [2.0]


def test_score_fn_pickles_by_its_config(tmp_path: Path) -> None:
    write(tmp_path, VERL)
    score = load_reward(rcfg(path="reward.py", name="dict_score"), root=tmp_path)
    again = pickle.loads(pickle.dumps(score))
    assert isinstance(again, ScoreFn) and again.kind == "verl"
    assert again(["1"], [sample("1")]) == [1.0]
    builtin = pickle.loads(pickle.dumps(load_reward(rcfg(name="math"))))
    assert builtin(["#### 2"], [sample("2")]) == [1.0]


# -- plugins ------------------------------------------------------------------------------------


class Contains(RewardFunction):
    PLUGIN_NAME: ClassVar[str] = "contains"

    def __init__(self, weight: float = 1.0) -> None:
        self.weight = weight

    def __call__(self, completions, answers, *, prompts=None, columns=None):  # type: ignore[no-untyped-def]
        return [self.weight * float(a in c) for c, a in zip(completions, answers, strict=True)]


class ThirdParty:
    @hookimpl
    def rlinf_register_rewards(self) -> list[type]:
        return [Contains]


def test_a_third_party_plugin_registers_a_reward() -> None:
    host = load_plugins(entry_points=[], extra=[("rewards-demo", ThirdParty())])
    assert host.rewards.names() == ["contains"]
    (row,) = host.describe()
    assert row["registers"]["rewards"] == ["contains"]
    score = load_reward(rcfg(name="Contains", kwargs={"weight": 2.0}), plugins=host)
    assert score(["the answer is 42", "no"], [sample("42"), sample("42")]) == [2.0, 0.0]
    # the built-ins still resolve when the host does not list them
    assert load_reward(rcfg(name="math"), plugins=host)(["#### 1"], [sample("1")]) == [1.0]


def test_rlinf_algos_registers_its_rewards_through_the_hook() -> None:
    import importlib.metadata as md

    eps = [ep for ep in md.entry_points(group="rlinf") if ep.name == "algos"]
    host = load_plugins(entry_points=eps)
    assert host.failures == []
    assert sorted(host.rewards.names()) == sorted(BUILTIN_REWARDS) == ["arith", "exact_match", "math"]
    assert host.rewards.owner("math").distribution == "rlinf-algos"


def test_rewards_and_data_stay_torch_free(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text(json.dumps({"prompt": "1+1=", "answer": "2"}) + "\n")
    code = (
        "import sys, json\n"
        "from rlinf_algos.lm.data import DataConfig, load_dataset\n"
        "from rlinf_algos.lm.rewards import RewardConfig, load_reward\n"
        f"ds = load_dataset(DataConfig(train_files=[{str(tmp_path / 'd.jsonl')!r}]))\n"
        "assert load_reward(RewardConfig(name='arith'))(['<step>0001+0001=0002<ans>2<eos>'], list(ds)) == [1.0]\n"
        "assert load_reward(RewardConfig(name='math'))(['2'], list(ds)) == [1.0]\n"
        "print(json.dumps(sorted(m for m in ('torch', 'ray', 'transformers', 'pyarrow') if m in sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(out.stdout) == []
