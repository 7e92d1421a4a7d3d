"""Many waiting agents and one reviewer: do the reviewers' pages still answer?

Starts Oversight on a throwaway database under --server: ``serve`` (the production
server, bin/serve: waits on uvicorn's event loop, other requests on threads),
``runserver`` (the demo's) or
``gunicorn-sync`` (gunicorn's default sync workers, for comparison). Then --waits
agents long-poll one operation at once (``GET /operations/{id}?wait=N``, each with its
own token) while a signed-in reviewer loads ``/approvals/`` again and again. Prints how
the waits were answered (200 after waiting, 429 at once beyond the caps
OVERSIGHT_API_MAX_WAITS_PER_TOKEN / OVERSIGHT_API_MAX_WAITS) and how long the
reviewer's page took meanwhile.

    .venv/bin/python bench/long_polls.py [--server serve] [--waits 1000] [--wait-seconds 20]
"""

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.environment import start_django

start_django(production_http=True)

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402

from bench.report import Figures, add_json_option  # noqa: E402
from bench.server import get, serving  # noqa: E402
from runs.actors import Actor  # noqa: E402
from runs.management.commands.serve import allow_open_files  # noqa: E402
from runs.models import AgentToken, Operation, Project, Role  # noqa: E402
from runs.permissions import role_group  # noqa: E402
from runs.services.proposals import propose_operation  # noqa: E402
from runs.services.runs import open_session, start_run  # noqa: E402


def stage(tokens: int) -> tuple[list[tuple[str, int]], str]:
    """``tokens`` agent tokens, each with a proposed operation of its own to wait on
    (a token sees only its own runs), and a reviewer's session cookie."""
    users = get_user_model().objects
    project = Project.objects.create(slug="bench", name="Bench")
    owner, reviewer = users.create_user("owner"), users.create_user("reviewer")
    project.memberships.create(user=owner, role=role_group(Role.AUDITOR))
    project.memberships.create(user=reviewer, role=role_group(Role.REVIEWER))
    waiting = []
    for n in range(tokens):
        token, plain = AgentToken.issue(project=project, name=f"agent-{n}", owner=owner)
        session = open_session(project=project, owner=owner, agent=token.name, token=token)
        agent = Actor.agent(token.name)
        run = start_run(session=session, goal="Wait for a person", actor=agent)
        run.refresh_from_db()
        operation = propose_operation(
            run=run,
            call_id="push",
            action="git.push",
            arguments={"branch": "main"},
            risk="low",
            rollback_kind=Operation.RollbackKind.NONE,
            base_version=run.version,
            actor=agent,
            token=token,
        )
        waiting.append((plain, operation.pk))
    client = Client()
    client.force_login(reviewer)
    return waiting, client.cookies[settings.SESSION_COOKIE_NAME].value


def main() -> None:
    parser = add_json_option(argparse.ArgumentParser())
    parser.add_argument(
        "--server", choices=["serve", "runserver", "gunicorn-sync"], default="serve"
    )
    parser.add_argument("--waits", type=int, default=1000)
    parser.add_argument("--wait-seconds", type=int, default=20)
    args = parser.parse_args()
    figures = Figures(__file__, args)
    allow_open_files()  # A socket per waiting agent.
    call_command("migrate", verbosity=0)
    call_command("collectstatic", interactive=False, verbosity=0)
    waiting, cookie = stage(max(1, args.waits // 4))
    with serving(args.server) as base:
        waits: list[tuple[int, float]] = []

        def wait(n: int) -> None:
            plain, operation = waiting[n % len(waiting)]
            url = f"{base}/api/v1/operations/{operation}?wait={args.wait_seconds}"
            waits.append(get(url, {"Authorization": f"Bearer {plain}"}, args.wait_seconds + 30))

        threads = [threading.Thread(target=wait, args=(n,)) for n in range(args.waits)]
        for thread in threads:
            thread.start()
        page: list[tuple[int, float]] = []
        reviewer = {"Cookie": f"{settings.SESSION_COOKIE_NAME}={cookie}"}
        while any(thread.is_alive() for thread in threads):
            page.append(get(f"{base}/approvals/", reviewer, 30))
            time.sleep(0.2)
        for thread in threads:
            thread.join()
    print(f"server: {args.server}, database: {connection.vendor}")
    figures.add("tokens", len(waiting), "tokens")
    print(
        f"{args.waits} waits of {args.wait_seconds} s by {len(waiting)} tokens "
        f"(caps: {settings.OVERSIGHT_API_MAX_WAITS_PER_TOKEN} per token, "
        f"{settings.OVERSIGHT_API_MAX_WAITS} in all)"
    )
    for status in sorted({s for s, _ in waits}):
        times = [t for s, t in waits if s == status]
        label = {200: "answered after waiting", 429: "refused at once (429)", 0: "no answer"}.get(
            status, "other"
        )
        name = f"{status} {label}"
        figures.add(name, len(times), "waits")
        median = figures.add(f"{name}: median", statistics.median(times), "s")
        longest = figures.add(f"{name}: max", max(times), "s")
        print(
            f"  {status:>3} {label:<24} {len(times):>5}  "
            f"median {median:6.2f} s  max {longest:6.2f} s"
        )
    times = [t for _, t in page]
    name = "/approvals/ during the waits"
    figures.add(f"{name}: loads", len(page), "loads")
    statuses = figures.add(f"{name}: statuses", sorted({s for s, _ in page}), None)
    median = figures.add(f"{name}: median", statistics.median(times) * 1000, "ms")
    longest = figures.add(f"{name}: max", max(times) * 1000, "ms")
    print(
        f"{name}: {len(page)} loads, statuses {statuses}, "
        f"median {median:.0f} ms, max {longest:.0f} ms"
    )
    figures.write()


if __name__ == "__main__":
    main()
