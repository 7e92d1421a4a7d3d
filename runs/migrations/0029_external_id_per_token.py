"""An external id is a name of the token that created the object, no longer of the
project: two agents of a project may each call something "deploy-1", and neither can
learn (from a 409) or take the other's names (#35). Objects created without a token
keep sharing the project's names among themselves.

A run reaches its token through its session, which a unique constraint cannot follow:
each run is given its session's token in a column of its own, a batch at a time.

Existing names were unique in their project, so they are unique per token too: the new
constraints hold on every existing row. They are built before the old ones are dropped,
so a name is never unguarded. On PostgreSQL the constraints and the run's token index
are built ``CONCURRENTLY`` and its foreign key checked after it is added, so that agents
go on writing meanwhile (``_online``): the migration is not atomic, each step commits
on its own, and each can be taken again. Migrating back fails if two tokens of a project
have used one name since.
"""

from copy import copy

from django.db import migrations, models
from django.db.models import OuterRef, Subquery

from runs.migrations._online import _drop_if_there, _unbounded, add_index, remove_index

BATCH = 10_000
NAMED = ~models.Q(external_id="")


def named_per_token(kind: str, token: str) -> list[models.UniqueConstraint]:
    return [
        models.UniqueConstraint(
            fields=[token, "external_id"], condition=NAMED, name=f"{kind}_external_id_per_token"
        ),
        models.UniqueConstraint(
            fields=["project", "external_id"],
            condition=NAMED & models.Q(**{f"{token}__isnull": True}),
            name=f"{kind}_external_id_tokenless",
        ),
    ]


# Each model with an external id: its constraints' prefix, and the field naming its token.
KINDS = {
    "session": ("session", "token"),
    "run": ("run", "token"),
    "operation": ("operation", "proposed_by_token"),
    "humanrequest": ("request", "asked_by_token"),
}
PER_PROJECT = {
    model: [
        models.UniqueConstraint(
            fields=["project", "external_id"], condition=NAMED, name=f"{kind}_unique_external_id"
        )
    ]
    for model, (kind, _) in KINDS.items()
}
PER_TOKEN = {model: named_per_token(kind, token) for model, (kind, token) in KINDS.items()}


def _online(schema_editor) -> bool:
    return schema_editor.connection.vendor == "postgresql"


def _token_foreign_keys(schema_editor, Run) -> list[str]:
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, Run._meta.db_table)
    return [
        name
        for name, constraint in constraints.items()
        if constraint["foreign_key"] and constraint["columns"] == ["token_id"]
    ]


def add_token_column(apps, schema_editor) -> None:
    """The column, without its index (built later, concurrently); on PostgreSQL its
    foreign key ``NOT VALID``: rows written from now on are checked at once, the others
    once filled in (``check_token_key``), without stopping writers."""
    Run = apps.get_model("runs", "Run")
    field = Run._meta.get_field("token")
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        columns = connection.introspection.get_table_description(cursor, Run._meta.db_table)
    if field.column not in {column.name for column in columns}:
        bare = copy(field)
        bare.db_index, bare.db_constraint = False, not _online(schema_editor)
        schema_editor.add_field(Run, bare)
    if _online(schema_editor) and not _token_foreign_keys(schema_editor, Run):
        key = schema_editor._create_fk_sql(Run, field, "_fk_%(to_table)s_%(to_column)s")
        schema_editor.execute(f"{key} NOT VALID")


def remove_token_column(apps, schema_editor) -> None:
    Run = apps.get_model("runs", "Run")
    schema_editor.remove_field(Run, Run._meta.get_field("token"))


def give_runs_their_token(apps, schema_editor) -> None:
    """Each run takes its session's token, ``BATCH`` runs a statement: on PostgreSQL
    each commits on its own, so no writer waits on many rows for long."""
    Run = apps.get_model("runs", "Run")
    of_session = apps.get_model("runs", "Session").objects.filter(pk=OuterRef("session_id"))
    to_fill = Run.objects.filter(token__isnull=True, session__token__isnull=False).order_by("pk")
    after = 0
    while batch := list(to_fill.filter(pk__gt=after).values_list("pk", flat=True)[:BATCH]):
        Run.objects.filter(pk__in=batch).update(token=Subquery(of_session.values("token")[:1]))
        after = batch[-1]


def check_token_key(apps, schema_editor) -> None:
    """``VALIDATE CONSTRAINT`` reads every run but lets writers through."""
    if not _online(schema_editor):
        return
    Run = apps.get_model("runs", "Run")
    table = schema_editor.quote_name(Run._meta.db_table)
    with _unbounded(schema_editor):
        for name in _token_foreign_keys(schema_editor, Run):
            schema_editor.execute(
                f"ALTER TABLE {table} VALIDATE CONSTRAINT {schema_editor.quote_name(name)}"
            )


def _token_index(schema_editor, Run) -> models.Index:
    """The index Django gives a foreign key, under the name it would give it."""
    return models.Index(
        fields=["token"], name=schema_editor._create_index_name(Run._meta.db_table, ["token_id"])
    )


def index_token(apps, schema_editor) -> None:
    Run = apps.get_model("runs", "Run")
    add_index(schema_editor, Run, _token_index(schema_editor, Run))


def unindex_token(apps, schema_editor) -> None:
    Run = apps.get_model("runs", "Run")
    remove_index(schema_editor, Run, _token_index(schema_editor, Run))


def _add_unique(schema_editor, model, constraint: models.UniqueConstraint) -> None:
    """A partial unique constraint is a unique index (on either database): built as one,
    ``CONCURRENTLY`` on PostgreSQL, after any invalid one a failed build left."""
    _drop_if_there(schema_editor, constraint)
    if not _online(schema_editor):
        schema_editor.add_constraint(model, constraint)
        return
    sql = str(constraint.create_sql(model, schema_editor))
    concurrently = sql.replace("CREATE UNIQUE INDEX", "CREATE UNIQUE INDEX CONCURRENTLY", 1)
    with _unbounded(schema_editor):
        schema_editor.execute(concurrently)


def _swap(apps, schema_editor, added: dict, dropped: dict) -> None:
    for name in KINDS:
        model = apps.get_model("runs", name)
        for constraint in added[name]:
            _add_unique(schema_editor, model, constraint)
    for name in KINDS:
        for constraint in dropped[name]:
            remove_index(schema_editor, apps.get_model("runs", name), constraint)


def name_per_token(apps, schema_editor) -> None:
    _swap(apps, schema_editor, PER_TOKEN, PER_PROJECT)


def name_per_project(apps, schema_editor) -> None:
    _swap(apps, schema_editor, PER_PROJECT, PER_TOKEN)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("runs", "0028_token_issuer")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name="run",
                    name="token",
                    field=models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=models.deletion.PROTECT,
                        related_name="runs",
                        to="runs.agenttoken",
                    ),
                ),
            ],
        ),
        # Run with the field in the state: both directions find it there.
        migrations.RunPython(add_token_column, remove_token_column),
        migrations.RunPython(give_runs_their_token, migrations.RunPython.noop),
        migrations.RunPython(check_token_key, migrations.RunPython.noop),
        migrations.RunPython(index_token, unindex_token),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                *(
                    migrations.RemoveConstraint(model_name=name, name=constraint.name)
                    for name, constraints in PER_PROJECT.items()
                    for constraint in constraints
                ),
                *(
                    migrations.AddConstraint(model_name=name, constraint=constraint)
                    for name, constraints in PER_TOKEN.items()
                    for constraint in constraints
                ),
            ],
            database_operations=[migrations.RunPython(name_per_token, name_per_project)],
        ),
    ]
