"""The rows every state change writes, in statements prepared once per shape.

A transition updates its operation (or request) and its run, and appends a checkpoint.
Through the ORM each of those statements is built and compiled again every time: 0.3
to 0.45 ms of Python for one row, where the database takes a few hundredths, and a
worker makes three transitions per operation. Here the SQL is what the ORM writes for
the same change, built once per model and set of columns, and every value goes through
its field's own preparation (``get_db_prep_save``), as ``save()`` and ``update()`` send
it. Only for plain values: an expression (``F``, ``Now()``) needs the ORM.
"""

from functools import cache

from django.db import connection, models
from django.db.models.signals import post_save, pre_save


def insert(instance: models.Model) -> None:
    """Insert a new ``instance`` (every column but its automatic key, which it gets),
    sending ``pre_save`` and ``post_save`` as ``save()`` does."""
    if not instance._state.adding:
        raise ValueError(f"{instance!r} is already stored: insert writes new rows only")
    model = type(instance)
    pre_save.send(
        sender=model, instance=instance, raw=False, using=connection.alias, update_fields=None
    )
    sql, fields = _insert(model, connection.vendor)
    values = [
        field.get_db_prep_save(field.pre_save(instance, True), connection) for field in fields
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, values)
        (instance.pk,) = cursor.fetchone()
    instance._state.adding = False
    instance._state.db = connection.alias
    post_save.send(
        sender=model,
        instance=instance,
        created=True,
        raw=False,
        using=connection.alias,
        update_fields=None,
    )


def update(model: type[models.Model], where: dict, values: dict) -> int:
    """Set ``values`` (by field name) on the rows of ``model`` whose fields equal
    ``where`` (none of them None: ``= NULL`` matches nothing); returns how many rows
    changed."""
    if None in where.values():
        raise ValueError(f"update {model.__name__} where a field is None: {where}")
    sql, set_fields, where_fields = _update(model, tuple(values), tuple(where), connection.vendor)
    params = [
        field.get_db_prep_save(_key(value), connection)
        for field, value in zip(set_fields, values.values(), strict=True)
    ]
    params += [
        field.get_db_prep_value(value, connection)
        for field, value in zip(where_fields, where.values(), strict=True)
    ]
    with connection.cursor() as cursor:
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
    backends), not a column at all (a many-to-many), or one the database fills."""
    for field in fields:
        special = getattr(field, "get_placeholder_sql", None) or field.has_db_default()
        if special or not field.concrete or field.generated:
            raise TypeError(f"{field} needs the ORM to be written")
