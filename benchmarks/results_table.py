"""Generate ``benchmarks/RESULTS.md`` from every ``benchmarks/results/*.json``: the one place where
measured figures are read, each with the date, the machine and the command that produced it.

Two kinds of file are understood:

- **Records** (figures moved out of the READMEs, or written by hand after a run): a JSON object
  with ``title``, ``date``, ``machine``, ``command`` (a string or a list), ``seeds``, ``figures``
  (a list of rows, each an object of column -> value), ``source``, ``notes`` (a string or a list),
  and optionally ``conditions`` (load, other jobs), ``reproduced`` (``false`` with
  ``reproduction`` saying what a re-run gave) and ``group`` (files with one group share a section).
- **Benchmark reports** as ``benchmarks/_report.py`` writes them (``machine`` block, ``wall_s``,
  and a ``sac`` / ``ppo`` section from ``benchmarks/learning.py``); other reports are shown as a
  list of their numeric figures. ``title``, ``date``, ``command`` and ``notes`` at the top level
  are used when present.

Files whose names differ only by a ``_runN`` suffix (``..._run2.json``) form one section, as do
files with the same ``group``. A field a file does not have is shown as "not recorded", never
guessed.

Usage::

    uv run python benchmarks/results_table.py            # rewrite benchmarks/RESULTS.md
    uv run python benchmarks/results_table.py --check    # exit 1 if RESULTS.md is stale

Only the standard library is used.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS_DIR = HERE / "results"
OUTPUT = HERE / "RESULTS.md"
NOT_RECORDED = "not recorded"


class ResultsError(Exception):
    """A result file cannot be read or has the wrong shape; the message names the file."""


@dataclass
class Entry:
    file: str
    group: str
    title: str
    meta: dict[str, str]
    notes: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] | None = field(default_factory=list)
    body: list[str] = field(default_factory=list)  # figures that are not one list of rows


# -- formatting -----------------------------------------------------------------------------------


def cell(value: Any, spec: str | None = None) -> str:
    """One table cell: ``-`` for a missing figure; numbers with thousands separators."""
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float) and spec:
        return format(value, spec)
    if isinstance(value, int | float):
        return format(value, ",")
    if isinstance(value, list | dict):
        value = json.dumps(value)
    return " ".join(str(value).split()).replace("|", "\\|")


def table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return ["No figures."]
    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]
    lines = ["| " + " | ".join(cell(c) for c in columns) + " |", "|" + " --- |" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(cell(row.get(c)) for c in columns) + " |")
    return lines


_SCALAR = (str, int, float, bool, type(None))
_META_KEYS = ("command", "date", "machine", "load_average", "conditions", "seeds", "notes")


def _label(key: str) -> str:
    return key.replace("_", " ")


def nested(value: Any, path: tuple[str, ...] = ()) -> list[str]:
    """Any JSON value as markdown: a list of objects is a table, an object of objects a table
    with a row per key, an object's scalars a figure/value table, what is nested below it a
    bold-captioned block of its own. ``command``, ``load_average``, ``notes``... are lines."""
    if isinstance(value, list):
        if value and all(
            isinstance(r, dict) and all(isinstance(v, (*_SCALAR, list)) for v in r.values()) for r in value
        ):
            return table(value)
        return [cell(value)]
    if not isinstance(value, dict):
        return [cell(value)]
    lines: list[str] = []
    meta = {k: v for k, v in value.items() if k in _META_KEYS and isinstance(v, (*_SCALAR, list))}
    for k, v in meta.items():
        text = _command(v) if k == "command" else cell(v)
        lines.append(f"- {_label(k)}: {text}")
    rest = {k: v for k, v in value.items() if k not in meta}
    scalars = {
        k: v
        for k, v in rest.items()
        if isinstance(v, _SCALAR) or (isinstance(v, list) and all(isinstance(x, _SCALAR) for x in v))
    }
    if scalars:
        lines += (
            ["", *table([{"figure": _label(k), "value": v} for k, v in scalars.items()])]
            if lines
            else table([{"figure": _label(k), "value": v} for k, v in scalars.items()])
        )
    others = {k: v for k, v in rest.items() if k not in scalars}
    flat_children = others and all(
        isinstance(v, dict) and all(isinstance(x, _SCALAR) for x in v.values()) for v in others.values()
    )
    if flat_children and not scalars and not meta and path:
        return table([{"": _label(k), **v} for k, v in others.items()])
    for k, v in others.items():
        if lines:
            lines.append("")
        sub = (*path, _label(k))
        if k == "rows":  # a table of the block above: no caption of its own
            lines += nested(v, sub)
        else:
            lines += [f"**{' / '.join(sub)}**", "", *nested(v, sub)]
    return lines


def _text(value: Any) -> str:
    if value is None or value == "" or value == []:
        return NOT_RECORDED
    if isinstance(value, list):
        return "; ".join(f"`{v}`" for v in value) if all(isinstance(v, str) for v in value) else str(value)
    return str(value)


def _command(value: Any) -> str:
    if value is None or value == "" or value == []:
        return NOT_RECORDED
    commands = value if isinstance(value, list) else [value]
    return "; ".join(f"`{c}`" for c in commands)


def _seeds(value: Any) -> str:
    if value is None or value == []:
        return NOT_RECORDED
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


def _notes(value: Any) -> list[str]:
    if not value:
        return []
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def group_of(stem: str) -> str:
    return re.sub(r"_run\d+$", "", stem)


# -- the two kinds of file ------------------------------------------------------------------------


def _record(name: str, data: dict[str, Any]) -> Entry:
    figures = data.get("figures")
    rows: list[dict[str, Any]] | None = None
    body: list[str] = []
    if isinstance(figures, list) and all(isinstance(r, dict) for r in figures):
        rows = figures
    elif isinstance(figures, dict | list):
        body = nested(figures)
    else:
        raise ResultsError(
            f"{name}: 'figures' must be a list of rows (objects of column -> value) or an object"
        )
    meta = {
        "date": _text(data.get("date")),
        "machine": _machine_text(data.get("machine")),
        "conditions": _text(data.get("conditions")) if data.get("conditions") else "",
        "command": _command(data.get("command")),
        "seeds": _seeds(data.get("seeds")),
        "source": _text(data.get("source")),
    }
    if data.get("reproduced") is False:
        meta["reproduced"] = "**no**" + (f": {data['reproduction']}" if data.get("reproduction") else "")
    elif data.get("reproduced") is True:
        meta["reproduced"] = "yes" + (f": {data['reproduction']}" if data.get("reproduction") else "")
    stem = Path(name).stem
    return Entry(
        name,
        str(data.get("group") or group_of(stem)),
        str(data.get("title") or stem),
        meta,
        _notes(data.get("notes")),
        rows,
        body,
    )


def _machine_text(m: Any) -> str:
    if not isinstance(m, dict):
        return _text(m)
    parts = [str(m["description"])] if m.get("description") else []
    if m.get("cpus"):
        parts.append(f"{m['cpus']} CPUs")
    if m.get("python"):
        parts.append(f"Python {m['python']}")
    versions = m.get("versions") or {}
    found = [f"{k} {v}" for k, v in versions.items() if v]
    if found:
        parts.append(", ".join(found))
    return "; ".join(parts) or NOT_RECORDED


def _load_text(data: dict[str, Any]) -> str:
    m = data.get("machine") if isinstance(data.get("machine"), dict) else {}
    start, end = m.get("load_at_start"), m.get("load_at_end")
    parts = []
    if start:
        parts.append(f"load average {start[0]:.1f} at the start")
    if end:
        parts.append(f"{end[0]:.1f} at the end")
    if isinstance(data.get("wall_s"), int | float):
        parts.append(f"the report's `wall_s` {data['wall_s']:.0f} s")
    return ", ".join(parts)


def _sac_rows(sac: dict[str, Any], run: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for s in sac.get("seeds", []):
        for peer in ("rlinf", "sb3"):
            p = s.get(peer)
            if not isinstance(p, dict):
                continue
            rows.append(
                {
                    "run": run,
                    "seed": s.get("seed"),
                    "peer": "SB3" if peer == "sb3" else peer,
                    "at step": cell(s.get("compared_at_step")),
                    "return, last 10k steps": cell(p.get("return_last_10k"), ",.0f"),
                    "eval return, final policy": cell(p.get("final_eval_return"), ",.0f"),
                    "env-steps/s (learning)": cell(p.get("sps"), ".1f"),
                    "env-steps per CPU-s": cell(p.get("steps_per_cpu_s"), ".1f"),
                    "rlinf / SB3 env-steps/s": cell(s.get("sps_ratio"), ".2f") if peer == "rlinf" else "",
                }
            )
    summary = sac.get("summary") or {}
    if len(sac.get("seeds", [])) > 1:
        for peer in ("rlinf", "sb3"):
            p = summary.get(peer)
            if not isinstance(p, dict):
                continue
            ret = cell(p.get("return_last_10k"), ",.0f")
            if p.get("return_last_10k_std") is not None:
                ret += f" +- {p['return_last_10k_std']:,.0f}"
            rows.append(
                {
                    "run": run,
                    "seed": "mean",
                    "peer": "SB3" if peer == "sb3" else peer,
                    "return, last 10k steps": ret,
                    "eval return, final policy": cell(p.get("final_eval_return"), ",.0f"),
                    "env-steps/s (learning)": cell(p.get("sps"), ".1f"),
                    "rlinf / SB3 env-steps/s": (
                        cell(summary.get("sps_ratio_mean"), ".2f") if peer == "rlinf" else ""
                    ),
                }
            )
    return rows


def _ppo_rows(ppo: dict[str, Any], run: str) -> list[dict[str, Any]]:
    rows = []
    for s in ppo.get("seeds", []):
        rows.append(
            {
                "run": run,
                "seed": s.get("seed"),
                "env steps": cell(s.get("steps")),
                "final return": cell(s.get("final_return"), ",.0f"),
                "eval return": cell(s.get("eval_return"), ",.0f"),
                "best return": cell(s.get("best_return"), ",.0f"),
                "env-steps/s": cell(s.get("sps"), ".1f"),
                "env-steps per CPU-s": cell(s.get("steps_per_cpu_s"), ".1f"),
                "error": s.get("error", ""),
            }
        )
    return rows


def _flatten(prefix: str, value: Any, out: list[dict[str, Any]]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        out.append({"figure": prefix, "value": value})


def _short(value: Any) -> Any:
    """A measured float to four significant digits (a table of timings, not of exact values)."""
    return float(f"{value:.4g}") if isinstance(value, float) else value


_REPORT_META = ("machine", "wall_s", "title", "date", "command", "notes", "group", "seeds")


def _report(name: str, data: dict[str, Any]) -> Entry:
    stem = Path(name).stem
    run = stem
    rows: list[dict[str, Any]] = []
    settings: list[str] = []
    if isinstance(data.get("sac"), dict):
        rows += _sac_rows(data["sac"], run)
        s = data["sac"].get("settings") or {}
        if s:
            settings.append(
                f"SAC settings: config `{s.get('config')}`, peers run {s.get('layout')}, "
                f"SB3 torch threads {s.get('sb3_threads')}; rlinf overrides "
                + ", ".join(f"`{o}`" for o in s.get("overrides", []))
            )
    if isinstance(data.get("ppo"), dict):
        rows += _ppo_rows(data["ppo"], run)
    own_rows = data.get("rows")
    if not rows and isinstance(own_rows, list) and own_rows and all(isinstance(r, dict) for r in own_rows):
        # a report's own table (a row per setting); objects inside a row become dotted columns
        for r in own_rows:
            flat: list[dict[str, Any]] = []
            for k, v in r.items():
                if isinstance(v, dict):
                    _flatten(k, v, flat)
                else:
                    flat.append({"figure": k, "value": v})
            rows.append({f["figure"]: _short(f["value"]) for f in flat})
        figures: list[dict[str, Any]] = []
        for k, v in data.items():
            if k not in (*_REPORT_META, "rows"):
                _flatten(k, v, figures)
        settings += [f"{f['figure']}: {cell(f['value'])}" for f in figures]
    if not rows:
        for k, v in data.items():
            if k not in _REPORT_META:
                _flatten(k, v, rows)
    seeds: Any = data.get("seeds")
    if seeds is None:
        seeds = sorted(
            {s.get("seed") for key in ("sac", "ppo") for s in (data.get(key) or {}).get("seeds", [])} - {None}
        )
    meta = {
        "date": _text(data.get("date")),
        "machine": _machine_text(data.get("machine")),
        "conditions": _load_text(data),
        "command": _command(data.get("command")),
        "seeds": _seeds(seeds),
        "source": _text(data.get("source")) if data.get("source") else "benchmark report (`--json`)",
    }
    if data.get("quick"):
        meta["conditions"] += ", `--quick`"
    return Entry(
        name,
        str(data.get("group") or group_of(stem)),
        str(data.get("title") or stem),
        meta,
        settings + _notes(data.get("notes")),
        rows,
    )


def load_entry(path: Path) -> Entry:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ResultsError(f"{path.name}: cannot read it as JSON: {err}") from None
    if not isinstance(data, dict):
        raise ResultsError(f"{path.name}: the top level must be an object")
    return _record(path.name, data) if "figures" in data else _report(path.name, data)


# -- the document ---------------------------------------------------------------------------------

META_LABELS = (
    ("date", "Date"),
    ("machine", "Machine"),
    ("conditions", "Conditions"),
    ("command", "Command"),
    ("seeds", "Seeds"),
    ("source", "Source"),
    ("reproduced", "Reproduced"),
)


def _meta_lines(entries: list[Entry]) -> list[str]:
    lines = []
    for key, label in META_LABELS:
        values = [e.meta.get(key, "") for e in entries]
        if not any(values):
            continue
        if len(set(values)) == 1:
            lines.append(f"- {label}: {values[0]}")
        else:
            lines.append(f"- {label}:")
            lines += [f"  - `{e.file}`: {v or NOT_RECORDED}" for e, v in zip(entries, values, strict=True)]
    return lines


def group_title(group: str, entries: list[Entry]) -> str:
    """The title of the file named after the group, else of the group's first file."""
    main = [e for e in entries if Path(e.file).stem == group]
    return (main or entries)[0].title


