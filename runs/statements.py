"""The rows every state change writes, in statements prepared once per shape.

A transition updates its operation (or request) and its run, and appends a checkpoint.
Through the ORM each of those statements is built and compiled again every time: 0.3
to 0.45 ms of Python for one row, where the database takes a few hundredths, and a
worker makes three transitions per operation. Here the SQL is what the ORM writes for
the same change, built once per model and set of columns, and every value goes through
its field's own preparation (``get_db_prep_save``), as ``save()`` and ``update()`` send
it. Only for plain values: an expression (``F``, ``Now()``) needs the ORM.

The reads a worker makes for every operation cost the same way, but their conditions are
the ORM's (``claimable`` is a query of its own, kept in one place): a ``Prepared`` read
lets the ORM build and compile its queryset once per database, and then sends the same
SQL with each call's values, converted back as the ORM converts them.
"""

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import cache

from django.db import DEFAULT_DB_ALIAS, connection, connections, models
from django.db.models.signals import post_save, pre_save

# A value of each kind a ``Prepared`` read may take, unlike the constants in its query
# (an int within every integer field's range: the ORM drops a condition on a value out of
# range); and how the ORM sends a value of that kind to the database (as the field it is
# compared with does).
_MARKS = {
    int: lambda n: 30_011 + 7 * n,
    str: lambda n: f"\x00prepared-{n}",
    datetime: lambda n: datetime(1900, 1, 1, tzinfo=UTC) + timedelta(seconds=n),
}
_SENT = {
    int: lambda value, db: value,
    str: lambda value, db: value,
    datetime: lambda value, db: db.ops.adapt_datetimefield_value(value),
}


def _db():
    """This thread's connection itself: through the ``connection`` proxy, each of the
    many uses of it per statement is a lookup of its own."""
    return connections[DEFAULT_DB_ALIAS]


def insert(instance: models.Model) -> None:
    """Insert a new ``instance`` (every column but its automatic key, which it gets),
    sending ``pre_save`` and ``post_save`` as ``save()`` does."""
    if not instance._state.adding:
        raise ValueError(f"{instance!r} is already stored: insert writes new rows only")
    model, db = type(instance), _db()
    pre_save.send(sender=model, instance=instance, raw=False, using=db.alias, update_fields=None)
    sql, fields = _insert(model, db.vendor)
    values = [field.get_db_prep_save(field.pre_save(instance, True), db) for field in fields]
    with db.cursor() as cursor:
        cursor.execute(sql, values)
        (instance.pk,) = cursor.fetchone()
    instance._state.adding = False
    instance._state.db = db.alias
    post_save.send(
        sender=model, instance=instance, created=True, raw=False, using=db.alias, update_fields=None
    )


def update(model: type[models.Model], where: dict, values: dict) -> int:
    """Set ``values`` (by field name) on the rows of ``model`` whose fields equal
    ``where`` (none of them None: ``= NULL`` matches nothing); returns how many rows
    changed."""
    if None in where.values():
        raise ValueError(f"update {model.__name__} where a field is None: {where}")
    db = _db()
    sql, set_fields, where_fields = _update(model, tuple(values), tuple(where), db.vendor)
    params = [
        field.get_db_prep_save(_key(value), db)
        for field, value in zip(set_fields, values.values(), strict=True)
    ]
    params += [
        field.get_db_prep_value(value, db)
        for field, value in zip(where_fields, where.values(), strict=True)
    ]
    with db.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def _key(value):
    """A related row's key for a foreign key given the row."""
    return value.pk if isinstance(value, models.Model) else value


@cache
def _insert(model: type[models.Model], vendor: str) -> tuple[str, list[models.Field]]:
    meta = model._meta
    fields = [field for field in meta.concrete_fields if field is not meta.auto_field]
    _check_plain(fields)
    qn = connection.ops.quote_name
    sql = (
        f"INSERT INTO {qn(meta.db_table)} ({', '.join(qn(f.column) for f in fields)}) "
        f"VALUES ({', '.join(['%s'] * len(fields))}) RETURNING {qn(meta.pk.column)}"
    )
    return sql, fields


@cache
def _update(model: type[models.Model], names: tuple, where: tuple, vendor: str):
    meta = model._meta
    set_fields = [meta.get_field(name) for name in names]
    where_fields = [meta.get_field(name) for name in where]
    _check_plain(set_fields + where_fields)
    qn = connection.ops.quote_name
    sql = (
        f"UPDATE {qn(meta.db_table)} SET {', '.join(f'{qn(f.column)} = %s' for f in set_fields)}"
        f" WHERE {' AND '.join(f'{qn(f.column)} = %s' for f in where_fields)}"
    )
    return sql, set_fields, where_fields


