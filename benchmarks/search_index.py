"""How fast the built-in ``search`` tool indexes and answers: BM25 over generated documents.

Documents are short made-up encyclopaedia entries (``id``, ``title``, about 25 words of
``text``: who founded what, where they were born, what a place is known for), generated with a
fixed seed and written to a JSONL file first, so the figure includes reading the file as the tool
does at start. Measured: reading the file (``load_documents``), building the index
(``BM25Index``), and the latency of top-3 queries (p50 / p99 over a set of two-to-five-word
queries drawn from the same vocabulary). The issue's target is 100k documents indexed in under a
minute on the 2-core machine.

Usage::

    uv run python benchmarks/search_index.py [--quick] [--docs N] [--json benchmarks/results/search_index.json]

Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import finish, fmt, machine

from rlinf_algos.tools.search import BM25Index, load_documents

SYLLABLES = [
    "vel",
    "trix",
    "mor",
    "ada",
    "lyn",
    "kor",
    "zan",
    "pel",
    "qui",
    "dra",
    "sol",
    "mir",
    "tas",
    "ven",
    "bro",
]
NOUNS = [
    "company",
    "city",
    "river",
    "school",
    "guild",
    "orchestra",
    "bridge",
    "festival",
    "museum",
    "harbour",
]
VERBS = ["founded", "built", "named", "ran", "moved", "studied", "painted", "sold", "opened", "led"]


def name(rng: random.Random) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()


def documents(n: int, seed: int) -> list[dict[str, str]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        subject, other, place = name(rng), name(rng), name(rng)
        words = [
            f"{subject} is a {rng.choice(NOUNS)} in {place}.",
            f"It was {rng.choice(VERBS)} by {other} in {rng.randint(1700, 2020)}.",
            f"{other} was born in {name(rng)} and {rng.choice(VERBS)} the {rng.choice(NOUNS)} of {name(rng)}.",
            f"The {rng.choice(NOUNS)} is known for its {rng.choice(NOUNS)}.",
        ]
        out.append({"id": f"doc{i}", "title": subject, "text": " ".join(words)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="10k documents, 200 queries")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if args.quick:
        args.docs, args.queries = 10_000, 200
    t0 = time.perf_counter()
    report = {
        "title": "search tool: BM25 index build and query latency",
        "machine": machine(("numpy", "rlinf-algos")),
        "seeds": [args.seed],
        "docs": args.docs,
    }
    docs = documents(args.docs, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "docs.jsonl"
        path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
        report["file_mb"] = path.stat().st_size / 1e6
        t = time.perf_counter()
        rows = load_documents(path)
        report["read_s"] = time.perf_counter() - t
    t = time.perf_counter()
    index = BM25Index(rows)
    report["index_s"] = time.perf_counter() - t
    report["read_and_index_s"] = report["read_s"] + report["index_s"]
    report["vocabulary"] = len(index.vocab)
    report["postings"] = int(index.postings_doc.size)
    rng = random.Random(args.seed + 1)
    queries = [
        " ".join(rng.choice(docs)["text"].split()[j] for j in rng.sample(range(20), rng.randint(2, 5)))
        for _ in range(args.queries)
    ]
    lat = []
    for q in queries:
        t = time.perf_counter()
        index.search(q, k=3)
        lat.append(time.perf_counter() - t)
    lat.sort()
    report["query_p50_ms"] = statistics.median(lat) * 1e3
    report["query_p99_ms"] = lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1e3
    print(
        f"{'documents':>12} {'file MB':>8} {'read s':>8} {'index s':>8} {'vocab':>8} {'q p50 ms':>9} {'q p99 ms':>9}"
    )
    print(
        f"{args.docs:>12} {fmt(report['file_mb'], '.1f'):>8} {fmt(report['read_s'], '.2f'):>8} "
        f"{fmt(report['index_s'], '.2f'):>8} {report['vocabulary']:>8} {fmt(report['query_p50_ms'], '.2f'):>9} "
        f"{fmt(report['query_p99_ms'], '.2f'):>9}"
    )
    finish(report, t0, args.json)


if __name__ == "__main__":
    main()
