import threading
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model

from runs.actors import Actor
from runs.api.watcher import LINGER_SECONDS, WATCHER
from runs.demo.target import make_server
from runs.engine.boundaries import boundary_reached
from runs.models import Account, AgentToken, Operation, Project, Role
from runs.permissions import role_group
from runs.services.proposals import propose_operation
from runs.services.runs import open_session, start_run
from tests.helpers import decide_on
from tests.webhook_receivers import receiver, receivers  # noqa: F401 (fixtures)

User = get_user_model()
AGENT = Actor.agent("test-agent")


def make_user(username: str, project: Project | None = None, *roles: str):
    user = User.objects.create_user(username, f"{username}@example.com", "pw")
    for role in roles:
        project.memberships.create(user=user, role=role_group(role))
    return user


@pytest.fixture(scope="session", autouse=True)
def long_polls_let_go(django_db_setup):
    """The thread watching for long-polls keeps its connection a second past the last
    wait; the test database can only be dropped once it has ended."""
    yield
    thread = WATCHER._thread
    if thread is not None:
        thread.join(timeout=LINGER_SECONDS + 5)


@pytest.fixture(autouse=True)
def private_storage(settings, tmp_path):
    """Each test gets its own workspace and artifact store."""
    settings.OVERSIGHT_WORKSPACE = tmp_path / "workspace"
    settings.OVERSIGHT_ARTIFACT_ROOT = tmp_path / "artifacts"


@pytest.fixture
def project(db) -> Project:
    return Project.objects.create(slug="acme", name="Acme")


@pytest.fixture
def other_project(db) -> Project:
    return Project.objects.create(slug="other", name="Other")


@pytest.fixture
def owner(project):
    """The person an agent's session belongs to; also a reviewer of the project."""
    return make_user("owner", project, Role.REVIEWER)


@pytest.fixture
def reviewer(project):
    return make_user("reviewer", project, Role.REVIEWER)


@pytest.fixture
def reviewer2(project):
    return make_user("reviewer2", project, Role.REVIEWER)


@pytest.fixture
def auditor(project):
    return make_user("auditor", project, Role.AUDITOR)


@pytest.fixture
def admin_user(project):
    return make_user("admin", project, Role.ADMIN)


@pytest.fixture
def outsider(other_project):
    return make_user("outsider", other_project, Role.REVIEWER, Role.ADMIN)


def issued(project, name: str, owner) -> AgentToken:
    """A token with its plain text on ``.plain`` (shown only at issue)."""
    token, plain = AgentToken.issue(project=project, name=name, owner=owner)
    token.plain = plain
    return token


@pytest.fixture
def agent_token(project, owner) -> AgentToken:
    """The test agent's token. It opened ``session``: a token acts only on its own."""
    return issued(project, "test-agent", owner)


@pytest.fixture
def session(project, owner, agent_token):
    return open_session(
        project=project, owner=owner, agent="test-agent", title="Test session", token=agent_token
    )


@pytest.fixture
def run(session):
    return start_run(session=session, goal="Pay the supplier invoice", actor=AGENT)


@pytest.fixture
def propose(run):
    """Propose an operation on ``run`` (or another run) based on its current version."""

    def _propose(
        call_id: str = "call-1",
        *,
        target=None,
        arguments: dict | None = None,
        risk: str = Operation.Risk.MEDIUM,
        action: str = "ledger.transfer",
        rollback_kind: str = Operation.RollbackKind.COMPENSATING,
        **kwargs,
    ) -> Operation:
        target = target or run
        target.refresh_from_db()
        return propose_operation(
            run=target,
            call_id=call_id,
            action=action,
            arguments={"from": "A", "to": "B", "amount": 100} if arguments is None else arguments,
            risk=risk,
            rollback_kind=rollback_kind,
            base_version=kwargs.pop("base_version", target.version),
            actor=AGENT,
            **kwargs,
        )

    return _propose


@pytest.fixture
def target(settings):
    """The demo's HTTP target service on a free local port, allow-listed."""
    server = make_server()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host = f"127.0.0.1:{server.server_address[1]}"
    settings.OVERSIGHT_HTTP_ALLOWED_HOSTS = [host]
    server.base = f"http://{host}"
    server.applied = server.RequestHandlerClass.state.applied
    server.received = server.RequestHandlerClass.state.received
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def deduplicating(settings, target):
    """The target is declared to deduplicate (its /items/ honour Idempotency-Key and
    Oversight-Fencing-Epoch): a worker taking over after an intent may fire again."""
    settings.OVERSIGHT_HTTP_DEDUPLICATING_HOSTS = settings.OVERSIGHT_HTTP_ALLOWED_HOSTS


@pytest.fixture
def accounts(project):
    return {
        name: Account.objects.create(project=project, name=name, balance=balance)
        for name, balance in [("A", Decimal("5000.00")), ("B", Decimal("0.00"))]
    }


def http_arguments(base: str, mode: str = "items", compensate: bool = False) -> dict:
    arguments = {
        "method": "PUT",
        "url": f"{base}/{mode}/x" if mode == "items" else f"{base}/{mode}/items/x",
        "body": {"colour": "green"},
        "verify": {"url": f"{base}/items/x", "json": {"colour": "green"}},
    }
    if compensate:
        arguments["compensate"] = {"method": "DELETE", "url": f"{base}/items/x"}
    return arguments


@pytest.fixture
def approved(propose, reviewer, accounts, target):
    """An approved operation of a real action, ready for a worker:
    ``approved("file" | "ledger" | "email" | "http" | "http-rigged" | ...)``."""

    def make(kind: str, **arguments) -> Operation:
        action, args, rollback = {
            "file": (
                "file.write",
                {"path": "notes/today.md", "content": "hello\n", "expected_sha256": None},
                "in_band",
            ),
            "ledger": (
                "ledger.transfer",
                {"from": "A", "to": "B", "amount": "100.00", "require_balance_above": "1000.00"},
                "compensating",
            ),
            "email": (
                "email.send",
                {"to": ["ops@example.com"], "subject": "Report", "body": "All green."},
                "out_of_band",
            ),
            "http": ("http.request", http_arguments(target.base, compensate=True), "compensating"),
            "http-naive": (
                "http.request",
                http_arguments(target.base, "naive", True),
                "compensating",
            ),
            "http-rigged": (
                "http.request",
                http_arguments(target.base, "rigged", True),
                "compensating",
            ),
            "http-rigged-no-undo": (
                "http.request",
                http_arguments(target.base, "rigged"),
                "out_of_band",
            ),
        }[kind]
        op = propose(
            f"{kind}-{Operation.objects.count()}",
            action=action,
            arguments={**args, **arguments},
            rollback_kind=rollback,
        )
        decide_on(op, reviewer)
        return op

    return make


@pytest.fixture
def at_boundary():
    """``at_boundary(boundary, do)`` calls ``do(operation)`` when the worker reaches
    ``boundary``: something changing the world behind the worker's back."""
    handlers = []

    def connect(wanted: str, do) -> None:
        def handler(boundary: str, operation: Operation, **_kwargs) -> None:
            if boundary == wanted:
                do(operation)

        boundary_reached.connect(handler, weak=False)
        handlers.append(handler)

    yield connect
    for handler in handlers:
        boundary_reached.disconnect(handler)
