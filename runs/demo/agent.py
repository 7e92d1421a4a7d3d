"""A scripted agent that keeps the demo busy with a realistic mix of proposals, so a
newcomer sees every path of the protocol within a minute or two:

- auto-approved by policy and committed (an HTTP update);
- auto-approved, verification fails on a rigged target, compensated;
- auto-approved, verification fails, no rollback possible: alert, run halted;
- auto-approved, precondition no longer true at commit time (an earlier operation of
  the same run changed the target);
- one reviewer (a report file, an email), two reviewers (a high-risk transfer);
- a file whose content changes after the agent read it: precondition fails at commit;
- two transfers from a small account: the second overdraws, its precondition fails.

Runs whose operations have all ended are finished (completed, or partial).
"""

import itertools
import logging
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model

from runs.actors import Actor
from runs.canonical import sha256_hex
from runs.models import Operation, Project, Run, Session
from runs.payloads import MessageKind
from runs.services.artifacts import write_durably
from runs.services.proposals import propose_operation
from runs.services.runs import append_message, finish_run, open_session, start_run

log = logging.getLogger(__name__)
AGENT = Actor.agent("demo-agent")
UNSETTLED = ("proposed", "approved", "in_flight", "verify_failed")


class DemoAgent:
    def __init__(self, project: Project, target: str = "") -> None:
        self.project = project
        self.target = target.rstrip("/")
        self.session = self._session()
        self.counter = itertools.count(Run.objects.filter(session=self.session).count() + 1)
        self.scenarios = itertools.cycle(self.SCENARIOS)

    def _session(self) -> Session:
        users = get_user_model().objects
        # The person on whose behalf the agent works; it never signs in.
        owner = users.filter(username="agent-owner").first() or users.create_user("agent-owner")
        existing = Session.objects.filter(project=self.project, agent="demo-agent").first()
        return existing or open_session(
            project=self.project, owner=owner, agent="demo-agent", title="Ops assistant"
        )

    def tick(self, max_waiting: int = 8) -> None:
        """Finish what has settled, then start the next scenario unless people are
        already looking at enough pending proposals."""
        self.finish_settled_runs()
        if Operation.objects.filter(project=self.project, status="proposed").count() < max_waiting:
            scenario = next(self.scenarios)
            scenario(self, next(self.counter))

    def finish_settled_runs(self) -> None:
        open_runs = Run.objects.filter(session=self.session, status__in=["queued", "running"])
        for run in open_runs.exclude(operations__status__in=UNSETTLED).distinct():
            statuses = set(run.operations.values_list("status", flat=True))
            if statuses <= {"committed"}:
                finish_run(run=run, status="completed", actor=AGENT)
            else:
                finish_run(
                    run=run,
                    status="partial",
                    actor=AGENT,
                    outcome="Not every operation went through: " + ", ".join(sorted(statuses)),
                )

    # --- helpers -------------------------------------------------------------------------

    def begin(self, goal: str, thought: str = "") -> Run:
        run = start_run(session=self.session, goal=goal, actor=AGENT)
        append_message(run=run, kind=MessageKind.USER, payload={"text": goal}, actor=AGENT)
        if thought:
            append_message(run=run, kind=MessageKind.AGENT, payload={"text": thought}, actor=AGENT)
        return run

    def propose(self, run: Run, call: str, action: str, arguments: dict, **options) -> Operation:
        run.refresh_from_db()
        return propose_operation(
            run=run,
            call_id=call,
            action=action,
            arguments=arguments,
            risk=options.get("risk", "medium"),
            rollback_kind=options["rollback"],
            base_version=run.version,
            actor=AGENT,
        )

    def put(self, item: str, body: dict, mode: str = "items", undo: bool = True) -> dict:
        url = (
            f"{self.target}/items/{item}"
            if mode == "items"
            else f"{self.target}/{mode}/items/{item}"
        )
        arguments = {
            "method": "PUT",
            "url": url,
            "body": body,
            "verify": {"url": f"{self.target}/items/{item}", "json": body},
        }
        if undo:
            arguments["compensate"] = {"method": "DELETE", "url": f"{self.target}/items/{item}"}
        return arguments

    # --- scenarios -----------------------------------------------------------------------

    def publish_status(self, n: int) -> None:
        run = self.begin(f"Publish service status #{n}", "An HTTP update; policy auto-approves it.")
        self.propose(
            run,
            "publish",
            "http.request",
            self.put(f"status-{n}", {"state": "green"}),
            risk="low",
            rollback="compensating",
        )

    def rigged_with_undo(self, n: int) -> None:
        run = self.begin(
            f"Update the pricing page #{n}",
            "The pricing service answers 200 but has been dropping writes.",
        )
        self.propose(
            run,
            "pricing",
            "http.request",
            self.put(f"pricing-{n}", {"plan": "pro"}, mode="rigged"),
            risk="low",
            rollback="compensating",
        )

    def rigged_without_undo(self, n: int) -> None:
        run = self.begin(
            f"Notify the partner API #{n}",
            "The partner API cannot undo a notification once accepted.",
        )
        self.propose(
            run,
            "notify",
            "http.request",
            self.put(f"partner-{n}", {"notified": True}, mode="rigged", undo=False),
            risk="low",
            rollback="out_of_band",
        )

    def precondition_race(self, n: int) -> None:
        run = self.begin(
            f"Reserve the room for the offsite #{n}",
            "Two bookings of the same room; the second must find it free.",
        )
        item = f"room-{n}"
        self.propose(
            run,
            "book-first",
            "http.request",
            self.put(item, {"by": "team-a"}),
            risk="low",
            rollback="compensating",
        )
        second = self.put(item, {"by": "team-b"})
        second["precondition"] = {"url": f"{self.target}/items/{item}", "status": 404}
        self.propose(
            run, "book-second", "http.request", second, risk="low", rollback="compensating"
        )

    def write_report(self, n: int) -> None:
        run = self.begin(f"Write the daily report #{n}", "A new file in the workspace.")
        self.propose(
            run,
            "write",
            "file.write",
            {
                "path": f"reports/day-{n}.md",
                "content": f"# Day {n}\n\nAll green.\n",
                "expected_sha256": None,
            },
            rollback="in_band",
        )

    def stale_plan(self, n: int) -> None:
        path = Path(settings.OVERSIGHT_WORKSPACE) / "shared" / "plan.md"
        if not path.exists():
            write_durably(path, b"# Plan\n")
        seen = path.read_bytes()
        run = self.begin(
            f"Add item {n} to the shared plan",
            "A colleague edits this file too; my read may be stale by commit time.",
        )
        self.propose(
            run,
            "plan",
            "file.write",
            {
                "path": "shared/plan.md",
                "content": seen.decode() + f"- item {n}\n",
                "expected_sha256": sha256_hex(seen),
            },
            rollback="in_band",
        )
        write_durably(path, seen + f"- colleague's note {n}\n".encode())

    def pay_invoice(self, n: int) -> None:
        run = self.begin(f"Pay invoice INV-{3000 + n}", "High risk: two reviewers must agree.")
        self.propose(
            run,
            "pay",
            "ledger.transfer",
            {
                "from": "operating",
                "to": "acme-supplies",
                "amount": f"{100 + n}.00",
                "require_balance_above": "1000.00",
            },
            risk="high",
            rollback="compensating",
        )

    def overdraft(self, n: int) -> None:
        run = self.begin(
            f"Reimburse two expense claims #{n}", "Both fit petty cash today; together they do not."
        )
        for claim, amount in (("a", "400.00"), ("b", "300.00")):
            self.propose(
                run,
                f"claim-{claim}",
                "ledger.transfer",
                {"from": "petty-cash", "to": "payroll", "amount": amount},
                rollback="compensating",
            )

    def send_summary(self, n: int) -> None:
        run = self.begin(f"Email the incident summary #{n}", "Once sent, it cannot be unsent.")
        self.propose(
            run,
            "email",
            "email.send",
            {
                "to": ["team@example.com"],
                "subject": f"Incident summary #{n}",
                "body": "Resolved; details in the report.",
            },
            rollback="out_of_band",
        )

    SCENARIOS: list[Callable] = [
        publish_status,
        write_report,
        rigged_with_undo,
        precondition_race,
        pay_invoice,
        stale_plan,
        send_summary,
        rigged_without_undo,
        overdraft,
    ]
