"""Rewards for language-model RL: the ``reward`` section, the built-in reward functions and one
uniform scoring callable over whatever the user brings.

Torch-free (pydantic and the standard library), so the reward component can be placed on
CPU-only nodes. :func:`load_reward` turns the ``reward`` section into a :class:`ScoreFn`,
``score(completions, samples) -> list[float]``, from one of:

- a registered reward (``reward.name``, no ``reward.path``): a
  :class:`~rlinf_core.reward.RewardFunction` subclass from the ``rlinf_register_rewards`` hook.
  rlinf-algos ships ``exact_match``, ``math`` and ``arith`` (this module); ``reward.kwargs`` go
  to its constructor;
- a file with verl's ``compute_score(data_source, solution_str, ground_truth, extra_info=None)``
  (``reward.path``; ``reward.name`` defaults to ``compute_score``), called once per sample with
  the row's ``data_source``, the completion, the stored ground truth and ``extra_info`` (plus
  ``reward.kwargs``); it may return a number or a dict with a ``"score"`` key, as verl allows;
- a file with a TRL-style callable ``(completions, **columns) -> list[float]``, called once per
  batch with the data set's columns as lists, ``prompts``, ``ground_truth`` and ``answer`` (the
  reference answers as text, unless the data set has columns of those names) and
  ``reward.kwargs``. As in TRL, completions and prompts are chat messages when the prompt was a
  list of messages (``reward.conversational`` overrides).

Which of the two a file's function is, is told by its signature: a ``solution_str`` parameter (or
``data_source`` and ``ground_truth``) is verl's; a ``completions`` parameter or ``**kwargs`` is
TRL's.

A reward that raises, returns something other than finite numbers, or the wrong number of them is
a :class:`RewardError` (a :class:`~rlinf_core.errors.RlinfError`) naming the reward, the sample it failed on (``file:row``)
and a shortened completion; a batch call that fails is retried sample by sample to find which.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import importlib.util
import inspect
import math
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any, ClassVar, Literal

from rlinf_algos.lm.config import DEFAULT_REWARD, RewardConfig
from rlinf_algos.lm.data import Sample
from rlinf_core.errors import ConfigError, PluginError, RlinfError
from rlinf_core.reward import RewardFunction

__all__ = [
    "BUILTIN_REWARDS",
    "DEFAULT_REWARD",
    "ArithReward",
    "ExactMatchReward",
    "MathReward",
    "RewardConfig",
    "RewardError",
    "ScoreFn",
    "extract_math_answer",
    "last_boxed",
    "load_reward",
    "math_equal",
    "normalize_answer",
]


class RewardError(RlinfError):
    """A reward function failed: it raised, or returned something other than one finite number
    per completion. The message names the reward, the sample (``file:row``) and the completion."""


# -- built-in rewards ---------------------------------------------------------------------------


class _PerSample(RewardFunction):
    """A reward scored one completion at a time by :meth:`score`."""

    def __call__(
        self,
        completions: Sequence[str],
        answers: Sequence[str],
        *,
        prompts: Sequence[str] | None = None,
        columns: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[float]:
        return [self.score(c, a) for c, a in zip(completions, answers, strict=True)]

    def score(self, completion: str, answer: str) -> float:
        raise NotImplementedError


class ExactMatchReward(_PerSample):
    """``exact_match``: 1.0 when the completion equals the answer after stripping and collapsing
    whitespace (and, with ``ignore_case``, case-folding), else 0.0.

    Args:
        ignore_case: compare case-insensitively.
        normalize: compare :func:`normalize_answer`'s forms (SQuAD's: lower-cased, punctuation
            and the articles a, an, the dropped, whitespace collapsed), so ``"The Kesh."`` matches
            ``kesh``.
        pattern: a regular expression: the completion's answer is the first group of its last
            match (``"answer is (.+)"`` reads ``The answer is Kesh.``); a completion without a
            match scores 0. Default: the whole completion.
    """

    PLUGIN_NAME: ClassVar[str] = "exact_match"
    description: ClassVar[str] = "the completion equals the answer (whitespace normalised)"

    def __init__(
        self, ignore_case: bool = False, normalize: bool = False, pattern: str | None = None
    ) -> None:
        self.ignore_case = bool(ignore_case)
        self.normalize = bool(normalize)
        try:
            self.pattern = re.compile(pattern) if pattern is not None else None
        except (re.error, TypeError) as err:
            raise ValueError(f"pattern {pattern!r} is not a regular expression ({err})") from None
        if self.pattern is not None and self.pattern.groups < 1:
            raise ValueError(f"pattern {pattern!r} has no group; put the answer in one: 'answer is (.+)'")

    def _norm(self, text: str) -> str:
        if self.normalize:
            return normalize_answer(text)
        text = " ".join(text.split())
        return text.casefold() if self.ignore_case else text

    def score(self, completion: str, answer: str) -> float:
        if self.pattern is not None:
            found = self.pattern.findall(completion)
            if not found:
                return 0.0
            last = found[-1]
            completion = last[0] if isinstance(last, tuple) else last
        return 1.0 if self._norm(completion) == self._norm(answer) else 0.0


_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """SQuAD's answer normalisation: lower-case, drop punctuation and the articles a, an and the,
    collapse whitespace (``"The  Kesh."`` -> ``"kesh"``)."""
    text = "".join(ch for ch in text.casefold() if ch.isalnum() or ch.isspace())
    return " ".join(_ARTICLES.sub(" ", text).split())


class MathReward(_PerSample):
    """``math``: 1.0 when the completion's final answer equals the reference, else 0.0.

    The completion's answer is the content of its last ``\\boxed{...}`` (nested braces allowed),
    else what follows its last ``####``, else its last number (:func:`extract_math_answer`); the
    reference is read the same way when it holds ``\\boxed`` or ``####``, else taken whole.
    Numbers compare numerically (``3/4``, ``\\frac{3}{4}``, ``0.75``, ``1,000``, ``-2``) within a
    tolerance; anything else compares as text with spaces and ``$`` removed (:func:`math_equal`).

    Args:
        rel_tol, abs_tol: numeric tolerance, as :func:`math.isclose`.
    """

    PLUGIN_NAME: ClassVar[str] = "math"
    description: ClassVar[str] = r"final answer (\boxed{}, ####, or the last number) equals the reference"

    def __init__(self, rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> None:
        self.rel_tol = float(rel_tol)
        self.abs_tol = float(abs_tol)

    def score(self, completion: str, answer: str) -> float:
        got = extract_math_answer(completion)
        if got is None:
            return 0.0
        ref = answer
        if "\\boxed" in ref or "\\fbox" in ref or "####" in ref:
            ref = extract_math_answer(ref) or ref
        return 1.0 if math_equal(got, ref, self.rel_tol, self.abs_tol) else 0.0


class ArithReward(_PerSample):
    """``arith``: the exact verifier of the arithmetic task
    (:func:`rlinf_algos.lm.arith.verify_chain`) against an integer answer: 1.0 for a well-formed
    chain with the right answer, ``format_reward`` for a well-formed one with a wrong answer,
    0.0 otherwise.

    Args:
        format_reward: reward of a well-formed chain with a wrong answer.
    """

    PLUGIN_NAME: ClassVar[str] = "arith"
    description: ClassVar[str] = "the arithmetic task's chain verifier (integer answers)"

    def __init__(self, format_reward: float = 0.0) -> None:
        self.format_reward = float(format_reward)

    def score(self, completion: str, answer: str) -> float:
        from rlinf_algos.lm.arith import verify_chain

        try:
            expected = int(str(answer).strip())
        except ValueError:
            raise RlinfError(
                f"the arith reward needs an integer answer, got {answer!r}; check data.answer_key"
            ) from None
        return verify_chain(completion, expected, self.format_reward).reward


BUILTIN_REWARDS: dict[str, type[RewardFunction]] = {
    cls.PLUGIN_NAME: cls for cls in (ExactMatchReward, MathReward, ArithReward)
}
"""The rewards rlinf-algos registers, by name (resolved even when plugins are filtered)."""


# -- math answer extraction ---------------------------------------------------------------------

_BOXED_RE = re.compile(r"\\(?:boxed|fbox)")
_NUMBER_RE = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?(?:/\d+(?:\.\d+)?)?|-?\.\d+")
_PLAIN_NUMBER_RE = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_THOUSANDS_RE = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d*)?")
_FRAC_RE = re.compile(r"\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}|\\[dt]?frac(\d)(\d)")
_TEXT_RE = re.compile(r"\\(?:text|textbf|mathrm|mathbf)\{([^{}]*)\}")


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, nested braces
    included (``\\boxed{\\frac{1}{2}}`` gives ``\\frac{1}{2}``); ``\\boxed 5`` gives ``5``.
    ``None`` when there is none or its braces do not close."""
    matches = list(_BOXED_RE.finditer(text))
    if not matches:
        return None
    i = matches[-1].end()
    while i < len(text) and text[i] == " ":
        i += 1
    if i >= len(text):
        return None
    if text[i] != "{":
        if i == matches[-1].end():  # \boxedx is not a box
            return None
        m = re.match(r"[^\s$]+", text[i:])
        return m.group(0) if m else None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    return None