def render_group(group: str, entries: list[Entry]) -> list[str]:
    entries = sorted(entries, key=lambda e: Path(e.file).stem != group)  # the main file first
    lines = [f'<a id="{group}"></a>', "", f"## {group_title(group, entries)}", ""]
    lines.append("- Files: " + ", ".join(f"`results/{e.file}`" for e in entries))
    lines += _meta_lines(entries)
    tabular = all(e.rows is not None and not e.body for e in entries)
    columns = {tuple(dict.fromkeys(c for r in e.rows or [] for c in r)) for e in entries}
    if len(entries) == 1 or (tabular and len(columns) == 1):
        # one experiment, or runs of one experiment: the notes, then one table (a row per run)
        notes: list[str] = []
        for e in entries:
            notes += [n for n in e.notes if n not in notes]
        if notes:
            lines += ["", "Notes:", ""] + [f"- {' '.join(n.split())}" for n in notes]
        lines.append("")
        if len(entries) == 1 and not tabular:
            lines += entries[0].body
        elif len(entries) == 1:
            rows = entries[0].rows or []
            if len({str(r.get("run")) for r in rows}) <= 1:  # one run: its label says nothing
                rows = [{k: v for k, v in r.items() if k != "run"} for r in rows]
            lines += table(rows)
        else:
            rows = [
                r if "run" in r else {"run": Path(e.file).stem, **r} for e in entries for r in e.rows or []
            ]
            lines += table(rows)
        return [*lines, ""]
    for e in entries:  # related experiments: each its own table and notes
        lines += ["", f"### {e.title}", "", f"`results/{e.file}`", ""]
        lines += table(e.rows) if e.rows is not None else e.body
        if e.notes:
            lines += ["", *(f"- {' '.join(n.split())}" for n in e.notes)]
    return [*lines, ""]


