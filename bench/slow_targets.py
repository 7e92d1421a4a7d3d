"""How fast workers carry out operations when their target is slow, and when another
target hangs: N ``http.request`` operations (auto-approved by policy) against a local
target that answers every request after ``--latency`` ms, carried out by ``--workers``
``runworker`` processes; first alone, then behind ``--hanging`` operations proposed
just before them against a target that accepts connections and never answers (each of
its requests ends at ``--deadline``, ``OVERSIGHT_HTTP_DEADLINE_SECONDS``).

Each operation makes several requests to its target (the snapshot, the call, the
verification; counted by the target). A worker carrying out N effects at once in a lane
(``--effects``, within ``OVERSIGHT_LANE_EFFECTS``) can therefore do at most
workers x N / (requests x latency) operations per second: the bench prints that ceiling
and each rate's share of it. It then checks that every healthy operation committed and
was applied once. Uses a throwaway SQLite file, or DATABASE_URL's database (into which
it writes a bench project).

    .venv/bin/python bench/slow_targets.py [--operations 40] [--latency 100] \\
        [--hanging 10] [--deadline 5] [--workers 1] [--effects 32]
"""

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runs.demo.target import make_server  # The standard library only: before Django.

SLOW = make_server()
HANGING = socket.create_server(("127.0.0.1", 0), backlog=128)
HOSTS = [f"127.0.0.1:{server.getsockname()[1]}" for server in (SLOW.socket, HANGING)]
os.environ["OVERSIGHT_HTTP_ALLOWED_HOSTS"] = ",".join(HOSTS)

from bench.environment import ROOT, start_django  # noqa: E402

start_django()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.db.models import Max, Min, Q  # noqa: E402

from bench.report import Figures, add_json_option  # noqa: E402
from runs.actors import Actor  # noqa: E402
from runs.machines import OPERATION  # noqa: E402
from runs.models import Checkpoint, Operation, Project  # noqa: E402
from runs.services.proposals import propose_operation  # noqa: E402
from runs.services.runs import open_session, start_run  # noqa: E402

AGENT = Actor.agent("bench")
SETTLE_SECONDS = 600  # A phase that has not settled by then has hung: the bench stops.


def answer_slowly(latency: float) -> None:
    """Make the slow target wait ``latency`` seconds before each answer, and count the
    requests it answers."""
    handler = SLOW.RequestHandlerClass
    handler.answered = 0

    def delayed(method):
        def answer(self) -> None:
            time.sleep(latency)
            with handler.state.lock:  # Several workers' requests are answered at once.
                handler.answered += 1
            method(self)

        return answer

    for name in ("do_GET", "do_PUT", "do_DELETE"):
        setattr(handler, name, delayed(getattr(handler, name)))


def hang_forever() -> None:
    """Accept every connection to the hanging target and never answer."""
    held = []
    while True:
        held.append(HANGING.accept()[0])


def propose(project: Project, host: str, count: int, tag: str) -> list[int]:
    """``count`` PUTs of new items on ``host``, each in a run of its own."""
    owner = get_user_model().objects.create_user(f"owner-{project.slug}-{tag}")
    session = open_session(project=project, owner=owner, agent="bench")
    ids = []
    for n in range(count):
        run = start_run(session=session, goal=f"{tag} {n}", actor=AGENT)
        item, body = f"{project.slug}-{tag}-{n}", {"n": n}
        op = propose_operation(
            run=run,
            call_id=f"{tag}-{n}",
            action="http.request",
            arguments={
                "method": "PUT",
                "url": f"http://{host}/items/{item}",
                "body": body,
                "verify": {"url": f"http://{host}/items/{item}", "json": body},
            },
            risk="low",
            rollback_kind="out_of_band",
            base_version=run.version,
            actor=AGENT,
        )
        ids.append(op.pk)
    return ids


