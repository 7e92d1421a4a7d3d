"""The transition path's prepared statements store what the ORM would, value for value:
a checkpoint's hash is recomputed from what was stored, so any difference would break
the chain. A prepared read gives, call after call, what its queryset gives."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db.models import F
from django.db.models.signals import post_save, pre_save

from runs import statements
from runs.errors import StaleVersion
from runs.models import Checkpoint, HumanRequest, Operation, Run
from runs.services.requests import ask
from runs.transitions import _update_versioned
from tests.conftest import AGENT

pytestmark = pytest.mark.django_db

STATE = {
    "text": "naïve “quotes” \u2028 <b>",
    "big": 2**70,
    "nested": {"list": [1, 2.5, None, True], "empty": {}},
}


def stored(pk: int) -> dict:
    return Checkpoint.objects.filter(pk=pk).values().get()


def checkpoint_of(run, seq: int, reviewer) -> Checkpoint:
    return Checkpoint(
        run=run,
        project_id=run.project_id,
        seq=seq,
        created_at=datetime(2026, 12, 1, 23, 59, 59, 999999, tzinfo=UTC),
        actor_kind="user",
        actor_user=reviewer,
        actor_label="reviewer",
        event="run.note",
        to_status=run.status,
        reason="why <b>not</b>",
        state=STATE,
        prev_hash="0" * 64,
        hash=f"{seq:064d}",
    )


def test_an_inserted_row_is_the_one_save_writes(run, reviewer):
    by_orm = checkpoint_of(run, 100, reviewer)
    by_orm.save()
    prepared = checkpoint_of(run, 101, reviewer)
    seen = []

    def before(instance, **_kwargs) -> None:
        seen.append(("pre", instance.pk))

    def after(instance, created, **_kwargs) -> None:
        seen.append(("post", instance.pk, created))

    pre_save.connect(before, sender=Checkpoint)
    post_save.connect(after, sender=Checkpoint)
    try:
        statements.insert(prepared)
    finally:
        pre_save.disconnect(before, sender=Checkpoint)
        post_save.disconnect(after, sender=Checkpoint)

    assert prepared.pk is not None and not prepared._state.adding
    assert seen == [("pre", None), ("post", prepared.pk, True)]
    orm_row, prepared_row = stored(by_orm.pk), stored(prepared.pk)
    for row in (orm_row, prepared_row):
        del row["id"], row["seq"], row["hash"]
    assert prepared_row == orm_row
    assert prepared_row["state"] == STATE


def test_an_update_is_conditional_and_writes_what_update_does(run, reviewer, agent_token):
    question, twin = (
        ask(run=run, prompt=f"Which {n}?", actor=AGENT, token=agent_token, choices=["a", "b"])[0]
        for n in (1, 2)
    )
    answered = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    changes = {"answer": None, "answered_by": reviewer, "answered_at": answered, "comment": "ok"}
    HumanRequest.objects.filter(pk=twin.pk).update(version=twin.version + 1, **changes)

    stale = statements.update(
        HumanRequest, {"id": question.pk, "version": question.version + 5}, changes
    )
    written = statements.update(
        HumanRequest,
        {"id": question.pk, "version": question.version},
        {"version": question.version + 1, **changes},
    )

    assert (stale, written) == (0, 1)
    fields = ("version", "answer", "answered_by_id", "answered_at", "comment")
    mine, theirs = (
        HumanRequest.objects.values(*fields).get(pk=pk) for pk in (question.pk, twin.pk)
    )
    assert mine == theirs
    assert mine["answer"] is None  # SQL NULL, as the ORM writes None, not JSON null.
    assert HumanRequest.objects.filter(pk=question.pk, answer__isnull=True).exists()


def test_a_stale_operation_writer_changes_nothing(propose):
    operation = propose()
    stale = Operation.objects.get(pk=operation.pk)
    _update_versioned(operation, "operation", {"status_reason": "first"})

    with pytest.raises(StaleVersion):
        _update_versioned(stale, "operation", {"status_reason": "second"})
    assert Operation.objects.get(pk=operation.pk).status_reason == "first"


def test_what_the_statements_cannot_write_as_the_orm_would_is_refused(run, reviewer):
    stored_already = checkpoint_of(run, 100, reviewer)
    stored_already.save()
    with pytest.raises(ValueError, match="insert writes new rows only"):
        statements.insert(stored_already)  # Checkpoints are append-only.
    with pytest.raises(ValueError, match="where a field is None"):
        statements.update(Checkpoint, {"id": stored_already.pk, "operation": None}, {})
    assert stored(stored_already.pk)["reason"] == "why <b>not</b>"


def operations_due(before: datetime, run_id: int, status: str):
    return (
        Operation.objects.filter(run_id=run_id, status=status, created_at__lt=before)
        .annotate(run_status=F("run__status"))
        .order_by("pk")
    )


def test_a_prepared_read_gives_what_its_queryset_gives_call_after_call(propose, run):
    first = propose("first", arguments={"from": "A", "to": "B", "amount": "1.50"})
    second = propose("second", arguments={"from": "naïve “A”", "to": "B", "amount": "2"})
    due = statements.Prepared(operations_due, before=datetime, run_id=int, status=str)
    later = second.created_at + timedelta(seconds=1)

    for before, run_id, status in [
        (later, run.pk, "proposed"),
        (second.created_at, run.pk, "proposed"),  # Not before itself: one less.
        (later, run.pk, "approved"),
        (later, run.pk + 1000, "proposed"),
        (later, run.pk, "proposed"),
    ]:
        theirs = list(operations_due(before, run_id, status))
        mine = due.instances(before=before, run_id=run_id, status=status)
        assert [o.pk for o in mine] == [o.pk for o in theirs]
        for ours, orm in zip(mine, theirs, strict=True):
            assert (ours.arguments, ours.created_at, ours.run_status) == (
                orm.arguments,
                orm.created_at,
                orm.run_status,
            )
            assert ours.arguments_hash == orm.arguments_hash
    found = due.instances(before=later, run_id=run.pk, status="proposed")
    assert [o.pk for o in found] == [first.pk, second.pk]
    assert found[1].arguments["from"] == "naïve “A”"

    def amounts(pk):
        return Operation.objects.filter(pk=pk).values_list("arguments__amount", "created_at")

    for operation in (first, second):
        expected = list(amounts(operation.pk))
        assert statements.Prepared(amounts, pk=int).rows(pk=operation.pk) == expected


def test_a_read_whose_value_does_not_reach_its_sql_is_refused():
    unused = statements.Prepared(lambda name: Run.objects.order_by("pk"), name=str)
    with pytest.raises(TypeError, match=r"\['name'\] did not reach the SQL"):
        unused.rows(name="x")
