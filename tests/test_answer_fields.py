"""The fields drawn from a data request's JSON Schema (#34): the common subset gets a
field per property, labelled, helped, defaulted and required as the schema says;
anything else is answered in raw JSON. The schema is the agent's: nothing in it
may raise."""

import json

import pytest
from django import forms

from runs.answer_fields import answer_fields


def drawn(schema) -> list[tuple]:
    return [
        (f.name, type(f.field).__name__, f.field.label, f.field.required, f.field.initial)
        for f in answer_fields(schema)
    ]


def test_an_objects_properties_become_labelled_fields_in_order():
    schema = {
        "type": "object",
        "properties": {
            "item": {"type": "string", "title": "Item", "description": "As named"},
            "count": {"type": "integer", "default": 3},
            "price": {"type": "number", "default": "cheap"},  # a default of the wrong type
            "rush": {"type": "boolean", "default": True},
            "size": {"enum": ["S", "M", 7], "default": "M"},
        },
        "required": ["item", "size"],
    }
    assert drawn(schema) == [
        ("item", "CharField", "Item (required)", True, None),
        ("count", "IntegerField", "count", False, 3),
        ("price", "NumberField", "price", False, None),
        ("rush", "TypedChoiceField", "rush", False, "true"),
        ("size", "TypedChoiceField", "size (required)", True, '"M"'),
    ]
    fields = answer_fields(schema)
    assert fields[0].field.help_text == "As named"
    assert fields[4].field.choices == [("", "—"), ('"S"', "S"), ('"M"', "M"), ("7", "7")]
    assert fields[4].field.clean("7") == 7


def test_the_fields_follow_the_agents_order_of_the_properties():
    """PostgreSQL's jsonb gives an object's keys back shortest first: the request keeps
    the order the agent gave (``property_order``), which the form follows."""
    schema = {"properties": {"quantity": {"type": "integer"}, "item": {"type": "string"}}}
    names = [f.name for f in answer_fields(schema, ["item", "quantity"])]
    assert names == ["item", "quantity"]
    assert [f.name for f in answer_fields(schema)] == ["quantity", "item"]
    assert [f.name for f in answer_fields(schema, ["item"])] == ["quantity", "item"]


def test_a_value_alone_is_one_field_and_a_long_text_a_text_area():
    (alone,) = answer_fields({"type": "string", "description": "Its name"})
    assert (alone.name, alone.field.label, alone.field.help_text) == (
        None,
        "Your answer",
        "Its name",
    )
    assert isinstance(alone.field.widget, forms.Textarea)
    (short,) = answer_fields({"properties": {"a": {"type": "string", "maxLength": 20}}})
    (long,) = answer_fields({"properties": {"a": {"type": "string", "maxLength": 2000}}})
    assert isinstance(short.field.widget, forms.TextInput)
    assert isinstance(long.field.widget, forms.Textarea)


def test_a_pydantic_enum_is_followed_to_its_definition():
    schema = {
        "$defs": {"Colour": {"enum": ["red", "blue"], "title": "Colour", "type": "string"}},
        "properties": {"colour": {"$ref": "#/$defs/Colour", "default": "blue"}},
        "required": ["colour"],
        "title": "Paint",
        "type": "object",
    }
    assert drawn(schema) == [("colour", "TypedChoiceField", "Colour (required)", True, '"blue"')]


@pytest.mark.parametrize(("typed", "number"), [("10", 10), ("2.5", 2.5), ("-0", 0), ("1e3", 1000)])
def test_a_number_is_kept_as_typed(typed, number):
    (field,) = answer_fields({"type": "number"})
    value = field.field.clean(typed)
    assert (value, type(value)) == (number, type(number))


@pytest.mark.parametrize(
    "schema",
    [
        {},
        True,
        "string",
        {"type": "object"},
        {"type": "array", "items": {"type": "string"}},
        {"type": ["string", "null"]},
        {"type": "null"},
        {"properties": {}},
        {"properties": {"a": {"type": "object", "properties": {}}}},
        {"properties": {"a": {"type": "array"}}},
        {"properties": {"a": {"anyOf": [{"type": "string"}, {"type": "null"}]}}},
        {"properties": {"a": {"type": "string"}}, "anyOf": [{"required": ["a"]}]},
        {"properties": {"a": {"type": "string"}}, "required": ["b"]},
        {"properties": {"a": {"type": "string"}}, "required": [["a"]]},
        {"properties": {"a": {"type": "string"}}, "required": "a"},
        {"properties": {"a": {"type": "string", "title": 5}}},
        {"properties": {"a": {"type": "string", "description": ["x"]}}},
        {"properties": {"a": {"enum": []}}},
        {"properties": {"a": {"enum": [None, "x"]}}},
        {"properties": {"a": {"enum": [{"x": 1}]}}},
        {"properties": {"a": {"enum": ["x", "x"]}}},
        {"properties": {"a": {"enum": "x"}}},
        {"properties": {"a": {"$ref": 5}}},
        {"properties": {"a": {"$ref": "#/$defs/missing"}}, "$defs": {}},
        {"properties": {"a": {"$ref": "#/$defs/x"}}, "$defs": []},
        {"properties": {"a": {"$ref": "#/$defs/x"}}, "$defs": {"x": {"$ref": "#/$defs/x"}}},
        {"properties": {"a": {"$ref": "http://example.com/s.json"}}},
        {"properties": {"a": True}},
        {"properties": [{"type": "string"}]},
        {"properties": {str(n): {"type": "string"} for n in range(31)}},
    ],
    ids=lambda schema: json.dumps(schema)[:60],
)
def test_a_schema_outside_the_subset_is_answered_in_raw_json(schema):
    assert answer_fields(schema) is None
