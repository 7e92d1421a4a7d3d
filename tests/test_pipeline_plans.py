"""What the pipeline reads, it finds by index: a worker's steps (what is due, the claim,
the effect, the way there in one transaction and step by step), a proposal and a
reviewer's approval never read a whole table that grows with the history. A query that
did took longer with every operation ever proposed (60,000: 10 to 40 ms each, several
at every step) while a fresh database, the benches' and the query counts', showed
nothing.

Each statement is explained on the suite's database. SQLite plans without statistics,
so the same way on a small table as on a large one: ``SCAN`` reads the whole table (or
a whole index). PostgreSQL is asked to plan with sequential scans disabled, and with the
sizes of its tables unknown (what other tests left would decide it), so a table read
whole means no index could serve the query; an index read without a condition on
its first column (or, for an index on an expression, without any) is as bad, unless
it is a partial index, which holds only the rows its condition keeps."""

import logging
import re
from decimal import Decimal

import pytest
from django.apps import apps
from django.db import connection

from runs.engine.worker import Worker
from runs.models import Account, ApprovalPolicy, Operation
from runs.services.decisions import decide
from runs.shared_workspace import marked, record, workspace_root

# Tables that grow with people and settings, not with what agents do.
SETTINGS = {
    "auth_user",
    "auth_user_groups",
    "auth_group",
    "auth_group_permissions",
    "auth_permission",
    "runs_project",
    "runs_membership",
    "runs_provideridentity",
    "runs_approvalpolicy",
    "runs_webhookendpoint",
    "runs_agenttoken",  # issued by admins: a worker's minutely look for those that ended
}
EXPLAINED = ("SELECT", "UPDATE", "DELETE", "INSERT", "WITH", "(")
TRANSACTION_CONTROL = ("SAVEPOINT", "RELEASE", "ROLLBACK", "BEGIN", "COMMIT")


def whole_reads(sql: str, params) -> list[str]:
    """The growing tables ``sql`` reads whole."""
    statement = sql.lstrip().upper()
    if not statement.startswith(EXPLAINED):
        assert statement.startswith(TRANSACTION_CONTROL), f"cannot explain: {sql}"
        return []
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
            read = _sqlite_whole_reads(sql, [row[3] for row in cursor.fetchall()])
        else:
            cursor.execute("SET enable_seqscan = off")
            try:
                cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
                plan = cursor.fetchone()[0][0]["Plan"]
            finally:
                cursor.execute("RESET enable_seqscan")
            read = list(_pg_whole_reads(plan, _indexes()))
    return [table for table in read if table not in SETTINGS]


def _sqlite_whole_reads(sql: str, plan: list[str]) -> list[str]:
    """Tables ``SCAN``ned. Django names a subquery's tables U0, U1…, and two subqueries
    may each have a U0: a scanned alias counts for every table it names."""
    aliases: dict[str, set[str]] = {}
    for table, alias in re.findall(r'"(\w+)" "?([A-Z]\d+)\b', sql):  # Django quotes them
        aliases.setdefault(alias, set()).add(table)
    read = []
    for detail in plan:
        if found := re.match(r"SCAN (\w+)", detail):
            name = found.group(1)
            if name != "CONSTANT":  # SCAN CONSTANT ROW: a SELECT of no table.
                read.extend(sorted(aliases.get(name, {name})))
    return read


def _pg_whole_reads(node: dict, indexes: dict[str, tuple[str, str | None, bool]]):
    """Tables read whole, or through an index read whole (``indexes``: each one's
    table, first column (None for an expression) and whether it is partial)."""
    scan = node["Node Type"]
    if scan == "Seq Scan":
        yield node["Relation Name"]
    elif "Index" in scan:
        table, first, partial = indexes[node["Index Name"]]
        condition = node.get("Index Cond", "")
        bounded = bool(condition) if first is None else re.search(rf"\b{first}\b", condition)
        if not (partial or bounded):
            yield table
    for child in node.get("Plans", ()):
        yield from _pg_whole_reads(child, indexes)


def _indexes() -> dict[str, tuple[str, str | None, bool]]:
    with connection.cursor() as cursor:
        cursor.execute(
            """SELECT index.relname, table_.relname, column_.attname, pg_index.indpred IS NOT NULL
            FROM pg_index JOIN pg_class index ON index.oid = pg_index.indexrelid
            JOIN pg_class table_ ON table_.oid = pg_index.indrelid
            LEFT JOIN pg_attribute column_ ON column_.attrelid = pg_index.indrelid
                AND column_.attnum = pg_index.indkey[0]"""
        )
        return {index: (table, first, partial) for index, table, first, partial in cursor}


@pytest.fixture(autouse=True)
def planned_as_never_analysed(db):
    """On PostgreSQL, the planner sizes each table by what it last gathered of it, and
    other tests leave that behind as the suite's order and timing have it: a table
    last analysed with one run in it is rightly read whole. Emptied in this test's
    transaction, every table of the app has an unknown size again (the planner then
    assumes ten pages, as on a new database) until the transaction is rolled back."""
    if connection.vendor == "postgresql":
        tables = ", ".join(
            f'"{model._meta.db_table}"' for model in apps.get_app_config("runs").get_models()
        )
        with connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {tables} CASCADE")


@pytest.fixture
def found_by_index(caplog):
    """Call ``step`` and assert that what it read, it found by index. The worker logs
    its own failures and goes on: a failure would hide the statements it did not send,
    so none may be logged."""

    def check(step):
        sent = []

        def keep(execute, sql, params, many, context):
            sent.append((sql, params))
            return execute(sql, params, many, context)

        with caplog.at_level(logging.WARNING), connection.execute_wrapper(keep):
            result = step()
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
        assert sent, "the step sent nothing"
        whole = {sql[:160]: read for sql, params in sent if (read := whole_reads(sql, params))}
        assert whole == {}
        return result

    return check


@pytest.fixture
def transfer(project, propose):
    ApprovalPolicy.objects.create(project=project, action="ledger.transfer", approvals_required=0)
    Account.objects.create(project=project, name="A", balance=Decimal("1000.00"))
    Account.objects.create(project=project, name="B", balance=Decimal("0.00"))
    return lambda call_id: propose(
        call_id, arguments={"from": "A", "to": "B", "amount": "1.00"}, risk="low"
    )


@pytest.mark.parametrize("at_once", [True, False], ids=["in one transaction", "step by step"])
def test_a_worker_finds_what_is_due_and_what_to_claim_by_index(transfer, found_by_index, at_once):
    worker = Worker("plans", at_once=at_once)
    # The installation's workspace is recorded: until then, a worker's heartbeat asks
    # once whether a file was ever written (runs.shared_workspace), reading it whole.
    record(marked(workspace_root()), "first worker")
    found_by_index(worker.step)  # Idle: everything due, every minute's chores.
    operation = found_by_index(lambda: transfer("t1"))  # Approved by the policy.
    assert found_by_index(worker.step)  # The claim and the transfer.
    operation.refresh_from_db()
    assert operation.status == Operation.Status.COMMITTED


def test_a_proposal_and_an_approval_find_what_they_read_by_index(propose, reviewer, found_by_index):
    operation = found_by_index(lambda: propose("t1"))
    found_by_index(
        lambda: decide(
            operation=operation,
            reviewer=reviewer,
            kind="approve",
            arguments_hash=operation.arguments_hash,
        )
    )
