"""Chaos soak: the commit engine under the failures it exists for.

Several worker processes with short leases carry out a stream of operations while they
are killed (SIGKILL) and paused past their lease (SIGSTOP, then SIGCONT later) at
random, and stop themselves where a stopped process holds others up (inside the
transaction that claims and carries out a transfer, inside a folder's lock before the
file is replaced: ``bench/soak_worker.py``), to be woken two to four times later than
an operation may be held up, if they are still alive (so that a stall without a bound
cannot pass for a slow one): a stopped holder is ended after ``--stall-bound`` seconds
(PostgreSQL ends its session; on SQLite another worker kills it, and the soak starts a
new one):

- HTTP calls to a target that does not deduplicate: the demo target's ``/naive/``
  items, which apply every request they get, whatever its key or epoch;
- ledger transfers between four shared accounts, in both directions, one per run;
- file writes that each append a line to one of three shared files.

Afterwards every effect is read back from the targets themselves (the HTTP target's
count of applications per key, the ledger's entries and balances, the files' lines)
and compared with what each operation's status claims. It prints the operations by
status, kills, stops, and:

- duplicates: an effect applied twice;
- lost effects: an operation recorded committed whose effect is not there;
- invented effects: an effect there for an operation recorded as not done, a
  compensation without its transfer, money that appeared or vanished;
- leftovers: operations not settled when the soak ends, and killed writers'
  temporary files still in the workspace after a worker's housekeeping;
- held up: operations that took longer from approval to their end than, for each claim
  they needed, the lease plus the stall bound, plus ``--margin`` seconds (an operation
  whose first worker was stopped waits out one bound, and may meet a second fault in its
  second claim; the longest wait is printed too);

then runs ``check_invariants`` and ``verify_audit_chain``. It exits 1 unless the four
counts are 0 and both checks pass. Everything stays on loopback. It uses a throwaway
SQLite file, or a throwaway database on DATABASE_URL's server (created and dropped; the
user needs the CREATEDB privilege).

    .venv/bin/python bench/chaos_soak.py [--seconds 300] [--workers 4] [--lease 2]
        [--stop-inside 0.05] [--stall-bound 3] [--margin 5]
"""

import argparse
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.environment import ROOT, start_django
from bench.server import free_port

TARGET = f"127.0.0.1:{free_port()}"
os.environ["OVERSIGHT_HTTP_ALLOWED_HOSTS"] = TARGET
os.environ.pop("OVERSIGHT_HTTP_DEDUPLICATING_HOSTS", None)  # /naive/ deduplicates nothing.
start_django(var_prefix="oversight-soak-")

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.db.models import Max, Min, Q  # noqa: E402

from bench.report import Figures, add_json_option  # noqa: E402
from runs import machines  # noqa: E402
from runs.actions.files import workspace_of  # noqa: E402
from runs.actors import Actor  # noqa: E402
from runs.canonical import sha256_hex  # noqa: E402
from runs.demo.target import make_server  # noqa: E402
from runs.durable_files import INCOMING  # noqa: E402
from runs.models import Account, Checkpoint, LedgerEntry, Operation, Project  # noqa: E402
from runs.services.proposals import propose_operation  # noqa: E402
from runs.services.runs import open_session, start_run  # noqa: E402
from runs.throwaway import throwaway_database  # noqa: E402