def extract_math_answer(text: str) -> str | None:
    """The final answer of a solution: its last ``\\boxed{...}``, else what follows its last
    ``####`` (to the end of that line), else its last number (``1,234``, ``-3.5``, ``3/4``);
    ``None`` when there is none."""
    boxed = last_boxed(text)
    if boxed is not None and boxed.strip():
        return boxed.strip()
    if "####" in text:
        tail = text.rsplit("####", 1)[1].strip()
        tail = tail.splitlines()[0].strip() if tail else ""
        if tail:
            return tail
    numbers = _NUMBER_RE.findall(text)
    return numbers[-1] if numbers else None


def _normalise(answer: str) -> str:
    s = answer.strip()
    for _ in range(3):  # unwrap $...$, \(...\), \text{...} layers
        s = s.strip().strip("$").strip()
        if s.startswith("\\(") and s.endswith("\\)"):
            s = s[2:-2]
        s = _TEXT_RE.sub(r"\1", s)
    for old in (
        "\\left",
        "\\right",
        "\\!",
        "\\,",
        "\\;",
        "\\:",
        "\\ ",
        "\\$",
        "\\%",
        "%",
        "^\\circ",
        "^{\\circ}",
    ):
        s = s.replace(old, "")
    s = _FRAC_RE.sub(lambda m: f"{m.group(1) or m.group(3)}/{m.group(2) or m.group(4)}", s)
    s = re.sub(r"\s+", "", s)
    s = s.rstrip(".")
    if s.startswith("{") and s.endswith("}") and s.count("{") == 1:
        s = s[1:-1]
    return s


