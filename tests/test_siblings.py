"""An operation's page shows the others waiting on the same target, and what they would
do together (#34 item 8): two transfers from one account may each fit while together
they overdraw it; two writes may each expect the file as it is, and only the first can
then succeed. Each operation names its target (``Action.target``) when it is proposed
or edited; the page reads the others in one query, however many wait."""

import re
from decimal import Decimal

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.recorder import MigrationRecorder
from django.test.utils import CaptureQueriesContext

from runs.actions.files import workspace_of
from runs.actions.registry import target_of
from runs.canonical import sha256_hex
from runs.models import Account, Operation
from runs.services.runs import open_session, start_run
from runs.siblings import SHOWN
from tests.conftest import AGENT, http_arguments
from tests.helpers import decide_on, page_of
from tests.test_migration_isolation import migrate

pytestmark = pytest.mark.django_db


def transfer(propose, call_id: str, amount: str, source: str = "A", run=None, **more):
    arguments = {"from": source, "to": "B", "amount": amount, **more}
    return propose(call_id, target=run, arguments=arguments)


def write(propose, call_id: str, content: str, expected: str | None, path: str = "notes.md"):
    arguments = {"path": path, "content": content, "expected_sha256": expected}
    return propose(call_id, action="file.write", arguments=arguments, rollback_kind="in_band")


def card(client, op: Operation) -> str | None:
    """The card of the others waiting on ``op``'s target, as the page shows it."""
    page = client.get(page_of(op))
    assert page.status_code == 200
    found = re.search(r'<section class="card siblings".*?</section>', page.text, re.S)
    return found[0] if found else None


def listed(card_html: str) -> list[int]:
    return [int(pk) for pk in re.findall(r'id="sibling-(\d+)"', card_html)]


def together(card_html: str) -> str:
    return " ".join(re.search(r'role="note">(.*?)</p>', card_html, re.S)[1].split())


@pytest.fixture
def as_reviewer(client, reviewer):
    client.force_login(reviewer)
    return client


# --- What each operation acts on --------------------------------------------------------


def test_each_action_names_what_it_acts_on(propose, target):
    email = {"to": ["a@example.com"], "subject": "Q3", "body": "."}
    assert transfer(propose, "t", "10").target == "account A"
    assert write(propose, "w", "x", None, path="./notes//today.md").target == "file notes/today.md"
    call = propose(
        "h",
        action="http.request",
        arguments=http_arguments(target.base),
        rollback_kind="out_of_band",
    )
    assert call.target == f"host {target.base.removeprefix('http://')}"
    mail = propose("e", action="email.send", arguments=email, rollback_kind="out_of_band")
    assert mail.target == ""  # Two emails share nothing that adds up.
    assert propose("x", action="crm.update", arguments={"id": 1}).target == ""


def test_a_target_too_long_for_its_column_stays_apart_from_another():
    most = Operation._meta.get_field("target").max_length
    folders = "a" * 200 + "/" + "b" * 100
    cut = [
        target_of("file.write", {"path": path, "content": "", "expected_sha256": None})
        for path in (f"{folders}/one.md", f"{folders}/other.md")
    ]
    assert all(len(target) == most and target.startswith("file aaa") for target in cut)
    assert cut[0] != cut[1]
    assert target_of("file.write", {"path": "/etc/passwd"}) == ""  # Not its schema.


def test_an_edit_moves_the_operation_to_the_target_of_its_edited_arguments(
    propose, reviewer, reviewer2, accounts, project
):
    Account.objects.create(project=project, name="C", balance=Decimal("10"))
    op = transfer(propose, "t", "100", require_balance_above="1")
    # Two approvals, so that the edit leaves it waiting (and listed) for the second.
    Operation.objects.filter(pk=op.pk).update(required_approvals=2)
    decide_on(op, reviewer, "edit", arguments={"from": "C", "to": "B", "amount": "5"})
    assert (op.status, op.target) == ("proposed", "account C")


# --- The card ---------------------------------------------------------------------------