AGENT = Actor.agent("soak")
ACCOUNTS = {f"L{n}": Decimal("1000000.00") for n in range(4)}
FILES = [f"shared/f{n}.log" for n in range(3)]
KINDS = ("http", "ledger", "file")
UNSETTLED = (Operation.Status.APPROVED, Operation.Status.IN_FLIGHT, Operation.Status.VERIFY_FAILED)


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.chance = random.Random(args.seed)
        tag = str(time.time_ns())
        self.project = Project.objects.create(slug=f"soak-{tag}", name="Chaos soak")
        for action in ("http.request", "ledger.transfer", "file.write"):
            self.project.policies.create(action=action, approvals_required=0)
        for name, balance in ACCOUNTS.items():
            Account.objects.create(project=self.project, name=name, balance=balance)
        owner = get_user_model().objects.create_user(f"soak-owner-{tag}")
        self.session = open_session(project=self.project, owner=owner, agent="soak")
        self.ops: dict[int, tuple[str, dict]] = {}  # id -> (kind, what to look for)
        self.workers: list[subprocess.Popen] = []
        self.paused: dict[int, float] = {}  # worker index -> when to wake it
        self.stalled: list[tuple[subprocess.Popen, float]] = []  # stopped inside, waking at
        self.woken: list[subprocess.Popen] = []  # stalled ones woken, working on
        self.kills = self.stops = 0
        self.inside = self.ended = 0  # Stops inside a lock; workers ended for stalling.
        self.log = open(Path(settings.VAR_DIR) / "workers.log", "ab")  # noqa: SIM115

    # --- workers and chaos ---------------------------------------------------------------

    def start_worker(self, index: int) -> subprocess.Popen:
        seed = self.chance.randrange(2**32)
        return subprocess.Popen(
            [
                *(sys.executable, str(ROOT / "bench" / "soak_worker.py"), f"soak-{index}"),
                *(str(self.args.lease), str(self.args.stop_inside), str(seed)),
            ],
            stdout=self.log,
            stderr=self.log,
        )

    def held_up_after(self, claims: int) -> float:
        """How long an operation that needed ``claims`` claims may take from its approval
        to its end: each claim may meet a fault of its own (a worker stopped past its
        lease, or inside a lock for the stall bound), plus the margin (a takeover's
        verification, a busy machine)."""
        return max(1, claims) * (self.args.lease + self.args.stall_bound) + self.args.margin

    def tend(self) -> None:
        """Put a worker that stopped itself inside a lock aside, to be woken long after
        the bound, and start another in its place: what is measured is how long the
        stopped one holds the others up, not the soak running short of workers. Start
        another in place of one that died (killed for stalling)."""
        for index, worker in enumerate(self.workers):
            if worker.poll() is not None:
                self.workers[index] = self.start_worker(index)
                self.paused.pop(index, None)
                self.ended += 1
            elif index not in self.paused and _stopped(worker.pid):
                hold = self.chance.uniform(2, 4) * self.held_up_after(claims=1)
                self.stalled.append((worker, time.monotonic() + hold))
                self.workers[index] = self.start_worker(index)
                self.inside += 1
        for worker, when in list(self.stalled):
            if worker.poll() is not None:  # Ended while stopped (SQLite: by a worker).
                self.stalled.remove((worker, when))
                self.ended += 1
            elif time.monotonic() >= when:
                worker.send_signal(signal.SIGCONT)  # It goes on as one worker more.
                self.stalled.remove((worker, when))
                self.woken.append(worker)

    def strike(self) -> None:
        """Kill a running worker and start another, or pause one past its lease. Never
        one that stopped itself inside a lock: ``tend`` puts it aside, and killed first
        it would count as neither."""
        awake = [
            i
            for i in range(len(self.workers))
            if i not in self.paused and not _stopped(self.workers[i].pid)
        ]
        if not awake:
            return
        victim = self.chance.choice(awake)
        if self.chance.random() < 0.5:
            self.workers[victim].kill()
            self.workers[victim].wait()
            self.workers[victim] = self.start_worker(victim)
            self.kills += 1
        else:
            self.workers[victim].send_signal(signal.SIGSTOP)
            self.paused[victim] = time.monotonic() + self.args.lease + self.chance.uniform(0.5, 2)
            self.stops += 1

    def wake(self, everyone: bool = False) -> None:
        for index, when in list(self.paused.items()):
            if everyone or time.monotonic() >= when:
                self.workers[index].send_signal(signal.SIGCONT)
                del self.paused[index]

    # --- operations ----------------------------------------------------------------------

    def propose(self, n: int) -> None:
        kind = KINDS[n % len(KINDS)]
        action, arguments, rollback, look_for = getattr(self, kind)(n)
        run = start_run(session=self.session, goal=f"soak {kind} {n}", actor=AGENT)
        op = propose_operation(
            run=run,
            call_id=f"{kind}-{n}",
            action=action,
            arguments=arguments,
            risk="low",
            rollback_kind=rollback,
            base_version=run.version,
            actor=AGENT,
        )
        self.ops[op.pk] = (kind, look_for)

    def http(self, n: int) -> tuple:
        item, body = f"h{n}", {"n": n}
        arguments = {
            "method": "PUT",
            "url": f"http://{TARGET}/naive/items/{item}",
            "body": body,
            "verify": {"url": f"http://{TARGET}/items/{item}", "json": body},
        }
        return "http.request", arguments, "out_of_band", {}

    def ledger(self, n: int) -> tuple:
        source, target = self.chance.sample(sorted(ACCOUNTS), 2)
        amount = f"{self.chance.randint(1, 50)}.00"
        arguments = {"from": source, "to": target, "amount": amount}
        return "ledger.transfer", arguments, "compensating", {}

    def file(self, n: int) -> tuple:
        path = FILES[n % len(FILES)]
        current = workspace_of(self.project) / path
        before = current.read_bytes() if current.is_file() else b""
        line = f"line {n}\n"
        arguments = {
            "path": path,
            "content": before.decode() + line,
            "expected_sha256": sha256_hex(before) if current.is_file() else None,
        }
        return "file.write", arguments, "in_band", {"path": path, "line": line}

    def unsettled(self) -> int:
        return Operation.objects.filter(project=self.project, status__in=UNSETTLED).count()

    # --- the soak ------------------------------------------------------------------------

    def run(self) -> float:
        """Propose while the chaos runs in a thread of its own: a proposal may wait for
        the database lock a paused worker holds, and only the chaos thread wakes it."""
        self.workers = [self.start_worker(i) for i in range(self.args.workers)]
        started = time.monotonic()
        chaos = threading.Thread(target=self.chaos, args=(started + self.args.seconds,))
        chaos.start()
        n = 0
        while chaos.is_alive():
            if self.unsettled() < 2 * self.args.workers:
                self.propose(n)
                n += 1
            else:
                time.sleep(0.05)
        self.settle()
        return time.monotonic() - started

    def chaos(self, until: float) -> None:
        next_strike = time.monotonic() + self.args.strike_every
        while time.monotonic() < until:
            self.tend()
            self.wake()
            if time.monotonic() >= next_strike:
                self.strike()
                next_strike += self.chance.uniform(0.5, 1.5) * self.args.strike_every
            time.sleep(0.02)
        self.wake(everyone=True)

    def settle(self) -> None:
        """Let the workers finish what is open, then stop them; one more worker's first
        step does the housekeeping any restarted worker does."""
        deadline = time.monotonic() + 10 * self.args.lease + 60
        while self.unsettled() and time.monotonic() < deadline:
            self.tend()
            self.wake()
            time.sleep(0.2)
        self.wake(everyone=True)
        everyone = [*self.workers, *(worker for worker, _ in self.stalled), *self.woken]
        for worker in everyone:
            worker.send_signal(signal.SIGCONT)
            worker.terminate()
        for worker in everyone:
            worker.wait()
        manage("runworker", "--once")


