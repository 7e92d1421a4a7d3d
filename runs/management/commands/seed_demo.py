"""Demo data: a project, the four demo users, approval policies, and runs in several
states, all created through the services so every checkpoint chain is real."""

import os
import secrets
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from runs.actions.files import workspace_of
from runs.actors import Actor
from runs.canonical import sha256_hex
from runs.demo.agent import write_as_colleague
from runs.models import ApprovalPolicy, Project, Role
from runs.payloads import MessageKind
from runs.permissions import role_group
from runs.services.artifacts import attach_artifact
from runs.services.decisions import decide, expire_if_due
from runs.services.proposals import propose_operation
from runs.services.requests import ask
from runs.services.runs import (
    append_message,
    cancel_run,
    finish_run,
    open_session,
    request_input,
    start_run,
)

DEMO_USERS = {
    "reviewer": [Role.REVIEWER],
    "reviewer2": [Role.REVIEWER],
    "auditor": [Role.AUDITOR],
    "admin": [Role.ADMIN],
}
AGENT = Actor.agent("demo-agent")
AGENT_OWNER = "agent-owner"
DEMO_ACCOUNTS = {
    "operating": Decimal("25000.00"),
    "payroll": Decimal("0.00"),
    "acme-supplies": Decimal("0.00"),
    "petty-cash": Decimal("600.00"),
    "marketing": Decimal("20000.00"),
    "northwind-events": Decimal("0.00"),
    "brightline-ads": Decimal("0.00"),
}
# Two runs paying bills from the marketing account, each within what it holds, together
# more: each one's page shows the other waiting on the account, and that together they
# would overdraw it (``runs.siblings``).
MARKETING_BILLS = [
    ("Book the stand at the spring trade fair", "book-stand", "northwind-events", "12500.00"),
    ("Pay the agency for the launch campaign", "pay-launch-ads", "brightline-ads", "9800.00"),
]
UNCHANGED_PASSWORD = (
    "password: unchanged since it was first printed (set OVERSIGHT_DEMO_PASSWORD to choose one)"
)


