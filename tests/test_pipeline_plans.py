"""What the pipeline reads, it finds by index: a worker's steps (what is due, the claim,
the transfer), a proposal and a reviewer's approval never read a whole table that
grows with the history. A query that did took longer with every operation ever
proposed (60,000: 10 to 43 ms each, several at every step) while a fresh database, the
benches' and the query counts', showed nothing.

Each statement is explained on the suite's database. SQLite plans without statistics,
so the same way on a small table as on a large one: ``SCAN`` reads the whole table (or
a whole index). PostgreSQL is asked to plan with sequential scans disabled, so a table
read whole means no index could serve the query; an index read without a condition on
its first column is as bad, unless it is a partial index, which holds only the rows its
condition keeps."""

import re
from decimal import Decimal

import pytest
from django.db import connection

from runs.engine.worker import Worker
from runs.models import Account, ApprovalPolicy
from runs.services.decisions import decide

# Tables that grow with people and settings, not with what agents do.
SETTINGS = {
    "auth_user",
    "auth_permission",
    "runs_project",
    "runs_membership",
    "runs_approvalpolicy",
}


def whole_reads(sql: str, params) -> list[str]:
    """The tables (or indexes) of growing tables that ``sql`` reads whole."""
    if not sql.lstrip().upper().startswith(("SELECT", "UPDATE", "DELETE", "INSERT")):
        return []
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
            aliases = {alias: table for table, alias in re.findall(r'"(\w+)" ([A-Z]\d+)', sql)}
            read = []
            for row in cursor.fetchall():
                found = re.match(r"SCAN (\w+)", row[3])
                if found and found.group(1) != "CONSTANT":
                    read.append(aliases.get(found.group(1), found.group(1)))
        else:
            cursor.execute("SET enable_seqscan = off")
            try:
                cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
                plan = cursor.fetchone()[0][0]["Plan"]
            finally:
                cursor.execute("RESET enable_seqscan")
            read = list(_pg_whole_reads(plan, _indexes()))
    return [table for table in read if table not in SETTINGS]


def _pg_whole_reads(node: dict, indexes: dict[str, tuple[str, str | None]]):
    """Tables read whole, or through an index read whole: with no condition on its
    first column, unless partial (``indexes``: each one's table and first column, None
    if partial)."""
    scan = node["Node Type"]
    if scan == "Seq Scan":
        yield node["Relation Name"]
    elif "Index" in scan:
        table, first = indexes[node["Index Name"]]
        if first is not None and not re.search(rf"\b{first}\b", node.get("Index Cond", "")):
            yield table
    for child in node.get("Plans", ()):
        yield from _pg_whole_reads(child, indexes)


def _indexes() -> dict[str, tuple[str, str | None]]:
    with connection.cursor() as cursor:
        cursor.execute(
            """SELECT index.relname, table_.relname, column_.attname, pg_index.indpred IS NULL
            FROM pg_index JOIN pg_class index ON index.oid = pg_index.indexrelid
            JOIN pg_class table_ ON table_.oid = pg_index.indrelid
            LEFT JOIN pg_attribute column_ ON column_.attrelid = pg_index.indrelid
                AND column_.attnum = pg_index.indkey[0]"""
        )
        return {index: (table, first if whole else None) for index, table, first, whole in cursor}


def assert_found_by_index(step) -> None:
    sent = []

    def keep(execute, sql, params, many, context):
        sent.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(keep):
        step()
    assert sent, "the step sent nothing"
    whole = {sql[:160]: tables for sql, params in sent if (tables := whole_reads(sql, params))}
    assert whole == {}


@pytest.fixture
def transfer(project, propose):
    ApprovalPolicy.objects.create(project=project, action="ledger.transfer", approvals_required=0)
    Account.objects.create(project=project, name="A", balance=Decimal("1000.00"))
    Account.objects.create(project=project, name="B", balance=Decimal("0.00"))
    return lambda call_id: propose(
        call_id, arguments={"from": "A", "to": "B", "amount": "1.00"}, risk="low"
    )


def test_a_worker_finds_what_is_due_and_what_to_claim_by_index(transfer):
    worker = Worker("plans")
    assert_found_by_index(worker.step)  # Idle: everything due, every minute's chores.
    transfer("t1")
    assert_found_by_index(worker.step)  # The claim and the transfer in its transaction.


def test_a_proposal_and_an_approval_find_what_they_read_by_index(propose, reviewer):
    operation = None

    def proposed():
        nonlocal operation
        operation = propose("t1")

    assert_found_by_index(proposed)
    assert_found_by_index(
        lambda: decide(
            operation=operation,
            reviewer=reviewer,
            kind="approve",
            arguments_hash=operation.arguments_hash,
        )
    )