def _stopped(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False


def manage(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args], capture_output=True, text=True
    )


# --- reading the effects back -----------------------------------------------------------


class Findings:
    def __init__(self) -> None:
        self.duplicates: list[str] = []
        self.lost: list[str] = []
        self.invented: list[str] = []
        self.leftovers: list[str] = []
        self.held_up: list[str] = []
        self.longest = 0.0  # seconds from an approval to the operation's end


def examine(soak: Soak, applied: Counter) -> Findings:
    found = Findings()
    workspace = workspace_of(soak.project)
    files = {
        path: (workspace / path).read_text() if (workspace / path).is_file() else ""
        for path in FILES
    }
    entries = Counter(
        LedgerEntry.objects.filter(project=soak.project).values_list("idempotency_key", flat=True)
    )
    for op in Operation.objects.filter(pk__in=soak.ops).order_by("pk"):
        kind, look_for = soak.ops[op.pk]
        if op.status not in machines.OPERATION.terminal:
            found.leftovers.append(f"operation {op.pk} ({kind}) is still {op.status}")
            continue
        name = f"operation {op.pk} ({kind}, {op.status})"
        if kind == "http":
            times = applied[op.idempotency_key]
        elif kind == "ledger":
            times = entries[op.idempotency_key]
            compensated = entries[f"{op.idempotency_key}:compensate"]
            if compensated > times:
                found.invented.append(f"{name}: a compensation without its transfer")
            if (op.status == "compensated") != bool(compensated):
                found.invented.append(f"{name}: {compensated} compensation(s)")
        else:
            times = files[look_for["path"]].splitlines(keepends=True).count(look_for["line"])
        if times > 1:
            found.duplicates.append(f"{name}: applied {times} times")
        if op.status == "committed" and times == 0:
            found.lost.append(f"{name}: recorded committed, not there")
        done = op.status in ("committed", "alerted") or (
            kind == "ledger" and op.status == "compensated"
        )
        if times and not done:
            found.invented.append(f"{name}: there, though recorded as not done")
    money = dict(Account.objects.filter(project=soak.project).values_list("name", "balance"))
    if sum(money.values()) != sum(ACCOUNTS.values()):
        found.invented.append(f"money: {sum(money.values())}, opened with {sum(ACCOUNTS.values())}")
    for name, balance in money.items():
        moved = LedgerEntry.objects.filter(project=soak.project)
        credits = sum(moved.filter(credit__name=name).values_list("amount", flat=True))
        debits = sum(moved.filter(debit__name=name).values_list("amount", flat=True))
        if balance != ACCOUNTS[name] + credits - debits:
            found.invented.append(f"account {name}: {balance}, its entries say otherwise")
    claims = dict(Operation.objects.filter(pk__in=soak.ops).values_list("pk", "attempts"))
    for op_id, took in waits(soak).items():
        found.longest = max(found.longest, took)
        if took > soak.held_up_after(claims[op_id]):
            found.held_up.append(
                f"operation {op_id}: {took:.1f} s from approval to its end, "
                f"{claims[op_id]} claim(s)"
            )
    leftovers = list(Path(settings.OVERSIGHT_WORKSPACE).rglob(f"{INCOMING}*"))
    found.leftovers += [f"temporary file {path}" for path in leftovers]
    return found