class Command(BaseCommand):
    help = "Create the demo project, users and runs (idempotent; prints the password once)."

    @transaction.atomic
    def handle(self, *args, **options) -> None:
        project, created = Project.objects.get_or_create(
            slug="demo", defaults={"name": "Demo project"}
        )
        password = self._ensure_users(project)
        agent_owner = self._ensure_agent_owner(project)
        if created:
            self._seed(project, agent_owner)
        self.stdout.write(f"users: {', '.join(DEMO_USERS)}")
        self.stdout.write(f"password: {password}" if password else UNCHANGED_PASSWORD)

    def _ensure_users(self, project: Project) -> str | None:
        """Set the demo password from OVERSIGHT_DEMO_PASSWORD, or generate one the first
        time; an existing generated password is never shown again or changed."""
        User = get_user_model()
        password = os.environ.get("OVERSIGHT_DEMO_PASSWORD")
        first_time = not User.objects.filter(username__in=DEMO_USERS).exists()
        if not password and first_time:
            password = secrets.token_urlsafe(12)
        for username, roles in DEMO_USERS.items():
            user, _ = User.objects.get_or_create(
                username=username, defaults={"email": f"{username}@example.com"}
            )
            user.is_staff = user.is_superuser = username == "admin"
            if password:
                user.set_password(password)
            user.save()
            for role in roles:
                project.memberships.get_or_create(user=user, role=role_group(role))
        return password

    def _ensure_agent_owner(self, project: Project):
        """The person the demo agent acts for. A token acts only for a member, so they
        are one, with the read-only auditor role; they have no password."""
        User = get_user_model()
        owner = User.objects.filter(username=AGENT_OWNER).first()
        owner = owner or User.objects.create_user(AGENT_OWNER)
        project.memberships.get_or_create(user=owner, role=role_group(Role.AUDITOR))
        return owner

    def _seed(self, project: Project, owner) -> None:
        User = get_user_model()
        reviewer, reviewer2 = (
            User.objects.get(username="reviewer"),
            User.objects.get(username="reviewer2"),
        )
        admin = User.objects.get(username="admin")
        for action, approvals in [
            ("", ApprovalPolicy.Approvals.ONE),
            ("http.request", ApprovalPolicy.Approvals.AUTO),
            ("status.check", ApprovalPolicy.Approvals.AUTO),
            ("ledger.transfer", ApprovalPolicy.Approvals.TWO),
        ]:
            project.policies.create(action=action, approvals_required=approvals)
        # Whatever risk the agent says, a transfer above 1000 is high risk.
        project.policies.create(
            action="ledger.transfer",
            approvals_required=ApprovalPolicy.Approvals.TWO,
            min_risk="high",
            when_argument="amount",
            when_operator="gt",
            when_value=1000,
        )
        for name, balance in DEMO_ACCOUNTS.items():
            project.accounts.create(name=name, balance=balance)
        session = open_session(
            project=project, owner=owner, agent="demo-agent", title="Ops assistant"
        )

        def begin(goal: str):
            run = start_run(session=session, goal=goal, actor=AGENT)
            # The person who owns the session asked for it in their own words.
            append_message(
                run=run, kind=MessageKind.USER, payload={"text": goal}, actor=Actor.of_user(owner)
            )
            return run

        def propose(run, call_id, action, arguments, *, rollback: str, risk: str = "medium"):
            run.refresh_from_db()
            return propose_operation(
                run=run,
                call_id=call_id,
                action=action,
                arguments=arguments,
                risk=risk,
                rollback_kind=rollback,
                base_version=run.version,
                actor=AGENT,
            )

        readme = begin("Update the README with the new install steps")
        old_readme = b"# Project\n\nOld install steps.\n"
        write_as_colleague(workspace_of(project) / "README.md", old_readme)
        attach_artifact(run=readme, name="README.md", content=old_readme, actor=AGENT)
        propose(
            readme,
            "write-readme",
            "file.write",
            {
                "path": "README.md",
                "content": "# Project\n\nRun bin/demo.\n",
                "expected_sha256": sha256_hex(old_readme),
            },
            rollback="in_band",
        )

        invoice = begin("Pay invoice INV-2291 to ACME Supplies")
        transfer = propose(
            invoice,
            "pay-inv-2291",
            "ledger.transfer",
            {
                "from": "operating",
                "to": "acme-supplies",
                "amount": "1250.00",
                "require_balance_above": "1000.00",
            },
            risk="high",
            rollback="compensating",
        )
        decide(
            operation=transfer,
            reviewer=reviewer2,
            kind="approve",
            arguments_hash=transfer.arguments_hash,
            comment="Matches the PO.",
        )

        ping = begin("Check that the status page is up")
        propose(
            ping,
            "ping-status",
            "status.check",
            {"url": "https://status.example.com/"},
            risk="low",
            rollback="none",
        )

        payroll = begin("Move October payroll to the payroll account")
        salaries = propose(
            payroll,
            "october-payroll",
            "ledger.transfer",
            {"from": "operating", "to": "payroll", "amount": "8000.00"},
            rollback="compensating",
        )
        for person in (reviewer, reviewer2):
            decide(
                operation=salaries,
                reviewer=person,
                kind="approve",
                arguments_hash=salaries.arguments_hash,
            )

        cleanup = begin("Delete stale feature branches")
        branches = propose(
            cleanup,
            "delete-branches",
            "git.delete_branches",
            {"repository": "billing", "branches": ["feature/old-invoices", "spike/pdf"]},
            risk="medium",
            rollback="out_of_band",
        )
        decide(
            operation=branches,
            reviewer=reviewer,
            kind="reject",
            arguments_hash=branches.arguments_hash,
            comment="Some of these branches have open pull requests.",
        )
        finish_run(run=cleanup, status="partial", actor=AGENT, outcome="Deletion was rejected.")

        email = begin("Email the weekly status report")
        mail = propose(
            email,
            "weekly-report",
            "email.send",
            {"to": ["team@example.com"], "subject": "Weekly status", "body": "All green."},
            rollback="out_of_band",
        )
        decide(
            operation=mail,
            reviewer=reviewer,
            kind="edit",
            arguments_hash=mail.arguments_hash,
            comment="Added the leads.",
            arguments={**mail.arguments, "to": ["team@example.com", "leads@example.com"]},
        )

        crm = begin("Sync CRM contacts")
        finish_run(
            run=crm, status="failed", actor=AGENT, outcome="CRM API returned 503 for an hour."
        )
        start_run(session=session, goal="Sync CRM contacts", actor=AGENT, retry_of=crm)

        budget = begin("Draft the Q4 budget summary")
        request_input(
            run=budget, question="Should the summary include the hiring plan?", actor=AGENT
        )

        region = begin("Set up the analytics cluster")
        ask(
            run=region,
            prompt="Which region should the analytics cluster go to?",
            context="Most users are in **Europe**; the data warehouse is in `us-east`.\n\n"
            "- eu-west: lower latency for users\n- us-east: no cross-region transfer costs",
            choices=["eu-west", "us-east"],
            actor=AGENT,
        )

        migration = begin("Migrate the billing database")
        propose(
            migration,
            "run-migration",
            "db.migrate",
            {"database": "billing", "to": "0042_invoice_totals"},
            rollback="out_of_band",
        )
        cancel_run(run=migration, actor=Actor.of_user(admin), reason="Freeze week: no migrations.")

        stale = begin("Rotate the API keys")
        old = propose(
            stale,
            "rotate-keys",
            "vault.rotate_keys",
            {"keys": ["payments-api"]},
            rollback="in_band",
        )
        expire_if_due(old, old.expires_at)

        for goal, call_id, payee, amount in MARKETING_BILLS:
            propose(
                begin(goal),
                call_id,
                "ledger.transfer",
                {"from": "marketing", "to": payee, "amount": amount},
                risk="high",
                rollback="compensating",
            )