def _to_number(s: str) -> Fraction | float | None:
    if "/" in s:
        num, _, den = s.partition("/")
        a, b = _to_number(num.strip("(){}")), _to_number(den.strip("(){}"))
        if a is None or b is None or b == 0 or "/" in den:
            return None
        return Fraction(a) / Fraction(b) if not isinstance(a, float) and not isinstance(b, float) else a / b
    if _THOUSANDS_RE.fullmatch(s):
        s = s.replace(",", "")
    if not _PLAIN_NUMBER_RE.fullmatch(s):
        return None
    try:
        return Fraction(s)
    except (ValueError, ZeroDivisionError):
        try:
            return float(s)
        except ValueError:
            return None


def math_equal(got: str, ref: str, rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> bool:
    """Whether two final answers agree: numerically within ``rel_tol``/``abs_tol`` when both are
    numbers (``3/4`` == ``\\frac{3}{4}`` == ``0.75``, ``1,000`` == ``1000``), else as text after
    removing spaces, ``$``, ``\\text{}``, ``\\left``/``\\right`` and a trailing period
    (case-insensitively)."""
    a, b = _normalise(got), _normalise(ref)
    x, y = _to_number(a), _to_number(b)
    if x is not None and y is not None:
        if x == y:
            return True
        return math.isclose(float(x), float(y), rel_tol=rel_tol, abs_tol=abs_tol)
    return a.casefold() == b.casefold()


# -- the uniform scoring callable ---------------------------------------------------------------


Kind = Literal["registered", "verl", "trl"]


class ScoreFn:
    """``score(completions, samples) -> list[float]``: one reward, whatever its origin.

    Built by :func:`load_reward`. Pickling it sends the ``reward`` section (``reward.path``
    made absolute), and the receiving process loads the reward again: the file must exist there
    too, at the same path, and a registered name is looked up among the plugins installed there.
    So a reward worker on another (CPU-only) node can be handed one.

    Attributes:
        name: ``reward.name``.
        kind: ``registered`` (a :class:`~rlinf_core.reward.RewardFunction`), ``verl``
            (``compute_score`` per sample) or ``trl`` (a batch callable).
        label: how error messages name the reward.
        last_info: per sample of the last call, the other keys of a verl dict result
            (``{"score": 1.0, "acc": True}`` gives ``{"acc": True}``); empty dicts otherwise.
    """

    def __init__(
        self,
        cfg: RewardConfig,
        root: Path | None,
        kind: Kind,
        fn: Callable[..., Any],
        label: str,
        accepts: frozenset[str] | None = None,
    ) -> None:
        self.cfg = cfg
        self.root = root
        self.name = str(cfg.name)
        self.kind: Kind = kind
        self.label = label
        self.last_info: list[dict[str, Any]] = []
        self._fn = fn
        self._accepts = accepts  # parameter names the function takes; None: **kwargs

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reload, (self.cfg.model_dump(), None if self.root is None else str(self.root)))

    def __repr__(self) -> str:
        return f"ScoreFn({self.kind}: {self.label})"

    def __call__(self, completions: Sequence[str], samples: Sequence[Sample]) -> list[float]:
        """Score ``completions[i]`` against ``samples[i]``.

        Raises:
            RewardError: the reward raised, returned a non-number, NaN or infinity, or the wrong
                number of scores; the message names the sample (``file:row``) and the completion.
        """
        completions = list(completions)
        samples = list(samples)
        if len(completions) != len(samples):
            raise RlinfError(
                f"reward {self.label}: {len(completions)} completions but {len(samples)} samples"
            )
        self.last_info = [{} for _ in samples]
        if not samples:
            return []
        if self.kind == "verl":
            return [
                self._verl_one(i, c, s) for i, (c, s) in enumerate(zip(completions, samples, strict=True))
            ]
        try:
            out = self._batch(completions, samples)
        except Exception as err:
            if len(samples) > 1:  # find the sample it fails on
                for c, s in zip(completions, samples, strict=True):
                    self._check(self._call_batch_one(c, s), [c], [s])
            self._fail(err, completions[0], samples[0], len(samples))
        return self._check(out, completions, samples)

    # -- internals --------------------------------------------------------------------------
    def _call_batch_one(self, completion: str, sample: Sample) -> Any:
        try:
            return self._batch([completion], [sample])
        except Exception as err:
            self._fail(err, completion, sample, 1)

    def _batch(self, completions: list[str], samples: list[Sample]) -> Any:
        if self.kind == "registered":
            return self._fn(
                completions,
                [s.answer for s in samples],
                prompts=[s.prompt_text for s in samples],
                columns=[s.columns for s in samples],
            )
        return self._fn(**self._trl_kwargs(completions, samples))

    def _trl_kwargs(self, completions: list[str], samples: list[Sample]) -> dict[str, Any]:
        names: dict[str, None] = {}
        for s in samples:
            names.update(dict.fromkeys(s.columns))
        kw: dict[str, Any] = {k: [s.columns.get(k) for s in samples] for k in names}
        kw.setdefault("ground_truth", [s.answer for s in samples])
        kw.setdefault("answer", [s.answer for s in samples])
        conv = [
            (self.cfg.conversational if self.cfg.conversational is not None else s.messages is not None)
            for s in samples
        ]
        kw["prompts"] = [
            (s.messages if c and s.messages is not None else s.prompt_text)
            for s, c in zip(samples, conv, strict=True)
        ]
        kw["completions"] = [
            ([{"role": "assistant", "content": t}] if c else t)
            for t, c in zip(completions, conv, strict=True)
        ]
        kw.update(self.cfg.kwargs)
        if self._accepts is not None:
            missing = [p for p in self._required if p not in kw]
            if missing:
                raise RewardError(
                    f"reward {self.label} requires {', '.join(map(repr, missing))}, which the data set does "
                    f"not provide (it gets: {', '.join(sorted(kw))}); give the parameter a default or add "
                    "it to reward.kwargs"
                )
            kw = {k: v for k, v in kw.items() if k in self._accepts}
        return kw

    @functools.cached_property
    def _required(self) -> list[str]:
        sig = inspect.signature(self._fn)
        return [
            p.name
            for p in sig.parameters.values()
            if p.default is inspect.Parameter.empty
            and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        ]

    def _verl_one(self, i: int, completion: str, sample: Sample) -> float:
        kw: dict[str, Any] = {
            "data_source": sample.columns.get("data_source"),
            "solution_str": completion,
            "ground_truth": sample.ground_truth if sample.ground_truth is not None else sample.answer,
        }
        if self._accepts is None or "extra_info" in self._accepts:
            kw["extra_info"] = sample.columns.get("extra_info")
        kw.update(self.cfg.kwargs)
        if self._accepts is not None:
            kw = {k: v for k, v in kw.items() if k in self._accepts}
        try:
            out = self._fn(**kw)
        except Exception as err:
            self._fail(err, completion, sample, 1)
        if isinstance(out, Mapping):
            if "score" not in out:
                self._bad(
                    f"returned a dict without a 'score' key (keys: {', '.join(map(str, out))})",
                    completion,
                    sample,
                )
            self.last_info[i] = {k: v for k, v in out.items() if k != "score"}
            out = out["score"]
        return self._number(out, completion, sample)

    def _check(self, out: Any, completions: list[str], samples: list[Sample]) -> list[float]:
        if isinstance(out, str | bytes | Mapping) or not hasattr(out, "__iter__"):
            self._bad(
                f"returned {type(out).__name__}, not a list of {len(samples)} numbers",
                completions[0],
                samples[0],
                len(samples),
            )
        values = list(out)
        if len(values) != len(samples):
            self._bad(
                f"returned {len(values)} scores for {len(samples)} completions",
                completions[0],
                samples[0],
                len(samples),
            )
        return [self._number(v, c, s) for v, c, s in zip(values, completions, samples, strict=True)]

    def _number(self, value: Any, completion: str, sample: Sample) -> float:
        if value is None:
            self._bad(
                "returned None instead of a number (TRL's 'not applicable'; a single reward must score every sample)",
                completion,
                sample,
            )
        if isinstance(value, str | bytes) or not hasattr(value, "__float__"):
            self._bad(
                f"returned {_short(repr(value), 60)} ({type(value).__name__}), not a number",
                completion,
                sample,
            )
        try:
            x = float(value)
        except (TypeError, ValueError):
            self._bad(f"returned {_short(repr(value), 60)}, not a number", completion, sample)
        if not math.isfinite(x):
            self._bad(f"returned {x}, not a finite number", completion, sample)
        return x

    def _where(self, completion: str, sample: Sample, batch: int) -> str:
        what = f"sample {sample.source}" if batch == 1 else f"a batch of {batch} samples from {sample.source}"
        return f"{what} (completion {_short(completion)!r})"

    def _bad(self, problem: str, completion: str, sample: Sample, batch: int = 1) -> None:
        raise RewardError(f"reward {self.label} {problem} on {self._where(completion, sample, batch)}")

    def _fail(self, err: Exception, completion: str, sample: Sample, batch: int) -> None:
        if isinstance(err, RewardError):
            raise err
        detail = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise RewardError(
            f"reward {self.label} raised {type(err).__name__}{': ' + detail if detail else ''}"
            f"{user_frame(err, self.cfg.path)} on {self._where(completion, sample, batch)}"
        ) from err