def waits(soak: Soak) -> dict[int, float]:
    """Each settled operation's time from its approval to its end, by its checkpoints."""
    ended = [*machines.OPERATION.terminal]
    times = (
        Checkpoint.objects.filter(operation_id__in=soak.ops)
        .values("operation_id")
        .annotate(
            approved=Min("created_at", filter=Q(to_status=Operation.Status.APPROVED)),
            ended=Max("created_at", filter=Q(to_status__in=ended)),
        )
    )
    return {
        row["operation_id"]: (row["ended"] - row["approved"]).total_seconds()
        for row in times
        if row["approved"] and row["ended"]
    }


def report(soak: Soak, elapsed: float, found: Findings, figures: Figures) -> bool:
    statuses = Counter(Operation.objects.filter(pk__in=soak.ops).values_list("status", flat=True))
    checks = {name: manage(name) for name in ("check_invariants", "verify_audit_chain")}
    print(f"database: {connection.vendor}; {soak.args.workers} workers, lease {soak.args.lease} s")
    figures.add("operations", len(soak.ops), "operations")
    figures.add("seconds", elapsed, "s")
    rate = figures.add("operations per minute", 60 * len(soak.ops) / elapsed, "operations/min")
    print(f"operations: {len(soak.ops)} in {elapsed:.0f} s ({rate:.0f}/min)")
    for status, count in statuses.most_common():
        figures.add(f"operations {status}", count, "operations")
    print("  " + ", ".join(f"{status} {count}" for status, count in statuses.most_common()))
    figures.add("kills", soak.kills, "kills")
    figures.add("stops past the lease", soak.stops, "stops")
    print(f"kills: {soak.kills}, stops past the lease: {soak.stops}")
    figures.add("stops inside a lock", soak.inside, "stops")
    figures.add("workers ended for stalling", soak.ended, "workers")
    print(f"stops inside a lock: {soak.inside}, workers ended for stalling: {soak.ended}")
    longest = figures.add("longest wait", found.longest, "s")
    print(f"longest from an approval to the operation's end: {longest:.1f} s")
    for label, items in (
        ("duplicates", found.duplicates),
        ("lost effects", found.lost),
        ("invented effects", found.invented),
        ("leftovers", found.leftovers),
        ("held up", found.held_up),
    ):
        print(f"{label}: {figures.add(label, len(items), 'items')}")
        for item in items[:10]:
            print(f"  {item}")
    for name, result in checks.items():
        passed = figures.add(f"{name} passed", result.returncode == 0, None)
        print(f"{name}: {'pass' if passed else 'FAIL'}")
        if result.returncode:
            print(result.stderr.strip()[:2000])
    clean = not (
        found.duplicates or found.lost or found.invented or found.leftovers or found.held_up
    )
    return clean and all(result.returncode == 0 for result in checks.values())