def test_two_transfers_that_each_fit_are_shown_to_overdraw_their_account_together(
    as_reviewer, propose, accounts
):
    first = transfer(propose, "t1", "3000")
    second = transfer(propose, "t2", "2500")
    shown = card(as_reviewer, first)
    assert "Also waiting on account A" in shown
    assert listed(shown) == [second.pk]
    assert "A → B: 2,500.00" in shown and "proposed by test-agent" in shown
    assert 'class="notice"' in shown
    assert together(shown) == (
        "Together they would overdraw A, though each fits on its own: these 2 transfers, "
        "this one included, draw 5,500.00 from it, 500.00 more than the 5,000.00 it holds "
        "now. Those carried out first go through; the others will be refused."
    )
    assert listed(card(as_reviewer, second)) == [first.pk]  # Each page shows the other.


def test_transfers_that_fit_together_say_what_they_would_leave(as_reviewer, propose, accounts):
    first = transfer(propose, "t1", "1000")
    transfer(propose, "t2", "1500.50")
    shown = card(as_reviewer, first)
    assert 'class="notice"' not in shown
    assert together(shown) == (
        "Together these 2 transfers, this one included, would draw 2,500.50 from A, which "
        "holds 5,000.00 now: they would leave 2,499.50."
    )


def test_a_floor_one_of_them_requires_is_named_when_the_others_would_reach_it(
    as_reviewer, propose, accounts
):
    first = transfer(propose, "t1", "1000", require_balance_above="3000")
    transfer(propose, "t2", "2500")
    said = together(card(as_reviewer, first))
    assert said.endswith(
        "they would leave 1,500.00. Made after the others, 1 of them would be refused: A "
        "would no longer be above the floor set in their require_balance_above."
    )


def test_only_others_waiting_on_the_same_target_in_the_same_project_are_listed(
    as_reviewer, propose, accounts, project, reviewer, other_project, owner
):
    Account.objects.create(project=project, name="C", balance=Decimal("10"))
    op = transfer(propose, "t1", "100")
    sibling = transfer(propose, "t2", "100")
    transfer(propose, "from-c", "100", source="C")
    decided = transfer(propose, "t3", "100")
    decide_on(decided, reviewer)
    elsewhere = start_run(
        session=open_session(project=other_project, owner=owner, agent="x", title="t"),
        goal="g",
        actor=AGENT,
    )
    transfer(propose, "t4", "100", run=elsewhere)
    assert listed(card(as_reviewer, op)) == [sibling.pk]


def test_no_card_for_a_lone_operation_nor_once_it_is_decided(
    as_reviewer, propose, accounts, reviewer
):
    op = transfer(propose, "t1", "100")
    assert card(as_reviewer, op) is None
    sibling = transfer(propose, "t2", "100")
    decide_on(op, reviewer)
    assert card(as_reviewer, op) is None  # Approved: nothing more to weigh.
    assert card(as_reviewer, sibling) is None  # The approved one waits no more.


def test_writes_each_expecting_the_file_as_it_is_can_only_all_fail_but_the_first(
    as_reviewer, propose, project
):
    old = b"old\n"
    path = workspace_of(project) / "notes.md"
    path.parent.mkdir(parents=True)
    path.write_bytes(old)
    first = write(propose, "w1", "one\n", sha256_hex(old))
    write(propose, "w2", "two\n", sha256_hex(old))
    write(propose, "w3", "three\n", sha256_hex(b"one\n"))  # Built on the first.
    write(propose, "w4", "four\n", sha256_hex(b"gone\n"))
    shown = card(as_reviewer, first)
    assert "Also waiting on file notes.md" in shown and 'class="notice"' in shown
    assert together(shown) == (
        "Of these 4 writes of notes.md, this one included, 2 expect the file as it is now: "
        "only the first of them made can succeed, and the others will then find the file "
        "changed and be refused. 1 expects the version another of them writes. 1 expects a "
        "version that is not there now."
    )


def test_writes_expecting_a_file_that_is_not_there_say_so(as_reviewer, propose):
    first = write(propose, "w1", "one\n", sha256_hex(b"gone\n"))
    write(propose, "w2", "two\n", sha256_hex(b"gone\n"))
    assert together(card(as_reviewer, first)) == (
        "Of these 2 writes of notes.md, this one included, none expect the file as it is "
        "now (absent). 2 expect a version that is not there now."
    )


def test_what_cannot_be_read_together_is_said_and_the_page_still_shows(
    as_reviewer, propose, project, tmp_path
):
    workspace = workspace_of(project)
    workspace.mkdir(parents=True)
    (workspace / "out").symlink_to(tmp_path)  # A folder leading out of the workspace.
    first = write(propose, "w1", "one\n", None, path="out/x.md")
    write(propose, "w2", "two\n", None, path="out/x.md")
    assert together(card(as_reviewer, first)) == (
        "What they would do together could not be read now: out/x.md leads outside the workspace."
    )


