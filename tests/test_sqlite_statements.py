"""Oversight's SQLite backend converts a statement's placeholders once per process: the
same statement sent again, with other values, gets them, and a literal ``%`` written
``%%`` stays one ``%``."""

import pytest
from django.db import connection

pytestmark = pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's placeholders")


@pytest.mark.django_db
def test_a_statement_sent_again_gets_its_new_values_and_keeps_its_literal_percent():
    statement = "SELECT %s, '100%%', %s || '%%'"
    with connection.cursor() as cursor:
        for first, second in [(1, "a"), (2, "b"), (3, "c")]:
            cursor.execute(statement, [first, second])
            assert cursor.fetchone() == (first, "100%", f"{second}%")
        cursor.execute("SELECT %(name)s", {"name": "named"})
        assert cursor.fetchone() == ("named",)
