"""How fast workers carry out approved operations: N ledger transfers (auto-approved by
policy) spread over runs, drained by W ``runworker --once`` processes; then a check
that every transfer was applied exactly once, beside the rate of plain durable commits
measured in the same run, and LangGraph's SqliteSaver writing checkpoints: a transfer
writes three, so its pace is a third of the saver's steps per second (#33's goal: half
that pace or better). Each run moves money between
accounts of its own, so that workers can go in parallel; ``--hot`` sends every transfer
between the same two accounts instead, to show that contention stays there. Uses a
throwaway SQLite file, or DATABASE_URL's database (into which it writes a bench project).

    .venv/bin/python bench/worker_drain.py [--operations 500] [--workers 1 2 4 8] [--hot]
        [--saver-steps 1500]
"""

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.environment import ROOT, start_django

start_django()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.db.models import Max, Min, Q, Sum  # noqa: E402

from bench.peer import put_steps, sqlite_saver  # noqa: E402
from bench.report import Figures, add_json_option, percentile  # noqa: E402
from runs.actors import Actor  # noqa: E402
from runs.clock import db_now  # noqa: E402
from runs.models import (  # noqa: E402
    Account,
    Checkpoint,
    LedgerEntry,
    Operation,
    Project,
    Run,
    WorkerHeartbeat,
)
from runs.services.proposals import propose_operation  # noqa: E402
from runs.services.runs import open_session, start_run  # noqa: E402
from runs.transitions import record_run_event  # noqa: E402

AGENT = Actor.agent("bench")
PER_RUN = 10


def prepare(operations: int, hot: bool) -> tuple[Project, list[int]]:
    suffix = str(time.time_ns())
    project = Project.objects.create(slug=f"drain-{suffix}", name="Drain bench")
    project.policies.create(action="ledger.transfer", approvals_required=0)
    owner = get_user_model().objects.create_user(f"owner-{suffix}")
    session = open_session(project=project, owner=owner, agent="bench")
    ids = []
    for r in range(0, operations, PER_RUN):
        run = start_run(session=session, goal=f"batch {r}", actor=AGENT)
        source, target = ("A", "B") if hot else (f"A{r}", f"B{r}")
        for name in {source, target} - set(project.accounts.values_list("name", flat=True)):
            balance = Decimal(operations if name == source else 0)
            Account.objects.create(project=project, name=name, balance=balance)
        for n in range(min(PER_RUN, operations - r)):
            run.refresh_from_db()
            op = propose_operation(
                run=run,
                call_id=f"t{n}",
                action="ledger.transfer",
                arguments={"from": source, "to": target, "amount": "1.00"},
                risk="low",
                rollback_kind="compensating",
                base_version=run.version,
                actor=AGENT,
            )
            ids.append(op.pk)
    return project, ids


def drain(workers: int) -> float:
    """Seconds for ``workers`` processes to drain the queue. Their log (a line per
    checkpoint, at the default level) is written as in production, and shown only if a
    worker fails."""
    with ExitStack() as files:
        started = time.perf_counter()
        processes = [start_worker(files, "--once") for _ in range(workers)]
        for process in processes:
            if process.wait() != 0:
                failed(process)
        return time.perf_counter() - started


def steady(workers: int, ids: list[int], beside: Run | None) -> tuple[float, list[float]]:
    """Seconds from the queue's opening to its last commit, with ``workers`` processes
    started and idle before it opens: contention alone, without their start. The queue
    is closed by handing its operations to an agent (``executor``), which no worker
    claims, and opened by handing them back in one statement. Meanwhile, if ``beside``
    (a run no worker touches) is given, every 20 ms a state change of it, as a
    reviewer's decision or an agent's message would write it: how long each took (ms),
    waiting for the database behind the workers' transactions included."""
    queue = Operation.objects.filter(pk__in=ids)
    queue.update(executor=Operation.Executor.AGENT)
    with ExitStack() as files:
        since = db_now()
        processes = [start_worker(files) for _ in range(workers)]
        try:
            while WorkerHeartbeat.objects.filter(seen_at__gte=since).count() < workers:
                for process in processes:
                    if process.poll() is not None:
                        failed(process)
                time.sleep(0.05)
            queue.update(executor=Operation.Executor.SERVER)
            opened = db_now()
            deadline = time.monotonic() + 300
            writes = []
            while True:
                if beside is not None:
                    started = time.perf_counter()
                    record_run_event(run=beside, actor=AGENT, event="bench.beside_the_drain")
                    writes.append((time.perf_counter() - started) * 1000)
                if not queue.exclude(status="committed").exists():
                    break
                if time.monotonic() > deadline:
                    raise SystemExit(f"{workers} worker(s) left transfers uncommitted")
                time.sleep(0.02)
        finally:
            for process in processes:
                process.send_signal(signal.SIGTERM)
            for process in processes:
                process.wait()
    last = Checkpoint.objects.filter(operation_id__in=ids, to_status="committed")
    return (last.aggregate(last=Max("created_at"))["last"] - opened).total_seconds(), writes


