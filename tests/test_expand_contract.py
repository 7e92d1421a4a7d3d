"""Migrations expand, and contract only a release later: the previous release's processes
keep working against this code's schema during a rolling upgrade. Every table and column
that release's models read and write is still there, and every column added since can
be left out of its INSERTs (it is NULL-able or has a default in the database itself,
``db_default``, as a Python ``default`` is known to the new code alone)."""

import pytest
from django.db import connection
from django.db.migrations.loader import MigrationLoader

from tests import previous_release


def release_models():
    """The models of the previous release, as its migrations left them."""
    state = MigrationLoader(None, ignore_no_migrations=True).project_state(
        previous_release.LAST_MIGRATION
    )
    return [
        model
        for model in state.apps.get_models(include_auto_created=True)
        if model._meta.app_label == "runs"
    ]


@pytest.mark.django_db
def test_what_the_previous_release_writes_still_fits_the_schema():
    problems = []
    with connection.cursor() as cursor:
        tables = set(connection.introspection.table_names(cursor))
        for model in release_models():
            table = model._meta.db_table
            if table not in tables:
                problems.append(f"{table}: gone, and {previous_release.VERSION} uses it")
                continue
            known = {field.column for field in model._meta.local_concrete_fields}
            columns = {
                c.name: c for c in connection.introspection.get_table_description(cursor, table)
            }
            problems += [
                f"{table}.{column}: gone, and {previous_release.VERSION} writes it"
                for column in sorted(known - columns.keys())
            ]
            problems += [
                f"{table}.{name}: NOT NULL without a database default, and "
                f"{previous_release.VERSION}'s INSERTs leave it out"
                for name, column in sorted(columns.items())
                if name not in known and not column.null_ok and column.default is None
            ]
    assert not problems, "\n".join(problems)
