"""How much of the pipeline's time is the database's: the ceiling of the pipeline for
the statements the commit protocol sends today, if Oversight's own Python took no time.

One worker, in this process, carries out N auto-approved ledger transfers (prepared as
``bench/worker_drain.py`` prepares them), and every statement it sends, with its
values, and every commit, is recorded. The same statements are then sent again, in the
same order, to a copy of the database taken before the drain, through the bare driver
with nothing in between: the database's own time for the same work. The replay must
leave the copy as the drain left the database (the same operations committed, the same
ledger entries, the same last checkpoint hash), or the bench fails. Uses a throwaway
SQLite file, or DATABASE_URL's database (copied with ``CREATE DATABASE … TEMPLATE``,
so nothing else may be connected to it).

    .venv/bin/python bench/database_share.py [--operations 300]
"""

import argparse
import os
import re
import shutil
import sys
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.environment import start_django

start_django()

from django.core.management import call_command  # noqa: E402
from django.db import connection, connections  # noqa: E402

from bench.report import Figures, add_json_option  # noqa: E402
from bench.worker_drain import prepare  # noqa: E402
from runs.engine.worker import Worker  # noqa: E402
from runs.models import Checkpoint, LedgerEntry, Operation  # noqa: E402

COMMIT, ROLLBACK = "commit", "rollback"  # In the recorded sequence, between statements.


def drain_recording(operations: int, sent: list) -> tuple[int, float]:
    """One worker carries out ``operations``; ``sent`` receives each statement it sends
    (with whether it ran outside a transaction, which commits it alone), each commit
    and each rollback. Returns the steps that did work and the seconds they took."""

    def record(execute, sql, params, many, context):
        # SQLite's BEGIN IMMEDIATE is sent while Django still counts as in autocommit.
        alone = context["connection"].get_autocommit() and not sql.startswith("BEGIN")
        sent.append((sql, params, many, alone))
        return execute(sql, params, many, context)

    def recorded(marker, end):
        def ending():
            sent.append(marker)
            return end()

        return ending

    worker = Worker("database-share")
    connection.ensure_connection()
    connection._commit = recorded(COMMIT, connection._commit)
    connection._rollback = recorded(ROLLBACK, connection._rollback)
    try:
        with connection.execute_wrapper(record):
            started = time.perf_counter()
            steps = 0
            while steps < operations and worker.step():
                steps += 1
            return steps, time.perf_counter() - started
    finally:
        del connection._commit, connection._rollback


@contextmanager
def copy_of_database():
    """A second connection, to a copy of the database as it is now, under a name of
    its own (this process's): nothing of that name is there before, or overwritten."""
    settings = dict(connection.settings_dict)
    source = settings["NAME"]
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        connection.close()
        settings["NAME"] = f"{source}.share-{os.getpid()}"
        with open(source, "rb") as original, open(settings["NAME"], "xb") as copy:
            shutil.copyfileobj(original, copy)
    else:
        connection.close()
        settings["NAME"] = f"oversight_share_{os.getpid()}"
        with connection._nodb_cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{settings["NAME"]}" TEMPLATE "{source}"')
    connections.settings["copy"] = settings
    try:
        yield connections["copy"]
    finally:
        connections["copy"].close()
        del connections["copy"]
        del connections.settings["copy"]
        if connection.vendor == "sqlite":
            Path(settings["NAME"]).unlink()
        else:
            with connection._nodb_cursor() as cursor:
                cursor.execute(f'DROP DATABASE "{settings["NAME"]}"')