def steady_drain(workers: int, args, name: str, beside: bool = False):
    """``steady`` on a queue of its own, each transfer then checked applied once."""
    project, ids = prepare(args.operations, args.hot)
    run = start_run(session=project.sessions.first(), goal="beside", actor=AGENT)
    seconds, writes = steady(workers, ids, run if beside else None)
    if LedgerEntry.objects.filter(project=project).count() != len(ids):
        raise SystemExit(f"{name}: every transfer must be applied once")
    return seconds, writes


def start_worker(files: ExitStack, *options: str) -> subprocess.Popen:
    log = files.enter_context(tempfile.TemporaryFile("w+"))  # noqa: SIM115 (files closes it)
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "runworker", *options],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    process.log = log
    return process


def failed(process: subprocess.Popen):
    process.log.seek(0)
    raise SystemExit(f"a worker failed:\n{process.log.read()[-2000:]}")


def main() -> None:
    parser = add_json_option(argparse.ArgumentParser())
    parser.add_argument("--operations", type=int, default=500)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--hot", action="store_true", help="every transfer from A to B")
    parser.add_argument(
        "--saver-steps", type=int, default=1500, help="checkpoints SqliteSaver writes"
    )
    args = parser.parse_args()
    figures = Figures(__file__, args)
    call_command("migrate", verbosity=0)
    targets = "one pair of accounts for all" if args.hot else "a pair of accounts per run"
    print(f"database: {connection.vendor} {connection.settings_dict['NAME']}; {targets}")
    figures.limit()
    steps, _ = put_steps(sqlite_saver(), "drain", args.saver_steps)
    pace = figures.add("SqliteSaver's pace for three checkpoints", steps / 3, "ops/s")
    print(f"SqliteSaver: {steps:7.1f} steps/s (put + put_writes); three checkpoints {pace:.1f}/s")
    for workers in args.workers:
        project, ids = prepare(args.operations, args.hot)
        elapsed = drain(workers)
        committed = Operation.objects.filter(pk__in=ids, status="committed").count()
        window = Checkpoint.objects.filter(operation_id__in=ids).aggregate(
            first=Min("created_at", filter=Q(to_status="in_flight")),
            last=Max("created_at", filter=Q(to_status="committed")),
        )
        if window["first"] is None or window["last"] is None:
            raise SystemExit(f"{workers} worker(s) committed none of the operations")
        busy = (window["last"] - window["first"]).total_seconds()
        entries = LedgerEntry.objects.filter(project=project).count()
        b = Account.objects.filter(project=project, name__startswith="B").aggregate(
            total=Sum("balance")
        )["total"]
        b = f"{b:.2f}"  # SQLite sums decimals to a whole number.
        name = f"{workers} worker(s)"
        seconds, _ = steady_drain(workers, args, name)
        opened = figures.add(
            f"{name}: started before the queue opens", args.operations / seconds, "ops/s"
        )
        seconds, writes = steady_drain(workers, args, name, beside=True)
        shared = figures.add(
            f"{name}: started before, beside state changes", args.operations / seconds, "ops/s"
        )
        write = {
            p: figures.add(f"{name}: a state change beside it, p{p}", percentile(writes, p), "ms")
            for p in (50, 95, 100)
        }
        figures.add(f"{name}: operations", len(ids), "operations")
        figures.add(f"{name}: seconds", elapsed, "s")
        rate = figures.add(name, len(ids) / elapsed, "ops/s")
        ratio = figures.ratio(name, rate)
        paced = figures.add(f"{name}: ratio to SqliteSaver's pace", rate / pace, "ratio")
        claimed = figures.add(
            f"{name}: from the first claim to the last commit", len(ids) / busy, "ops/s"
        )
        figures.add(f"{name}: committed", committed, "operations")
        figures.add(f"{name}: ledger entries", entries, "entries")
        figures.add(f"{name}: B balances", b, "units")
        print(
            f"{name}: {len(ids)} operations in {elapsed:6.2f} s = "
            f"{rate:6.1f} ops/s (ratio {ratio:.4f} of the limit; {paced:.2f}x SqliteSaver's "
            f"pace; {claimed:6.1f} from the first claim to the last commit; {opened:6.1f} "
            f"started before the queue opens); committed {committed}, ledger entries "
            f"{entries}, B balances {b}"
        )
        print(
            f"{name}, started before the queue opens, with a state change every 20 ms beside "
            f"them: {shared:6.1f} ops/s; {len(writes)} state changes: p50 {write[50]:.1f} ms, "
            f"p95 {write[95]:.1f}, max {write[100]:.1f}"
        )
        if committed != len(ids) or entries != len(ids):
            raise SystemExit(f"{name}: every transfer must be committed and applied once")
    figures.write()


if __name__ == "__main__":
    main()