def user_frame(err: BaseException, path: str | Path | None = None) -> str:
    """`` at FILE:LINE``: where in the user's code ``err`` was raised: the deepest frame in the
    reward file ``path``, else the deepest frame outside rlinf (``""`` when there is none)."""
    here = Path(__file__).resolve().parents[1]  # the rlinf_algos package
    frames = []
    tb = err.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    if path is not None:
        mine = [f for f in frames if Path(f[0]) == Path(path)]
        if mine:
            return f" at {mine[-1][0]}:{mine[-1][1]}"
    other = [f for f in frames if not f[0].startswith(str(here)) and not f[0].startswith("<")]
    return f" at {other[-1][0]}:{other[-1][1]}" if other else ""


def _short(text: str, limit: int = 120) -> str:
    text = str(text)
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    return f"{text[:head]}...{text[-(limit - head - 3) :]}"


def reload_reward(cfg: dict[str, Any], root: str | None) -> ScoreFn:
    """:func:`load_reward` of a ``reward`` section given as plain data (what travels between
    processes)."""
    return load_reward(RewardConfig.model_validate(cfg), root=root)


_reload = reload_reward


# -- loading ------------------------------------------------------------------------------------


def load_reward(cfg: RewardConfig, *, root: str | Path | None = None, plugins: Any = None) -> ScoreFn:
    """The :class:`ScoreFn` of the ``reward`` section.

    Args:
        cfg: the validated ``reward`` section.
        root: the directory a relative ``reward.path`` is resolved against (the run YAML's
            directory); default the current directory.
        plugins: the :class:`~rlinf_core.plugins.PluginHost` whose ``rewards`` registry names
            are looked up in; default one loaded from the installed entry points (rlinf-algos'
            built-ins resolve without it).

    Returns:
        ``score(completions, samples) -> list[float]``.

    Raises:
        ConfigError: ``reward.path``: the file does not exist or fails to import (one line with
            the exception); ``reward.name``: the file has no such function (the message lists
            its callables), its signature is neither verl's nor TRL's, or no reward of that
            name is registered; ``reward.kwargs``: the registered reward does not accept them.
    """
    base = Path(root) if root is not None else None
    name = str(cfg.name)
    if cfg.path is None:
        return _registered(cfg, base, name, plugins)
    path = Path(cfg.path).expanduser()
    if not path.is_absolute():
        path = (base or Path.cwd()) / path
    module = _import_file(path)
    cfg = cfg.model_copy(update={"path": str(path)})  # a pickled ScoreFn reloads this very file
    obj = getattr(module, name, None)
    if obj is None:
        have = [
            k
            for k, v in vars(module).items()
            if callable(v) and not k.startswith("_") and getattr(v, "__module__", None) == module.__name__
        ]
        raise ConfigError(
            f"{path} has no {name!r}; its callables: {', '.join(have) or 'none'} "
            "(set reward.name to one of them)",
            "reward.name",
        )
    label = f"{name!r} from {path}"
    if isinstance(obj, type):
        if issubclass(obj, RewardFunction):
            return ScoreFn(cfg, base, "registered", _instantiate(obj, cfg.kwargs, name), label)
        raise ConfigError(
            f"{label} is a class; reward.name must name a function or a rlinf_core.reward.RewardFunction subclass",
            "reward.name",
        )
    if not callable(obj):
        raise ConfigError(f"{label} is a {type(obj).__name__}, not a function", "reward.name")
    try:
        params = inspect.signature(obj).parameters
    except (TypeError, ValueError):
        raise ConfigError(f"{label}: cannot read its signature", "reward.name") from None
    names = {p.name for p in params.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
    accepts = None if var_kw else frozenset(names)
    unknown = sorted(set(cfg.kwargs) - names) if accepts is not None else []
    if unknown:
        raise ConfigError(
            f"{label} takes no {', '.join(map(repr, unknown))}; its parameters: {', '.join(params)}",
            "reward.kwargs",
        )
    if "solution_str" in names or {"data_source", "ground_truth"} <= names:
        return ScoreFn(cfg, base, "verl", obj, label, accepts)
    if "completions" in names or var_kw:
        return ScoreFn(cfg, base, "trl", obj, label, accepts)
    raise ConfigError(
        f"{label}{inspect.signature(obj)} is neither verl's compute_score(data_source, solution_str, "
        "ground_truth, extra_info=None) nor a TRL-style (completions, **kwargs) -> list[float]; rename "
        "its parameters to one of those",
        "reward.name",
    )


def _registered(cfg: RewardConfig, base: Path | None, name: str, plugins: Any) -> ScoreFn:
    cls: type[RewardFunction] | None = None
    if plugins is not None:
        try:
            cls = plugins.rewards.get(name)
        except PluginError as err:
            if name.casefold() not in BUILTIN_REWARDS:
                raise ConfigError(f"{err}; or set reward.path to a file", "reward.name") from None
    if cls is None:
        cls = BUILTIN_REWARDS.get(name.casefold())
    if cls is None:
        try:
            cls = _installed_rewards().get(name)
        except PluginError as err:
            raise ConfigError(f"{err}; or set reward.path to a file", "reward.name") from None
    return ScoreFn(cfg, base, "registered", _instantiate(cls, cfg.kwargs, name), repr(name))


@functools.cache
def _installed_rewards() -> Any:
    from rlinf_core.plugins import load_plugins

    return load_plugins().rewards


def _instantiate(cls: type[RewardFunction], kwargs: Mapping[str, Any], name: str) -> RewardFunction:
    try:
        inspect.signature(cls).bind(**kwargs)
    except TypeError as err:
        try:
            takes = ", ".join(p for p in inspect.signature(cls).parameters if p not in ("args", "kwargs"))
        except (TypeError, ValueError):
            takes = "?"
        raise ConfigError(
            f"reward {name!r} does not accept these arguments ({err}); it takes: {takes or 'none'}",
            "reward.kwargs",
        ) from None
    try:
        return cls(**kwargs)
    except (TypeError, ValueError, RlinfError) as err:
        raise ConfigError(f"reward {name!r}: {type(err).__name__}: {err}", "reward.kwargs") from None


def _import_file(path: Path) -> Any:
    if not path.exists():
        raise ConfigError(f"file not found: {path}", "reward.path")
    if not path.is_file():
        raise ConfigError(f"{path} is not a file", "reward.path")
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    mod_name = f"rlinf_user_reward_{re.sub(r'[^0-9a-zA-Z_]', '_', path.stem)}_{digest}"
    loader = importlib.machinery.SourceFileLoader(mod_name, str(path))
    spec = importlib.util.spec_from_loader(mod_name, loader)
    if spec is None:
        raise ConfigError(f"{path}: cannot be imported as Python source", "reward.path")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module  # dataclasses and pickling inside the file need it
    try:
        loader.exec_module(module)
    except BaseException as err:
        sys.modules.pop(mod_name, None)
        if isinstance(err, KeyboardInterrupt):
            raise
        if isinstance(err, SyntaxError):
            where = f"line {err.lineno}: " if err.lineno else ""
            raise ConfigError(
                f"{path}: import failed: SyntaxError: {where}{err.msg}", "reward.path"
            ) from None
        detail = str(err).strip().splitlines()[0] if str(err).strip() else ""
        line = _line_in(err, path)
        raise ConfigError(
            f"{path}: import failed{line}: {type(err).__name__}{': ' + detail if detail else ''}",
            "reward.path",
        ) from None
    return module


def _line_in(err: BaseException, path: Path) -> str:
    tb = err.__traceback__
    line = None
    while tb is not None:
        if Path(tb.tb_frame.f_code.co_filename) == path:
            line = tb.tb_lineno
        tb = tb.tb_next
    return f" at line {line}" if line else ""
