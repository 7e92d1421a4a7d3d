"""How fast a token's feed is written and read. Writes checkpoints on runs whose
session has an agent token (each also numbers a feed event under the token's counter
lock) and, for comparison, on runs of a session without one (no feed), each write rate
beside plain durable commits measured in the same run (its ratio to them); then reads the
whole feed through the API (``GET /api/v1/events``), a page at a time. Uses a
throwaway SQLite file (or DATABASE_URL's database, into which it writes a bench
project).

    .venv/bin/python bench/feed.py [--runs 20] [--events 50] [--page 500]
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
from django.test import Client  # noqa: E402

from bench.report import Figures, add_json_option  # noqa: E402
from runs.actors import Actor  # noqa: E402
from runs.models import AgentToken, FeedEvent, Project, Role  # noqa: E402
from runs.permissions import role_group  # noqa: E402
from runs.services.runs import open_session, start_run  # noqa: E402
from runs.transitions import record_run_event  # noqa: E402

AGENT = Actor.agent("bench")


def write(session, runs: int, events: int) -> None:
    started = [start_run(session=session, goal=f"goal {n}", actor=AGENT) for n in range(runs)]
    for n in range(events):
        for run in started:
            record_run_event(run=run, actor=AGENT, event="bench.note", reason=str(n))


def read_all(plain: str, page: int) -> int:
    """Read the token's feed from the start, ``page`` events at a time; how many."""
    client, cursor, count = Client(SERVER_NAME="localhost"), 0, 0
    headers = {"Authorization": f"Bearer {plain}"}
    while True:
        body = client.get(
            "/api/v1/events", {"after": cursor, "limit": page}, headers=headers, secure=True
        ).json()
        if not body["events"]:
            return count
        count += len(body["events"])
        cursor = body["cursor"]


def main() -> None:
    parser = add_json_option(argparse.ArgumentParser())
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--events", type=int, default=50, help="checkpoints per run")
    parser.add_argument("--page", type=int, default=500)
    args = parser.parse_args()
    figures = Figures(__file__, args)
    call_command("migrate", verbosity=0)
    suffix = str(time.time_ns())
    project = Project.objects.create(slug=f"bench-{suffix}", name="Bench")
    owner = get_user_model().objects.create_user(f"owner-{suffix}")
    project.memberships.create(user=owner, role=role_group(Role.REVIEWER))
    token, plain = AgentToken.issue(project=project, name="bench", owner=owner)
    fed = open_session(project=project, owner=owner, agent="bench", token=token)
    unfed = open_session(project=project, owner=owner, agent="bench")
    total = args.runs * (args.events + 2)  # Each run's start writes two checkpoints.

    print(f"database: {connection.vendor} {connection.settings_dict['NAME']}")
    figures.limit()
    timed = partial(figures.timed, width=8)
    timed(
        "checkpoints, no token (no feed)",
        total,
        "events",
        lambda: write(unfed, args.runs, args.events),
        limited=True,
    )
    timed(
        "checkpoints with their feed events",
        total,
        "events",
        lambda: write(fed, args.runs, args.events),
        limited=True,
    )
    read = []
    timed(
        f"feed read through the API, {args.page} a page",
        total,
        "events",
        lambda: read.append(read_all(plain, args.page)),
    )
    seqs = list(FeedEvent.objects.filter(token=token).values_list("seq", flat=True))
    figures.add("feed events", len(seqs), "events")
    figures.add("feed events: read", read[0], "events")
    gapless = figures.add("feed events: gapless", seqs == list(range(1, total + 1)), None)
    print(f"feed events: {len(seqs)}, read: {read[0]}, gapless: {gapless}")
    figures.write()


if __name__ == "__main__":
    main()
