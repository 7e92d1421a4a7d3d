"""A database as the first migration left it: the schema commit c632985 ("Foundation")
made, with the data that commit's own code wrote (tests/fixtures/make_first_migration.py
made the fixtures and says how). ``make_first_migration_database()`` turns the default
database into that, on SQLite or PostgreSQL; ``manage.py migrate`` then upgrades it.

The schema comes from that commit's runs/migrations/0001_initial.py, kept byte for byte:
today's file was edited in place after that commit, so migrating back to it would make
a schema no database of that time has. Rows go in through the historical models of that
state (``loaddata`` would use today's models, which do not fit the old tables), with their
ids, and the artifacts' bytes go to the artifact store."""

import base64
import json
from collections import defaultdict
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader
from pathlib import Path

from django.core.management.color import no_style
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.recorder import MigrationRecorder
from django.db.migrations.state import StateApps

from tests.helpers import blob

FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE = json.loads((FIXTURES / "first_migration.json").read_text())
FIRST_RUNS_MIGRATION = FIXTURES / "first_migration_0001_initial.py.txt"


def make_first_migration_database() -> StateApps:
    """Empty the default database, give it the first migration's schema and the
    fixture's rows, and store the artifacts; return the models of that state."""
    apps = migrate_to_first_migration()
    load_rows(apps)
    for sha256, content in FIXTURE["blobs"].items():
        path = blob(sha256)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(content))
    return apps


def migrate_to_first_migration() -> StateApps:
    """An empty database migrated as that commit would have: every app to its migration of
    that time (none for apps added since), runs with that commit's own 0001_initial."""
    empty_database()
    executor = MigrationExecutor(connection)
    others = [(app, name) for app, name in FIXTURE["migrations"] if app != "runs"]
    executor.migrate(others)
    state = executor.loader.project_state(others, at_end=True)
    loader = SourceFileLoader("first_runs_migration", str(FIRST_RUNS_MIGRATION))
    module = module_from_spec(spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return executor.apply_migration(state, module.Migration("0001_initial", "runs")).apps


def empty_database() -> None:
    """Drop every table and forget every migration: faster than migrating back, and it
    leaves nothing today's migrations made."""
    tables = set(connection.introspection.table_names()) - {"django_migrations"}
    with connection.schema_editor() as editor:
        for table in sorted(tables):
            editor.execute(editor.sql_delete_table % {"table": editor.quote_name(table)})
    recorder = MigrationRecorder(connection)
    if recorder.has_table():
        recorder.flush()


def load_rows(apps: StateApps) -> None:
    """Insert the fixture's rows, ids included."""
    models = list(dict.fromkeys(apps.get_model(row["model"]) for row in FIXTURE["rows"]))
    links = defaultdict(list)
    for row in FIXTURE["rows"]:
        model = apps.get_model(row["model"])
        values = {}
        for name, value in row["fields"].items():
            field = model._meta.get_field(name)
            if field.many_to_many:
                links[field] += [(row["pk"], other) for other in value]
            else:
                values[field.attname] = field.to_python(value)
        # raw, as loaddata saves: auto_now fields keep the fixture's times.
        model(pk=row["pk"], **values).save_base(raw=True, force_insert=True)
    for field, pairs in links.items():
        through = field.remote_field.through
        source, target = f"{field.m2m_field_name()}_id", f"{field.m2m_reverse_field_name()}_id"
        through._base_manager.bulk_create(through(**{source: s, target: t}) for s, t in pairs)
        models.append(through)
    # Rows came with their ids: PostgreSQL's sequences must continue after them.
    with connection.cursor() as cursor:
        for sql in connection.ops.sequence_reset_sql(no_style(), models):
            cursor.execute(sql)