def carry_out(workers: int, healthy: list[int]) -> None:
    """Run ``workers`` worker processes until every healthy operation has settled, then
    stop them (the hanging ones may still be at their deadlines)."""
    with ExitStack() as files:
        logs = [files.enter_context(tempfile.TemporaryFile("w+")) for _ in range(workers)]
        processes = [
            subprocess.Popen(
                [sys.executable, str(ROOT / "manage.py"), "runworker", "--idle-seconds", "0.1"],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            for log in logs
        ]
        try:
            deadline = time.monotonic() + SETTLE_SECONDS
            unsettled = Operation.objects.filter(pk__in=healthy, status__in=OPERATION.open)
            while unsettled.exists():
                for process, log in zip(processes, logs, strict=True):
                    if process.poll() is not None:
                        log.seek(0)
                        raise SystemExit(f"a worker stopped:\n{log.read()[-2000:]}")
                if time.monotonic() > deadline:
                    raise SystemExit(f"operations unsettled after {SETTLE_SECONDS} s")
                time.sleep(0.05)
        finally:
            for process in processes:
                process.kill()
                process.wait()


def phase(figures: Figures, args: argparse.Namespace, hanging: int) -> None:
    name = f"behind {hanging} hanging" if hanging else "alone"
    project = Project.objects.create(slug=f"slow-{time.time_ns()}", name="Slow targets bench")
    project.policies.create(action="http.request", approvals_required=0)
    stuck = propose(project, HOSTS[1], hanging, "hanging")
    healthy = propose(project, HOSTS[0], args.operations, "healthy")
    SLOW.RequestHandlerClass.answered = 0
    carry_out(args.workers, healthy)
    window = Checkpoint.objects.filter(operation_id__in=stuck + healthy).aggregate(
        first=Min("created_at", filter=Q(to_status="in_flight")),
        last=Max("created_at", filter=Q(to_status="committed", operation_id__in=healthy)),
    )
    committed = Operation.objects.filter(pk__in=healthy, status="committed").count()
    if window["last"] is None:
        raise SystemExit(f"{name}: none of the healthy operations committed")
    seconds = (window["last"] - window["first"]).total_seconds()
    requests = SLOW.RequestHandlerClass.answered / len(healthy)
    at_once = min(args.effects, settings.OVERSIGHT_LANE_EFFECTS)
    ceiling = args.workers * at_once / (requests * args.latency / 1000)
    rate = figures.add(f"{name}: healthy operations", len(healthy) / seconds, "ops/s")
    figures.add(f"{name}: seconds", seconds, "s")
    figures.add(f"{name}: requests per operation", requests, "requests")
    figures.add(f"{name}: {at_once} effects at once at most", ceiling, "ops/s")
    share = figures.add(f"{name}: share of that ceiling", rate / ceiling, "ratio")
    figures.add(f"{name}: committed", committed, "operations")
    print(
        f"{name:>20}: {len(healthy)} operations at {args.latency:.0f} ms in {seconds:6.2f} s"
        f" = {rate:5.2f} ops/s ({requests:.1f} requests each; {at_once} at once allow"
        f" {ceiling:5.2f}, {share:.0%} of it); committed {committed}"
    )
    if committed != len(healthy):
        raise SystemExit(f"{name}: {len(healthy) - committed} healthy operations did not commit")


def main() -> None:
    parser = add_json_option(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]))
    parser.add_argument("--operations", type=int, default=40, help="against the slow target")
    parser.add_argument("--latency", type=float, default=100, help="ms before each answer")
    parser.add_argument("--hanging", type=int, default=10, help="operations that hang")
    parser.add_argument("--deadline", type=int, default=5, help="seconds per request")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--effects", type=int, default=32, help="at once, per worker")
    args = parser.parse_args()
    os.environ["OVERSIGHT_HTTP_DEADLINE_SECONDS"] = str(args.deadline)
    os.environ["OVERSIGHT_WORKER_EFFECTS"] = str(args.effects)  # For the workers.
    figures = Figures(__file__, args)
    call_command("migrate", verbosity=0)
    print(
        f"database: {connection.vendor}; {args.workers} worker(s) of {args.effects} effects"
        f" at once, {settings.OVERSIGHT_LANE_EFFECTS} per lane"
    )
    answer_slowly(args.latency / 1000)
    threading.Thread(target=SLOW.serve_forever, daemon=True).start()
    threading.Thread(target=hang_forever, daemon=True).start()
    phase(figures, args, hanging=0)
    if args.hanging:
        phase(figures, args, hanging=args.hanging)
    applied = SLOW.RequestHandlerClass.state.applied
    twice = sum(1 for count in applied.values() if count > 1)
    figures.add("effects applied twice", twice, "effects")
    print(f"effects applied twice: {twice}")
    figures.write()
    sys.exit(1 if twice else 0)


if __name__ == "__main__":
    main()