def test_calls_to_one_host_are_listed_with_nothing_said_of_them_together(
    as_reviewer, propose, target
):
    calls = [
        propose(
            f"h{n}",
            action="http.request",
            arguments=http_arguments(target.base),
            rollback_kind="out_of_band",
        )
        for n in range(2)
    ]
    shown = card(as_reviewer, calls[0])
    assert listed(shown) == [calls[1].pk] and 'role="note"' not in shown


def test_the_agent_s_names_are_escaped(as_reviewer, propose, project):
    for name in ("<b>ops</b>", "B"):
        Account.objects.create(project=project, name=name, balance=Decimal("100"))
    first = transfer(propose, "t1", "60", source="<b>ops</b>")
    transfer(propose, "t2", "60", source="<b>ops</b>")
    shown = card(as_reviewer, first)
    assert "<b>" not in shown
    assert "Also waiting on account &lt;b&gt;ops&lt;/b&gt;" in shown
    assert "overdraw &lt;b&gt;ops&lt;/b&gt;, though each fits on its own" in shown


@pytest.mark.parametrize("others", [1, SHOWN + 5])
def test_the_page_takes_as_many_queries_however_many_wait_on_the_target(
    client, reviewer, propose, accounts, others, django_assert_num_queries
):
    """The others in one query (the first ones, and the count of all), and the balance
    they draw on in one more: as many with one other as with more than are listed."""
    op = transfer(propose, "t0", "10")
    for n in range(others):
        transfer(propose, f"t{n + 1}", "10")
    client.force_login(reviewer)
    client.get(page_of(op))  # The first visit stores the time zone in the session.
    Operation.objects.exclude(pk=op.pk).update(target="account elsewhere")
    with CaptureQueriesContext(connection) as alone:  # Its query finds none.
        client.get(page_of(op))
    Operation.objects.exclude(pk=op.pk).update(target="account A")
    with django_assert_num_queries(len(alone) + 1):
        shown = card(client, op)
    assert len(listed(shown)) == min(others, SHOWN)
    assert ("And 5 more waiting on it" in shown) == (others > SHOWN)
    assert ("The 5 more waiting after the ones listed are not counted." in shown) == (
        others > SHOWN
    )


# --- The migration ----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_migration_names_the_target_of_operations_still_waiting():
    apps = migrate([("runs", "0026_notified_requests")])
    try:
        user = apps.get_model("auth", "User").objects.create(username="owner")
        project = apps.get_model("runs", "Project").objects.create(slug="p", name="P")
        session = apps.get_model("runs", "Session").objects.create(project=project, owner=user)
        run = apps.get_model("runs", "Run").objects.create(
            project=project, session=session, goal="g", version=1
        )
        arguments = {"from": "A", "to": "B", "amount": "1"}
        made = {
            status: apps.get_model("runs", "Operation")
            .objects.create(
                run=run,
                project=project,
                call_id=status,
                action="ledger.transfer",
                proposed_arguments=arguments,
                arguments=arguments,
                idempotency_key=status,
                rollback_kind="compensating",
                required_approvals=1,
                base_version=1,
                status=status,
                expires_at="2030-01-01T00:00:00Z",
            )
            .pk
            for status in ("proposed", "rejected")
        }
        migrate([("runs", "0027_operation_target")])
    finally:
        apps = migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
    targets = dict(apps.get_model("runs", "Operation").objects.values_list("pk", "target"))
    assert targets == {made["proposed"]: "account A", made["rejected"]: ""}


@pytest.mark.django_db(transaction=True)
def test_the_migration_interrupted_after_its_column_runs_again_from_the_start():
    """Not atomic (its index is built concurrently on PostgreSQL), it can stop with the
    column added and the index not built: run again, it adds no column twice."""
    migrate([("runs", "0027_operation_target")])
    try:
        with connection.schema_editor(atomic=False) as editor:
            editor.execute("DROP INDEX operation_target_idx")
        MigrationRecorder(connection).record_unapplied("runs", "0027_operation_target")
        migrate([("runs", "0027_operation_target")])
        with connection.cursor() as cursor:
            built = connection.introspection.get_constraints(cursor, "runs_operation")
        assert "operation_target_idx" in built
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