def _check_plain(fields: list[models.Field]) -> None:
    """Refuse a column that is not written as a plain ``%s`` (a binary one, on some
    backends), not a column at all (a many-to-many), or one the database fills (a
    ``db_default`` without a Python ``default``; with both, the database's is for the
    previous release's processes, which leave the column out, and the ORM writes the
    Python one, as this does)."""
    for field in fields:
        fills = field.has_db_default() and not field.has_default()
        special = getattr(field, "get_placeholder_sql", None) or fills
        if special or not field.concrete or field.generated:
            raise TypeError(f"{field} needs the ORM to be written")


class Prepared:
    """A read whose queryset ``build(**values)`` makes: compiled by the ORM once per
    database, then sent with each call's ``values`` (of the ``kinds`` given: int, str or
    datetime). The queryset's shape must not depend on the values (a list's length
    would): ``build`` is called once, with marks in their place, and each mark must
    reach the SQL as one of its parameters."""

    def __init__(self, build: Callable[..., models.QuerySet], **kinds: type) -> None:
        self.build = build
        self.kinds = kinds

    def rows(self, **values) -> list[tuple]:
        """The rows of a ``values_list`` queryset, converted as the ORM converts them."""
        db = _db()
        compiler, sql, slots, converters = self._compiled(db.vendor)
        with db.cursor() as cursor:
            cursor.execute(sql, [slot(values, db) for slot in slots])
            fetched = cursor.fetchall()
        if not converters:
            return fetched
        return [tuple(row) for row in compiler.apply_converters(fetched, converters)]

    def instances(self, **values) -> list[models.Model]:
        """The instances of a model's queryset: every concrete field loaded, and each
        annotation set as an attribute."""
        model, names, annotations = self._shape()
        found = []
        for row in self.rows(**values):
            instance = model.from_db(DEFAULT_DB_ALIAS, names, row[: len(names)])
            for name, value in zip(annotations, row[len(names) :], strict=True):
                setattr(instance, name, value)
            found.append(instance)
        return found

    def first(self, **values) -> models.Model | None:
        """The first of ``instances``, or None."""
        found = self.instances(**values)
        return found[0] if found else None

    @cache  # noqa: B019 (one per read, for the process's life)
    def _shape(self) -> tuple[type[models.Model], list[str], list[str]]:
        queryset = self.build(**self._marks())
        names = [field.attname for field in queryset.model._meta.concrete_fields]
        return queryset.model, names, list(queryset.query.annotation_select)

    def _marks(self) -> dict:
        return {name: _MARKS[kind](n) for n, (name, kind) in enumerate(self.kinds.items())}

    @cache  # noqa: B019 (one per read and database, for the process's life)
    def _compiled(self, vendor: str):
        marks = self._marks()
        queryset = self.build(**marks)
        if queryset._fields is None:  # A model's queryset: every column, by name.
            _, names, annotations = self._shape()
            queryset = queryset.values_list(*names, *annotations)
        compiler = queryset.query.get_compiler(connection=connection)
        sql, params = compiler.as_sql()
        sent = {name: _SENT[self.kinds[name]](mark, connection) for name, mark in marks.items()}
        names = [_sent_as(param, sent) for param in params]
        missing = set(marks) - set(names)
        if missing:
            raise TypeError(f"{sorted(missing)} did not reach the SQL as parameters: {sql}")
        slots = [
            _slot(param, name, sent.get(name), self.kinds)
            for param, name in zip(params, names, strict=True)
        ]
        converters = compiler.get_converters([s[0] for s in compiler.select[: compiler.col_count]])
        return compiler, sql, slots, converters


def _sent_as(param, sent: dict) -> str | None:
    """The name of the value whose mark was sent as ``param``, or None (a constant)."""
    return next(
        (name for name, value in sent.items() if isinstance(param, type(value)) and value == param),
        None,
    )


def _slot(param, name: str | None, mark, kinds: dict) -> Callable[[dict, object], object]:
    """How a call's values give this parameter: a constant as compiled; a value as its
    ``mark`` was sent, in the type the ORM gave it (psycopg's ``Int4`` for a small
    integer column, say)."""
    if name is None:
        return lambda values, db: param
    send = _SENT[kinds[name]]
    if type(param) is type(mark):
        return lambda values, db: send(values[name], db)
    wrap = type(param)
    return lambda values, db: wrap(send(values[name], db))
