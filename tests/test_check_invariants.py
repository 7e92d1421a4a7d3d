"""``manage.py check_invariants`` on the demo data: silent when it is healthy, and
naming the object when someone changed the database behind the app's back."""

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection

from runs import transitions
from runs.canonical import json_hash
from runs.chain import verify_run_chain
from runs.invariants import as_shown, unfinished_operations
from runs.models import Artifact, Checkpoint, Decision, Operation, Project, Run
from tests.helpers import blob


@pytest.fixture
def demo(db, settings, tmp_path, monkeypatch):
    settings.OVERSIGHT_ARTIFACT_ROOT = tmp_path
    monkeypatch.setenv("OVERSIGHT_DEMO_PASSWORD", "demo-password-for-tests")
    call_command("seed_demo", stdout=StringIO())


def check_invariants() -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    try:
        call_command("check_invariants", stdout=out, stderr=err)
    except SystemExit as exit_:
        return exit_.code, out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


def sql(statement: str, *params) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def approve_behind_the_apps_back(**lookup) -> Operation:
    operation = Operation.objects.get(**lookup)
    sql(
        "UPDATE runs_operation SET status = 'approved', approval_expires_at = %s WHERE id = %s",
        operation.expires_at,
        operation.pk,
    )
    return operation


# Each tampering below returns the violations it must cause, and no others: for each, a
# fragment of its line or a tuple of fragments of one line.


def edit_checkpoint() -> list:
    checkpoint = Checkpoint.objects.get(run__goal__startswith="Pay invoice", seq=2)
    sql("UPDATE runs_checkpoint SET reason = 'edited' WHERE id = %s", checkpoint.pk)
    return [(f"run {checkpoint.run_id}, seq 2", "edited")]


def delete_last_checkpoint() -> list:
    run = Run.objects.get(goal__startswith="Update the README")
    last = run.checkpoints.order_by("-seq").first()
    sql("DELETE FROM runs_checkpointartifact WHERE checkpoint_id = %s", last.pk)
    sql("DELETE FROM runs_checkpoint WHERE id = %s", last.pk)
    return [(f"run {run.pk}, seq {last.seq}", f"chain ends at seq {last.seq - 1}")]


def commit_without_approval() -> list[str]:
    operation = Operation.objects.get(call_id="write-readme", status="proposed")
    sql("UPDATE runs_operation SET status = 'committed' WHERE id = %s", operation.pk)
    return [
        f"operation {operation.pk} (file.write) is committed with 0 of",
        f"shows operation {operation.pk} as proposed with 0 approval(s), but it is finished",
    ]


def approve_without_a_checkpoint() -> list:
    """Nothing executed yet, every approval rule kept: only the runs' states, carried
    forward from checkpoint to checkpoint, can see a change that made none."""
    operation = approve_behind_the_apps_back(call_id="write-readme", status="proposed")
    return [
        (
            f"run {operation.run_id}: its latest checkpoint",
            f"shows operation {operation.pk} as proposed with 0 approval(s), but it is approved",
        )
    ]


def commit_on_an_approval_an_edit_retracted() -> list[str]:
    """reviewer2 approved the transfer; reviewer edited it, then edited it back and
    took reviewer2's approval of the first arguments as the second approval."""
    operation = Operation.objects.get(call_id="pay-inv-2291")
    reviewer = get_user_model().objects.get(username="reviewer")
    edited = {**operation.arguments, "amount": "12500.00"}
    for arguments in (edited, operation.arguments):
        Decision.objects.create(
            operation=operation,
            reviewer=reviewer,
            kind=Decision.Kind.EDIT,
            arguments_hash=json_hash(arguments),
            edited_arguments=arguments,
        )
    sql("UPDATE runs_operation SET status = 'committed' WHERE id = %s", operation.pk)
    return [
        f"operation {operation.pk} (ledger.transfer) is committed with 1 of the 2 approvals",
        f"shows operation {operation.pk} as proposed with 1 approval(s), but it is finished",
    ]


def delete_artifact_file() -> list[str]:
    artifact = Artifact.objects.get(refs__name="README.md")
    blob(artifact).unlink()
    return [f"artifact {artifact.sha256} is referenced by a checkpoint but missing"]


def approve_in_cancelled_run() -> list[str]:
    operation = approve_behind_the_apps_back(call_id="run-migration", run__status="cancelled")
    return [
        f"operation {operation.pk} is approved but its run {operation.run_id} has ended",
        f"shows operation {operation.pk} as finished (or absent), but it is approved",
    ]


def move_checkpoint_to_another_project() -> list[str]:
    checkpoint = Checkpoint.objects.get(run__goal__startswith="Pay invoice", seq=2)
    other = Project.objects.create(slug="elsewhere", name="Elsewhere")
    sql("UPDATE runs_checkpoint SET project_id = %s WHERE id = %s", other.pk, checkpoint.pk)
    return [f"checkpoint {checkpoint.pk} (run {checkpoint.run_id}, seq 2) is filed under another"]


def test_demo_data_satisfies_every_invariant(demo):
    code, out, err = check_invariants()
    assert (code, err) == (0, "")
    assert "all invariants hold" in out


def test_every_state_carried_forward_is_what_a_full_count_finds_at_its_moment(
    db, settings, tmp_path, monkeypatch
):
    """The demo's runs go through edits that retract approvals, two-person and policy
    approvals, execution, rollback, alerts, cancellation and expiry: at every one of
    their checkpoints, the unfinished operations carried forward from the checkpoint
    before are exactly those a full count finds in the same transaction."""
    carried, written, drift = transitions._state, [], []

    def checked(run, *args):
        state = carried(run, *args)
        written.append(run.pk)
        if as_shown(state) != unfinished_operations(run.pk).get(run.pk, {}):
            drift.append((run.pk, run.version, state["pending_operations"]))
        return state

    monkeypatch.setattr(transitions, "_state", checked)
    settings.OVERSIGHT_ARTIFACT_ROOT = tmp_path
    monkeypatch.setenv("OVERSIGHT_DEMO_PASSWORD", "demo-password-for-tests")
    call_command("seed_demo", stdout=StringIO())
    assert len(written) == Checkpoint.objects.count() > 50
    assert drift == []


def test_every_demo_run_has_an_unbroken_chain(demo):
    assert Run.objects.count() >= 5
    assert [verify_run_chain(run) for run in Run.objects.all()] == [None] * Run.objects.count()


@pytest.mark.parametrize(
    "tamper",
    [
        edit_checkpoint,
        delete_last_checkpoint,
        commit_without_approval,
        commit_on_an_approval_an_edit_retracted,
        approve_without_a_checkpoint,
        delete_artifact_file,
        approve_in_cancelled_run,
        move_checkpoint_to_another_project,
    ],
)
def test_tampering_is_reported_by_name_and_fails_the_check(demo, tamper):
    expected = tamper()
    code, out, err = check_invariants()
    assert code == 1
    assert "all invariants hold" not in out
    # Each expected violation (its fragments) on a line of its own, and no other.
    lines = err.splitlines()
    assert lines[-1] == f"{len(expected)} invariant violation(s)"
    violations = [line for line in lines if line.startswith("violation: ")]
    assert len(violations) == len(expected), err
    for fragments in expected:
        fragments = (fragments,) if isinstance(fragments, str) else fragments
        assert any(all(f in line for f in fragments) for line in violations), (fragments, err)
