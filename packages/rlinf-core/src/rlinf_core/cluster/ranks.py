"""Rank expressions: ``N``, ``A-B`` (inclusive), comma lists of these and ``all``.

Used for node ranks (``node_groups[].node_ranks``), env-config node ranks, inventories and, in a
restricted single-member form, the resource and process ranks of placement strings. A YAML int and
a YAML list of ints or strings are accepted too. Every member is checked, and every problem is
reported, not only the first.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from rlinf_core.errors import ConfigError, ConfigProblem, join_path

__all__ = ["RANK_EXPR_HELP", "compress_ranks", "parse_rank_expr", "rank_expr_problems"]

RANK_EXPR_HELP = "a rank expression such as 3, 0-7, '0-3,8,10-11', all, or a list of these"

MAX_RANKS = 10_000_000
"""The most ranks one range may expand to when no bound is known (guards against ``0-999999999``)."""

_NUM = re.compile(r"^\d+$")
_RANGE = re.compile(r"^(\d+)\s*-\s*(\d+)$")
_NEG = re.compile(r"^-\s*\d+$")


def _bound_text(size: int) -> str:
    return f"0..{size - 1}" if size > 0 else "an empty range (there are no ranks)"


def _check(rank: int, size: int | None, what: str, path: str, problems: list[ConfigProblem]) -> bool:
    if size is not None and rank >= size:
        problems.append(ConfigProblem(path, f"{what} {rank} is outside {_bound_text(size)}"))
        return False
    return True


def _parse_token(
    token: str, size: int | None, what: str, path: str, problems: list[ConfigProblem], allow_all: bool
) -> list[int]:
    text = token.strip()
    if not text:
        problems.append(ConfigProblem(path, f"empty member in rank expression (expected {RANK_EXPR_HELP})"))
        return []
    if text.casefold() == "all":
        if not allow_all:
            problems.append(ConfigProblem(path, f"'all' is not allowed here (expected {RANK_EXPR_HELP})"))
            return []
        if size is None:
            problems.append(ConfigProblem(path, "'all' needs a known number of ranks here"))
            return []
        return list(range(size))
    if _NUM.match(text):
        n = int(text)
        return [n] if _check(n, size, what, path, problems) else []
    m = _RANGE.match(text)
    if m:
        a, b = int(m.group(1)), int(m.group(2))
        if b < a:
            problems.append(ConfigProblem(path, f"range {a}-{b} is descending; write {b}-{a}"))
            return []
        if size is not None and b >= size:
            first = max(a, size)
            bad = f"{what} {b} is" if first == b else f"{what}s {first}-{b} are"
            where = "" if a == b else f"range {a}-{b}: "
            problems.append(ConfigProblem(path, f"{where}{bad} outside {_bound_text(size)}"))
            return []
        if b - a >= MAX_RANKS:
            problems.append(ConfigProblem(path, f"range {a}-{b} has more than {MAX_RANKS} ranks"))
            return []
        return list(range(a, b + 1))
    if _NEG.match(text) or re.match(r"^\d+\s*-\s*-\s*\d+$", text):
        problems.append(ConfigProblem(path, f"{what}s cannot be negative (got {text!r})"))
        return []
    problems.append(ConfigProblem(path, f"{text!r} is not a rank or range (expected {RANK_EXPR_HELP})"))
    return []


def rank_expr_problems(
    value: Any,
    size: int | None = None,
    *,
    path: str = "",
    what: str = "rank",
    allow_all: bool = True,
    allow_duplicates: bool = False,
) -> tuple[list[int], list[ConfigProblem]]:
    """Parse a rank expression, returning ``(ranks, problems)`` instead of raising.

    ``ranks`` are sorted and unique (members with problems are left out). ``size`` bounds the
    ranks to ``0..size-1`` (``None``: unbounded, and ``all`` is then an error). ``what`` names a
    rank in messages (``"rank"``, ``"node rank"``). Duplicates are a problem unless
    ``allow_duplicates``.
    """
    problems: list[ConfigProblem] = []
    found: list[int] = []
    if isinstance(value, bool) or value is None or isinstance(value, float):
        problems.append(ConfigProblem(path, f"expected {RANK_EXPR_HELP}, got {value!r}"))
        return [], problems
    if isinstance(value, int):
        if value < 0:
            problems.append(ConfigProblem(path, f"{what}s cannot be negative (got {value})"))
        elif _check(value, size, what, path, problems):
            found.append(value)
    elif isinstance(value, str):
        if not value.strip():
            problems.append(ConfigProblem(path, f"the rank expression is blank (expected {RANK_EXPR_HELP})"))
        else:
            for token in value.split(","):
                found.extend(_parse_token(token, size, what, path, problems, allow_all))
    elif isinstance(value, list | tuple):
        if not value:
            problems.append(ConfigProblem(path, f"the rank list is empty (expected {RANK_EXPR_HELP})"))
        for i, item in enumerate(value):
            sub_path = join_path(path, f"[{i}]")
            if isinstance(item, list | tuple):
                problems.append(
                    ConfigProblem(sub_path, f"nested lists are not rank expressions (got {item!r})")
                )
                continue
            sub, sub_problems = rank_expr_problems(
                item, size, path=sub_path, what=what, allow_all=allow_all, allow_duplicates=True
            )
            problems.extend(sub_problems)
            found.extend(sub)
    else:
        problems.append(ConfigProblem(path, f"expected {RANK_EXPR_HELP}, got {type(value).__name__}"))
        return [], problems
    ranks = sorted(set(found))
    if not allow_duplicates and len(ranks) != len(found):
        seen: set[int] = set()
        dups: set[int] = set()
        for r in found:
            (dups if r in seen else seen).add(r)
        problems.append(ConfigProblem(path, f"{what}s listed more than once: {compress_ranks(sorted(dups))}"))
    return ranks, problems


def parse_rank_expr(
    value: Any,
    size: int | None = None,
    *,
    path: str = "",
    what: str = "rank",
    allow_all: bool = True,
    allow_duplicates: bool = False,
) -> list[int]:
    """The sorted, unique ranks of a rank expression; :class:`ConfigError` listing every problem.

    >>> parse_rank_expr("0-3, 8", 10)
    [0, 1, 2, 3, 8]
    >>> parse_rank_expr(["0-1", 5], 6)
    [0, 1, 5]
    >>> parse_rank_expr("all", 3)
    [0, 1, 2]

    Accepted: a YAML int, a string of comma-separated members (``N``, ``A-B`` inclusive, ``all``;
    whitespace allowed), or a list of ints/strings. Negative ranks, descending ranges, blank members
    and anything outside ``0..size-1`` are rejected, every member checked.
    """
    ranks, problems = rank_expr_problems(
        value, size, path=path, what=what, allow_all=allow_all, allow_duplicates=allow_duplicates
    )
    if problems:
        raise ConfigError(problems)
    return ranks


def compress_ranks(ranks: Sequence[int]) -> str:
    """Render ranks compactly: ``[0, 1, 2, 5, 7, 8]`` -> ``"0-2,5,7-8"`` (order kept; runs of +1)."""
    if not ranks:
        return ""
    out: list[str] = []
    start = prev = ranks[0]
    for r in ranks[1:]:
        if r == prev + 1:
            prev = r
            continue
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
        start = prev = r
    out.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ",".join(out)