def main() -> None:
    parser = add_json_option(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]))
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--lease", type=float, default=2)
    parser.add_argument("--strike-every", type=float, default=1.0, help="mean seconds")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument(
        "--stop-inside", type=float, default=0.05, help="chance a worker stops inside a lock"
    )
    parser.add_argument(
        "--stall-bound", type=int, default=3, help="seconds a stopped holder holds others up"
    )
    parser.add_argument(
        "--margin", type=float, default=5, help="seconds an operation may take beyond its bound"
    )
    args = parser.parse_args()
    figures = Figures(__file__, args)
    os.environ["OVERSIGHT_LEASE_SECONDS"] = str(max(1, round(args.lease)))
    os.environ["OVERSIGHT_DB_IDLE_IN_TRANSACTION_SECONDS"] = str(args.stall_bound)
    host, port = TARGET.split(":")
    target = make_server(host, int(port))
    threading.Thread(target=target.serve_forever, daemon=True).start()
    with own_database():
        soak = Soak(args)
        try:
            elapsed = soak.run()
        finally:
            for worker in [*soak.workers, *(w for w, _ in soak.stalled), *soak.woken]:
                if worker.poll() is None:
                    worker.send_signal(signal.SIGCONT)
                    worker.kill()
        found = examine(soak, target.RequestHandlerClass.state.applied)
        passed = report(soak, elapsed, found, figures)
    figures.write()
    target.shutdown()
    sys.exit(0 if passed else 1)


@contextmanager
def own_database() -> Iterator[None]:
    """SQLite: the file in the soak's temporary folder. PostgreSQL: a database of its
    own, whose URL the workers get, dropped at the end: the invariants are checked over
    the whole database, and an earlier run's rows would point at artifacts elsewhere."""
    if connection.vendor != "postgresql":
        call_command("migrate", verbosity=0)
        yield
        return
    with throwaway_database("soak") as name:
        url = urlsplit(os.environ["DATABASE_URL"])
        os.environ["DATABASE_URL"] = url._replace(path=f"/{name}").geturl()
        yield
        connection.close()


if __name__ == "__main__":
    main()
