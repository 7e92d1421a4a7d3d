"""Migration 0024 gives every human request its kind (#34). Requests asked before kinds
keep their meaning: choices a choice, a schema data, neither a sign-off; their answers
fit their kinds."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.test_migration_isolation import migrate

BEFORE = [("runs", "0023_queue_version_indexes")]
AFTER = [("runs", "0024_request_kinds")]


@pytest.mark.django_db(transaction=True)
def test_requests_asked_before_kinds_keep_their_meaning():
    apps = migrate(BEFORE)
    try:
        user = apps.get_model("auth", "User").objects.create(username="reviewer")
        project = apps.get_model("runs", "Project").objects.create(slug="p", name="P")
        session = apps.get_model("runs", "Session").objects.create(project=project, owner=user)
        run = apps.get_model("runs", "Run").objects.create(
            project=project, session=session, goal="g", version=1
        )
        requests = apps.get_model("runs", "HumanRequest").objects
        asked = {"run": run, "project": project, "expires_at": "2030-01-01T00:00:00Z"}
        answered = {"status": "answered", "answered_by": user, "answered_at": "2029-01-01T00:00Z"}
        plain = requests.create(prompt="Sign off?", **asked, **answered, answer_kind="approve")
        chosen = requests.create(
            prompt="Which?", choices=["a", "b"], **asked, **answered, answer_kind="choose"
        )
        schema = requests.create(prompt="Name?", answer_schema={"type": "string"}, **asked)
        migrate(AFTER)
    finally:
        apps = migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    kinds = dict(apps.get_model("runs", "HumanRequest").objects.values_list("pk", "kind"))
    assert kinds == {plain.pk: "sign_off", chosen.pk: "choice", schema.pk: "data"}
