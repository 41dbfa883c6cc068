"""Placement strings: ``res[:proc],res[:proc],...``.

``res`` is a resource rank, an inclusive range ``A-B`` or ``all`` (every resource of the selected
node group(s)); ``proc`` is a process rank or an inclusive range. When ``proc`` is left out the
part gets one process per resource, continuing from the previous part's last process + 1.

Rules (checked by :func:`expand_placement`, every problem reported):

- resource ranks are unique and ascending across parts;
- process ranks start at 0 and are contiguous and ascending across parts;
- in each part the number of processes divides the number of resources or the reverse. With at
  least as many resources as processes each process gets a contiguous block of ``#res/#proc``
  resources (``0-7:0-3``: two each); otherwise each resource is shared by ``#proc/#res``
  consecutive processes (``0-3:0-7``: processes 2k and 2k+1 on resource k).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rlinf_core.errors import ConfigError, ConfigProblem

__all__ = ["MAX_PROCESSES", "PLACEMENT_HELP", "PlacementPart", "expand_placement", "parse_placement"]

MAX_PROCESSES = 1_000_000
"""The most processes one placement may ask for (a guard against typos such as ``0:0-99999999``)."""

PLACEMENT_HELP = "a placement string such as '0-7', '0-3:0-7,4-7:8-9', 'all' or '0-1:0-199'"

_TOKEN = re.compile(r"^\s*(?:(?P<all>all)|(?P<a>\d+)(?:\s*-\s*(?P<b>\d+))?)\s*$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class PlacementPart:
    """One ``res[:proc]`` part. Ranges are inclusive ``(first, last)``; ``resources is None``
    means ``all``; ``processes is None`` means one process per resource, continuing."""

    text: str
    resources: tuple[int, int] | None
    processes: tuple[int, int] | None


def _range(token: str, *, allow_all: bool, what: str, part: str) -> tuple[tuple[int, int] | None, str | None]:
    m = _TOKEN.match(token)
    if not m:
        stripped = token.strip()
        if not stripped:
            return None, f"part {part!r}: the {what} ranks are empty"
        if stripped.startswith("-") or "--" in stripped:
            return None, f"part {part!r}: {what} ranks cannot be negative (got {stripped!r})"
        return None, f"part {part!r}: {stripped!r} is not a {what} rank, range (A-B) or 'all'"
    if m.group("all"):
        if not allow_all:
            return None, f"part {part!r}: 'all' is not allowed for {what} ranks; give a range such as 0-7"
        return None, None
    a = int(m.group("a"))
    b = int(m.group("b")) if m.group("b") is not None else a
    if b < a:
        return None, f"part {part!r}: {what} range {a}-{b} is descending; write {b}-{a}"
    return (a, b), None


def parse_placement(text: str | int, *, path: str = "") -> tuple[PlacementPart, ...]:
    """Parse the syntax of a placement string (no bounds known yet); :class:`ConfigError` listing
    every malformed part. An int (YAML ``placement: 0``) is read as its decimal string.

    >>> parse_placement("0-3:0-7,4")
    (PlacementPart(text='0-3:0-7', resources=(0, 3), processes=(0, 7)), PlacementPart(text='4', resources=(4, 4), processes=None))
    """
    if isinstance(text, bool) or not isinstance(text, str | int):
        raise ConfigError(f"expected {PLACEMENT_HELP}, got {text!r}", path)
    if isinstance(text, int):
        if text < 0:
            raise ConfigError(f"resource ranks cannot be negative (got {text})", path)
        text = str(text)
    if not text.strip():
        raise ConfigError(f"the placement string is blank (expected {PLACEMENT_HELP})", path)
    problems: list[ConfigProblem] = []
    parts: list[PlacementPart] = []
    raws = [raw.strip() for raw in text.split(",")]
    if not any(raws):
        raise ConfigError(f"the placement string {text!r} has no ranks (expected {PLACEMENT_HELP})", path)
    for part in raws:
        if not part:
            continue  # "0-1," or "0,,1": RLinf skips empty parts, and so does rlinf
        res_text, sep, proc_text = part.partition(":")
        if sep and ":" in proc_text:
            problems.append(ConfigProblem(path, f"part {part!r} has more than one ':' (expected res[:proc])"))
            continue
        res, err = _range(res_text, allow_all=True, what="resource", part=part)
        if err:
            problems.append(ConfigProblem(path, err))
        proc: tuple[int, int] | None = None
        if sep:
            proc, perr = _range(proc_text, allow_all=False, what="process", part=part)
            if perr:
                problems.append(ConfigProblem(path, perr))
                continue
        if not err:
            parts.append(PlacementPart(part, res, proc))
    if problems:
        raise ConfigError(problems)
    return tuple(parts)


def expand_placement(
    parts: Sequence[PlacementPart],
    num_resources: int,
    *,
    path: str = "",
    out_of_range_hint: Callable[[int], str] | None = None,
) -> tuple[list[tuple[int, ...]], list[ConfigProblem]]:
    """Assign resources to processes.

    Returns ``(assignment, problems)``: ``assignment[p]`` is the tuple of resource ranks of process
    ``p`` (process ranks are ``0..len(assignment)-1``); ``problems`` lists every rule broken (the
    assignment is then partial). ``out_of_range_hint(rank)`` adds an explanation to a
    past-the-end error (e.g. which nodes have no accelerators).
    """
    problems: list[ConfigProblem] = []
    assignment: list[tuple[int, ...]] = []
    prev_res_end = -1
    prev_res_text = ""
    next_proc = 0
    for part in parts:
        if part.resources is None:
            if num_resources == 0:
                problems.append(
                    ConfigProblem(path, f"part {part.text!r}: 'all' selects no resources; the group has none")
                )
                continue
            r0, r1 = 0, num_resources - 1
        else:
            r0, r1 = part.resources
        bad = False
        if r1 >= num_resources:
            first_bad = max(r0, num_resources)
            hint = out_of_range_hint(first_bad) if out_of_range_hint else ""
            where = f"0..{num_resources - 1}" if num_resources else "nothing (the selection has no resources)"
            problems.append(
                ConfigProblem(path, f"part {part.text!r}: resource rank {first_bad} is outside {where}{hint}")
            )
            bad = True
        if r0 <= prev_res_end:
            problems.append(
                ConfigProblem(
                    path,
                    f"part {part.text!r}: resource ranks must be unique and ascending across parts; "
                    f"{r0} does not come after {prev_res_end} (part {prev_res_text!r})",
                )
            )
            bad = True
        prev_res_end, prev_res_text = max(prev_res_end, r1), part.text
        n_res = r1 - r0 + 1
        if part.processes is None:
            p0, p1 = next_proc, next_proc + n_res - 1
        else:
            p0, p1 = part.processes
            if p0 != next_proc:
                expected = "start at 0" if next_proc == 0 else f"continue from {next_proc}"
                problems.append(
                    ConfigProblem(
                        path,
                        f"part {part.text!r}: process ranks must be contiguous and ascending from 0; "
                        f"this part must {expected}, not {p0}",
                    )
                )
                bad = True
        n_proc = p1 - p0 + 1
        next_proc = max(next_proc, p1 + 1)
        if next_proc > MAX_PROCESSES:
            problems.append(
                ConfigProblem(
                    path,
                    f"part {part.text!r}: the placement asks for {next_proc} processes; at most "
                    f"{MAX_PROCESSES} per component",
                )
            )
            break
        if n_res % n_proc and n_proc % n_res:
            problems.append(
                ConfigProblem(
                    path,
                    f"part {part.text!r}: {n_proc} processes on {n_res} resources; one count must divide "
                    f"the other (e.g. {n_res} or {n_res * 2} processes)",
                )
            )
            bad = True
        if bad or problems:
            continue
        if n_res >= n_proc:
            k = n_res // n_proc
            assignment.extend(tuple(range(r0 + i * k, r0 + (i + 1) * k)) for i in range(n_proc))
        else:
            m = n_proc // n_res
            assignment.extend((r0 + i // m,) for i in range(n_proc))
    return assignment, problems
