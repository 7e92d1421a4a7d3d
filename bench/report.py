"""What every benchmark shares: ``--json PATH``, which writes the figures a bench prints,
at its end, as one JSON document, and the limit the write paths are held to.

    {"bench": "feed", "database": "sqlite", "arguments": {"runs": 20, ...},
     "figures": [{"name": "raw durable commits", "value": 2371.4, "unit": "commits/s"}, ...]}

A bench collects each figure as it prints it (``Figures.add`` returns the value, for the
print); a bench with a limit also has the limit and each rate's ratio to it as figures.
"""

import argparse
import json
import time
from pathlib import Path

from django.db import connection, transaction


def add_json_option(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument(
        "--json",
        type=Path,
        metavar="PATH",
        help="also write the figures, at the end, to PATH as one JSON document",
    )
    return parser


def raw_commits_per_second(count: int = 500) -> float:
    """The limit the pipeline is measured against: durable commits of one small row
    each, one after another, on the same database with the same settings."""
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS bench_raw_commit (id INTEGER PRIMARY KEY)")
        cursor.execute("DELETE FROM bench_raw_commit")
    started = time.perf_counter()
    for n in range(count):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("INSERT INTO bench_raw_commit (id) VALUES (%s)", [n])
    elapsed = time.perf_counter() - started
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE bench_raw_commit")
    return count / elapsed


def percentile(values: list[float], p: int) -> float:
    """The smallest value with at least ``p`` percent of the values at or below it."""
    ordered = sorted(values)
    return ordered[max(0, -(-len(ordered) * p // 100) - 1)]


class Figures:
    """The figures one run of a bench prints, in order, for ``--json``."""

    def __init__(self, script: str, args: argparse.Namespace) -> None:
        self.bench = Path(script).stem
        self.args = args
        self.figures: list[dict] = []
        self.raw: float | None = None

    def add(self, name: str, value, unit: str | None):
        self.figures.append({"name": name, "value": value, "unit": unit})
        return value

    def limit(self) -> float:
        """Measure plain durable commits now, print and keep them: the limit."""
        self.raw = self.add("raw durable commits", raw_commits_per_second(), "commits/s")
        print(f"raw durable commits: {self.raw:7.1f} /s (one row per transaction; the limit)")
        return self.raw

    def ratio(self, name: str, rate: float) -> float:
        """``rate`` over the limit measured by ``limit()``, kept as ``"<name>: ratio to the
        limit"``."""
        return self.add(f"{name}: ratio to the limit", rate / self.raw, "ratio")

    def timed(self, label: str, count: int, unit: str, work, *, width: int, limited: bool = False):
        """Time ``work()``, which does ``count`` ``unit``; print one line, with the ratio
        to the limit if ``limited``, and keep its figures."""
        started = time.perf_counter()
        work()
        elapsed = time.perf_counter() - started
        self.add(f"{label}: {unit}", count, unit)
        self.add(f"{label}: seconds", elapsed, "s")
        rate = self.add(label, count / elapsed, f"{unit}/s")
        line = f"{label:<44} {count:>7} {unit:<{width}} {elapsed:7.2f} s  {rate:9.0f} {unit}/s"
        if limited:
            line += f"  (ratio {self.ratio(label, rate):.4f} of the limit)"
        print(line)

    def write(self) -> None:
        """Write the document to ``--json``'s path, if it was given."""
        if self.args.json is None:
            return
        document = {
            "bench": self.bench,
            "database": connection.vendor,
            "arguments": {name: v for name, v in vars(self.args).items() if name != "json"},
            "figures": self.figures,
        }
        self.args.json.write_text(json.dumps(document, indent=2) + "\n")
