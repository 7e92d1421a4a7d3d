"""The fields of a form for the data a human request asks for, drawn from its JSON
Schema as Airflow draws a DAG's Params: an object whose properties are strings,
integers, numbers, booleans or one of an ``enum`` (or one such value alone) gets a field
each, labelled by its ``title`` (else its name), helped by its ``description``, filled
in with its ``default``, required when the schema requires it. A ``$ref`` to the
schema's own ``$defs`` (pydantic writes an ``Enum`` so) is followed once.

Anything else (arrays, nested objects, ``anyOf``, ``type`` lists…) gets no fields: the
reviewer answers in raw JSON. The fields only shape the answer: the service validates
it against the whole schema (``runs.services.requests``), which may say more (a
minimum, a pattern, a format) than they do, and a refusal comes back on the field.
Everything here is the agent's input: nothing it holds may raise."""

import json
from dataclasses import dataclass
from typing import Any

from django import forms

from runs.canonical import canonical_float

FIELDS_MAX = 30
ENUM_MAX = 50
LONG_TEXT = 200  # characters: a longer string (or one without a limit, alone) gets a text area
# What a property may say besides its type: the service checks these, the fields need not.
CHECKED_BY_THE_SERVICE = {
    "$comment",
    "const",
    "examples",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
}
SCALAR_KEYWORDS = {"type", "enum", "title", "description", "default", *CHECKED_BY_THE_SERVICE}
OBJECT_KEYWORDS = {
    "$schema",
    "$id",
    "$comment",
    "$defs",
    "definitions",
    "type",
    "title",
    "description",
    "properties",
    "required",
    "additionalProperties",
}
TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool}
YES_NO = [(json.dumps(True), "Yes"), (json.dumps(False), "No")]


@dataclass(frozen=True)
class AnswerField:
    """One field of the form: the property it fills (None: the answer is its value
    alone) and the form field."""

    name: str | None
    field: forms.Field


def answer_fields(schema: Any, order: list[str] | None = None) -> list[AnswerField] | None:
    """The fields for data valid against ``schema``, in the properties' ``order`` (the
    agent's, ``HumanRequest.property_order``; else as the schema has them), or None if
    the schema is outside what fields can say (the answer is then raw JSON)."""
    if not isinstance(schema, dict):
        return None
    if (scalar := _scalar(schema, schema)) is not None:
        field = _field(scalar, label="Your answer", required=True, alone=True)
        return None if field is None else [AnswerField(None, field)]
    return _object_fields(schema, order)


def _object_fields(schema: dict, order: list[str] | None) -> list[AnswerField] | None:
    properties, required = schema.get("properties"), schema.get("required", [])
    if (
        schema.get("type", "object") != "object"
        or not set(schema) <= OBJECT_KEYWORDS
        or not isinstance(properties, dict)
        or not 1 <= len(properties) <= FIELDS_MAX
        or not isinstance(required, list)
        or not set(map(_hashable, required)) <= set(properties)
    ):
        return None
    if not (isinstance(order, list) and sorted(order) == sorted(properties)):
        order = list(properties)
    fields = []
    for name in order:
        scalar = _scalar(properties[name], schema)
        if scalar is None:
            return None
        field = _field(scalar, label=scalar.get("title") or name, required=name in required)
        if field is None:
            return None
        fields.append(AnswerField(name, field))
    return fields


def _hashable(value: Any) -> Any:
    return value if isinstance(value, str) else repr(value)


def _scalar(declared: Any, root: dict) -> dict | None:
    """``declared`` (its ``$ref`` into ``root``'s definitions followed) if it is one
    value of a type the fields can take, else None."""
    if not isinstance(declared, dict):
        return None
    if "$ref" in declared:
        target = _definition(declared["$ref"], root)
        if target is None or "$ref" in target:
            return None
        declared = {**target, **{k: v for k, v in declared.items() if k != "$ref"}}
    if not set(declared) <= SCALAR_KEYWORDS:
        return None
    if "enum" in declared:
        return declared if _enum_values(declared["enum"]) else None
    kind = declared.get("type")
    return declared if isinstance(kind, str) and kind in TYPES else None


def _definition(ref: Any, root: dict) -> dict | None:
    for prefix in ("#/$defs/", "#/definitions/"):
        if isinstance(ref, str) and ref.startswith(prefix):
            definitions = root.get(prefix[2:-1])
            found = definitions.get(ref[len(prefix) :]) if isinstance(definitions, dict) else None
            return found if isinstance(found, dict) else None
    return None


def _enum_values(values: Any) -> bool:
    """An enum the reviewer picks from: 1 to ``ENUM_MAX`` distinct scalars."""
    if not isinstance(values, list) or not 1 <= len(values) <= ENUM_MAX:
        return False
    if not all(isinstance(value, str | int | float | bool) for value in values):
        return False
    return len({json.dumps(value) for value in values}) == len(values)


def _field(scalar: dict, *, label: str, required: bool, alone: bool = False) -> forms.Field | None:
    """The form field for one value of ``scalar``'s type (``alone``: the whole answer),
    or None if it says something the field cannot (a title or a description that is
    not text)."""
    help_text = scalar.get("description", "")
    if not isinstance(help_text, str) or not isinstance(label, str):
        return None
    marked = f"{label} (required)" if required and not alone else label
    shared = {"label": marked, "help_text": help_text, "required": required}
    if "enum" in scalar:
        return _pick(scalar["enum"], scalar.get("default"), shared)
    kind, default = scalar["type"], scalar.get("default")
    initial = default if _fits(default, kind) else None
    if kind == "boolean":
        return _pick([True, False], initial, shared, YES_NO)
    if kind == "integer":
        return forms.IntegerField(initial=initial, **shared)
    if kind == "number":
        return NumberField(initial=initial, **shared)
    limit = scalar.get("maxLength")
    wide = (alone and limit is None) or (isinstance(limit, int) and limit > LONG_TEXT)
    widget = forms.Textarea(attrs={"rows": 4}) if wide else forms.TextInput
    return forms.CharField(initial=initial, widget=widget, **shared)


def _fits(value: Any, kind: str) -> bool:
    if isinstance(value, bool):
        return kind == "boolean"
    return value is not None and isinstance(value, TYPES[kind])


def _pick(values: list, default: Any, shared: dict, choices: list | None = None) -> forms.Field:
    """A select of ``values``, by their JSON text (an enum may mix types). It starts
    on no value, unless the schema has a default: a required one is picked, never
    taken because it came first."""
    choices = [("", "—"), *(choices or [(json.dumps(value), str(value)) for value in values])]
    fitting = default is not None and any(json.dumps(default) == text for text, _ in choices)
    return forms.TypedChoiceField(
        choices=choices,
        coerce=json.loads,
        empty_value=None,
        initial=json.dumps(default) if fitting else None,
        **shared,
    )


class NumberField(forms.FloatField):
    """A JSON number as typed: 10 stays an integer, 2.5 a number, either canonical (as
    the database gives it back, ``runs.canonical``)."""

    def to_python(self, value: Any) -> int | float | None:
        number = super().to_python(value)
        if number is None:
            return None
        if number.is_integer() and abs(number) < 2**53:
            return int(number)
        return canonical_float(number)