def render(results_dir: Path = RESULTS_DIR) -> str:
    paths = sorted(results_dir.glob("*.json"))
    entries = [load_entry(p) for p in paths]
    groups: dict[str, list[Entry]] = {}
    for e in entries:
        groups.setdefault(e.group, []).append(e)
    out = [
        "# Benchmark results",
        "",
        "<!-- Generated by `uv run python benchmarks/results_table.py` from benchmarks/results/*.json; "
        "do not edit by hand (`--check` fails when this file is stale). -->",
        "",
        "Every measured figure of the project, one section per experiment, generated from the JSON files "
        "in [`results/`](results/). Each section says when, on what machine and with which command the "
        f'figures were produced; "{NOT_RECORDED}" means the source did not say. Figures moved from a '
        "README name it as their source. Most figures come from a shared 2-core development machine "
        "with other jobs running: read the wall-clock ones as rough and compare figures only within a "
        "section.",
        "",
        "| experiment | date | files |",
        "| --- | --- | --- |",
    ]
    for group, es in groups.items():
        title = group_title(group, es)
        dates = sorted({e.meta["date"] for e in es})
        flag = " (not reproduced)" if any(e.meta.get("reproduced", "").startswith("**no") for e in es) else ""
        out.append(f"| [{cell(title)}](#{group}){flag} | {', '.join(dates)} | {len(es)} |")
    out.append("")
    for group, es in groups.items():
        out += render_group(group, es)
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the output file is stale")
    ap.add_argument("--results", type=Path, default=RESULTS_DIR, help="folder of result JSON files")
    ap.add_argument("--output", type=Path, default=OUTPUT, help="the markdown file to write or check")
    args = ap.parse_args(argv)
    try:
        text = render(args.results)
    except ResultsError as err:
        print(f"{args.results}/{err}", file=sys.stderr)
        return 1
    current = args.output.read_text(encoding="utf-8") if args.output.exists() else None
    if args.check:
        if current != text:
            what = "is missing" if current is None else "is stale (a results JSON changed)"
            print(
                f"{args.output} {what}; run `uv run python benchmarks/results_table.py` and commit it",
                file=sys.stderr,
            )
            return 1
        print(f"{args.output} is up to date")
        return 0
    if current != text:
        args.output.write_text(text, encoding="utf-8")
        print(f"wrote {args.output}")
    else:
        print(f"{args.output} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