def replay(sent: list, copy) -> tuple[float, dict[str, float]]:
    """Send ``sent`` to ``copy`` through the driver's own cursor (the placeholders
    converted as Django's backend converts them, nothing else), ending transactions
    where the drain ended them. Returns the seconds it took and the seconds of each
    kind of statement."""
    copy.ensure_connection()
    driver = copy.connection
    if copy.vendor == "postgresql":
        driver.autocommit = False  # Transactions begin implicitly, as Django's did.
    else:
        driver.isolation_level = None  # The recorded BEGIN IMMEDIATE begins them.
    cursor = copy.create_cursor()
    kinds: dict[str, float] = defaultdict(float)
    started = time.perf_counter()
    for statement in sent:
        before = time.perf_counter()
        if statement == COMMIT:
            driver.commit()
        elif statement == ROLLBACK:
            driver.rollback()
        if statement in (COMMIT, ROLLBACK):
            kinds[statement.upper()] += time.perf_counter() - before
            continue
        sql, params, many, alone = statement
        if many:
            cursor.executemany(sql, params)
        else:
            cursor.execute(sql, params)
            if cursor.description:
                cursor.fetchall()
        if alone:  # Outside a transaction in the drain: committed by itself there.
            driver.commit()
        kinds[_kind(sql)] += time.perf_counter() - before
    return time.perf_counter() - started, kinds


def _kind(sql: str) -> str:
    """A statement's verb and table: ``INSERT runs_checkpoint``."""
    verb = sql.split(None, 1)[0].upper()
    table = re.search(r'(?:FROM|INTO|UPDATE) "(\w+)"', sql)
    return f"{verb} {table.group(1)}" if table else verb


def outcome(project, ids: list[int], using: str) -> tuple[int, int, str]:
    """What the drain left: operations committed, ledger entries, the last hash."""
    committed = Operation.objects.using(using).filter(pk__in=ids, status="committed").count()
    entries = LedgerEntry.objects.using(using).filter(project=project).count()
    last = Checkpoint.objects.using(using).order_by("-pk").values_list("hash", flat=True)[0]
    return committed, entries, last


def main() -> None:
    parser = add_json_option(argparse.ArgumentParser())
    parser.add_argument("--operations", type=int, default=300)
    args = parser.parse_args()
    figures = Figures(__file__, args)
    call_command("migrate", verbosity=0)
    print(f"database: {connection.vendor} {connection.settings_dict['NAME']}")
    project, ids = prepare(args.operations, hot=False)
    sent: list = []
    with copy_of_database() as copy:
        steps, elapsed = drain_recording(len(ids), sent)
        figures.limit()  # Between the drain and the replay: this machine's disk wanders.
        figures.add("one worker: operations", steps, "operations")
        rate = figures.add("one worker", steps / elapsed, "ops/s")
        statements = len(sent) - sent.count(COMMIT) - sent.count(ROLLBACK)
        sql = figures.add("statements", statements / steps, "per operation")
        commits = figures.add("commits", sent.count(COMMIT) / steps, "per operation")
        print(
            f"one worker: {steps} transfers in {elapsed:6.2f} s = {rate:6.1f} ops/s "
            f"(ratio {figures.ratio('one worker', rate):.4f} of the limit); "
            f"{sql:.1f} statements and {commits:.1f} commits per transfer"
        )
        replayed, kinds = replay(sent, copy)
        committed, entries, last = outcome(project, ids, "default")
        if outcome(project, ids, copy.alias) != (committed, entries, last):
            raise SystemExit("the replay did not leave the copy as the drain left the database")
    print(
        f"the replay left the copy as the drain left the database: {committed} committed, "
        f"{entries} ledger entries, the same last checkpoint hash"
    )
    ceiling = figures.add("the same statements replayed", steps / replayed, "ops/s")
    ratio = figures.ratio("the same statements replayed", ceiling)
    print(
        f"the same statements replayed: {replayed / steps * 1000:5.2f} ms per transfer = "
        f"{ceiling:6.1f} ops/s (ratio {ratio:.4f} of the limit): the ceiling if "
        "Oversight's Python took no time"
    )
    print(f"the database's time, {replayed / steps * 1000:.2f} ms per transfer, by statement:")
    for kind, seconds in sorted(kinds.items(), key=lambda item: -item[1]):
        share = figures.add(f"replayed {kind}", seconds / steps * 1000, "ms per operation")
        print(f"  {kind:<32} {share:6.3f} ms")
    figures.write()


if __name__ == "__main__":
    main()
