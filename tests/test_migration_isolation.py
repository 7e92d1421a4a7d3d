"""Migration 0009 links each existing session to the token that opened it. The
session's "agent" label is free text the agent chose, so the link comes from the
checkpoints written under the token's name, never from the label."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("runs", "0008_drop_unfinished_replays")]
AFTER = [("runs", "0009_isolation")]


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.mark.django_db(transaction=True)
def test_sessions_are_linked_by_the_token_that_wrote_their_runs_not_by_their_label():
    apps = migrate(BEFORE)
    try:
        user = apps.get_model("auth", "User").objects.create(username="owner")
        project = apps.get_model("runs", "Project").objects.create(slug="p", name="P")
        tokens = apps.get_model("runs", "AgentToken").objects
        t1 = tokens.create(project=project, name="t1", owner=user, prefix="a" * 10)
        t2 = tokens.create(project=project, name="t2", owner=user, prefix="b" * 10)
        sessions = apps.get_model("runs", "Session").objects
        # t1 opened a session it labelled "t2"; another session has no run yet.
        labelled = sessions.create(project=project, owner=user, agent="t2")
        empty = sessions.create(project=project, owner=user, agent="t1")
        run = apps.get_model("runs", "Run").objects.create(
            project=project, session=labelled, goal="g", version=1
        )
        apps.get_model("runs", "Checkpoint").objects.create(
            run=run,
            project=project,
            seq=1,
            actor_kind="agent",
            actor_label="t1",
            event="run.created",
            to_status="queued",
            state={},
            hash="c" * 64,
        )

        apps = migrate(AFTER)

        sessions = apps.get_model("runs", "Session").objects
        assert sessions.get(pk=labelled.pk).token_id == t1.pk != t2.pk
        assert sessions.get(pk=empty.pk).token_id is None
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
