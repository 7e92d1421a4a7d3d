"""A scripted agent that keeps the demo busy with a realistic mix of proposals, so a
newcomer sees every path of the protocol within a minute or two:

- auto-approved by policy and committed (an HTTP update);
- auto-approved, a rigged target garbles the write: verification fails, compensated;
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

from oversight_client import Conflict, Oversight, RunClosed
from runs.actions.files import workspace_of
from runs.canonical import sha256_hex
from runs.durable_files import write_durably
from runs.models import Project

log = logging.getLogger(__name__)
OPEN = ("queued", "running")


def write_as_colleague(path: Path, content: bytes) -> None:
    """Write a workspace file as a person beside Oversight would: all at once, staged
    under a name of the colleague's own. A workspace's ``.incoming-*`` names belong to
    ``file.write``'s locks, and its sweep removes such files, which would lose a write
    made outside the lock midway."""
    write_durably(path, content, prefix=".colleague-")


class DemoAgent:
    """Speaks to Oversight only through ``oversight_client``, over HTTP, as any agent
    would; it runs as its own process (``manage.py demo_agent``)."""

    def __init__(self, client: Oversight, target: str) -> None:
        self.client = client
        self.target = target.rstrip("/")
        self.session = client.open_session(title="Ops assistant", agent="demo-agent")
        self.runs: set[int] = set()
        self.counter = itertools.count(1)
        self.scenarios = itertools.cycle(self.SCENARIOS)

    def tick(self, max_waiting: int = 8) -> None:
        """Finish what has settled, then start the next scenario unless people are
        already looking at enough of this agent's pending proposals."""
        waiting = self.finish_settled_runs()
        if waiting < max_waiting:
            scenario = next(self.scenarios)
            scenario(self, next(self.counter))

    def finish_settled_runs(self) -> int:
        """Finish runs whose operations have all ended; returns how many proposals of
        the still-open runs wait for a decision."""
        waiting = 0
        for run_id in sorted(self.runs):
            run = self.client.run(run_id)
            pending = run["pending_operations"]
            waiting += sum(op["status"] == "proposed" for op in pending)
            if run["status"] not in OPEN:
                if run["status"] != "waiting":
                    self.runs.discard(run_id)
                continue
            if pending:
                continue
            ended = {op["status"] for op in run["recovery"]["operations"]}
            if ended <= {"committed"}:
                self.finish(run_id, "completed")
            else:
                summary = ", ".join(sorted(ended))
                self.finish(run_id, "partial", f"Not every operation went through: {summary}")
        return waiting

    def finish(self, run_id: int, status: str, outcome: str = "") -> None:
        """Finish the run as read a moment ago, unless it moved on since: an admin
        cancelled it (it is left as it ended), or an alert or an effect in flight
        holds it (it is looked at again next tick)."""
        try:
            self.client.finish(run_id, status, outcome)
        except RunClosed:
            pass
        except Conflict as refusal:
            if refusal.code != "run_not_accepting":
                raise
            log.info("run %s not finished yet: %s", run_id, refusal.detail)
            return
        self.runs.discard(run_id)

    # --- helpers -------------------------------------------------------------------------

    def begin(self, goal: str, thought: str = "") -> int:
        run = self.client.start_run(self.session["id"], goal)
        self.client.message(run["id"], goal, kind="user")
        if thought:
            self.client.message(run["id"], thought)
        self.runs.add(run["id"])
        return run["id"]

    def propose(self, run: int, call: str, action: str, arguments: dict, **options) -> dict:
        return self.client.propose(
            run,
            call,
            action,
            arguments,
            rollback_kind=options["rollback"],
            risk=options.get("risk", "medium"),
        )

    def put(self, item: str, body: dict, mode: str = "items", undo: bool = True) -> dict:
        target = self.target
        url = f"{target}/items/{item}" if mode == "items" else f"{target}/{mode}/items/{item}"
        arguments = {
            "method": "PUT",
            "url": url,
            "body": body,
            "verify": {"url": f"{target}/items/{item}", "json": body},
        }
        if undo:
            arguments["compensate"] = {"method": "DELETE", "url": f"{target}/items/{item}"}
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
            "The pricing service answers 200 but has been garbling writes.",
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
        # The demo plays the colleague too, straight in the project's workspace.
        project = Project.objects.get(slug=self.session["project"])
        path = workspace_of(project) / "shared" / "plan.md"
        if not path.exists():
            write_as_colleague(path, b"# Plan\n")
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
        write_as_colleague(path, seen + f"- colleague's note {n}\n".encode())

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
