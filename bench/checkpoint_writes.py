"""How fast the foundation writes state changes, each one a short transaction with its
hash-chained checkpoint, beside the rate of plain durable commits measured in the same
run (each rate's ratio to it). Uses a throwaway SQLite file (or DATABASE_URL's database,
into which it writes a bench project).

    .venv/bin/python bench/checkpoint_writes.py [--runs 200] [--messages 10]
"""

import argparse
import sys
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.environment import start_django

start_django()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from bench.report import Figures, add_json_option  # noqa: E402
from runs.actors import Actor  # noqa: E402
from runs.models import Checkpoint, Project, Role  # noqa: E402
from runs.permissions import role_group  # noqa: E402
from runs.services.decisions import decide  # noqa: E402
from runs.services.proposals import propose_operation  # noqa: E402
from runs.services.runs import append_message, finish_run, open_session, start_run  # noqa: E402

AGENT = Actor.agent("bench")


def main() -> None:
    parser = add_json_option(argparse.ArgumentParser())
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--messages", type=int, default=10)
    args = parser.parse_args()
    figures = Figures(__file__, args)
    call_command("migrate", verbosity=0)
    User = get_user_model()
    suffix = str(time.time_ns())
    project = Project.objects.create(slug=f"bench-{suffix}", name="Bench")
    owner = User.objects.create_user(f"owner-{suffix}")
    reviewer = User.objects.create_user(f"reviewer-{suffix}")
    project.memberships.create(user=reviewer, role=role_group(Role.REVIEWER))
    session = open_session(project=project, owner=owner, agent="bench")
    runs = []

    def start() -> None:
        runs.extend(
            start_run(session=session, goal=f"goal {n}", actor=AGENT) for n in range(args.runs)
        )

    def talk() -> None:
        for run in runs:
            for n in range(args.messages):
                append_message(run=run, kind="agent", payload={"text": f"step {n}"}, actor=AGENT)

    def propose_and_approve() -> None:
        for run in runs:
            run.refresh_from_db()
            op = propose_operation(
                run=run,
                call_id="c1",
                action="ledger.transfer",
                arguments={"from": "A", "to": "B", "amount": "1.00"},
                risk="medium",
                rollback_kind="compensating",
                base_version=run.version,
                actor=AGENT,
            )
            decide(
                operation=op, reviewer=reviewer, kind="approve", arguments_hash=op.arguments_hash
            )

    def finish() -> None:
        for run in runs:
            run.refresh_from_db()
            finish_run(run=run, status="completed", actor=AGENT)

    print(f"database: {connection.vendor} {connection.settings_dict['NAME']}")
    figures.limit()
    timed = partial(figures.timed, width=12, limited=True)
    timed("start run (2 checkpoints each)", args.runs, "runs", start)
    timed("append message", args.runs * args.messages, "messages", talk)
    timed("propose + approve (5 checkpoints each)", args.runs, "operations", propose_and_approve)
    timed("finish run (cancel op, 4 checkpoints each)", args.runs, "runs", finish)
    total = Checkpoint.objects.filter(run__project=project).count()
    figures.add("checkpoints written", total, "checkpoints")
    print(f"checkpoints written: {total}")
    figures.write()


if __name__ == "__main__":
    main()
