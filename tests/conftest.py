import pytest
from django.contrib.auth import get_user_model

from runs.actors import Actor
from runs.models import Operation, Project, Role
from runs.permissions import role_group
from runs.services.proposals import propose_operation
from runs.services.runs import open_session, start_run

User = get_user_model()
AGENT = Actor.agent("test-agent")


def make_user(username: str, project: Project | None = None, *roles: str):
    user = User.objects.create_user(username, f"{username}@example.com", "pw")
    for role in roles:
        project.memberships.create(user=user, role=role_group(role))
    return user


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


@pytest.fixture
def session(project, owner):
    return open_session(project=project, owner=owner, agent="test-agent", title="Test session")


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
