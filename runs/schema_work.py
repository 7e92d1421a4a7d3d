"""How much work checking an answer against an agent's JSON Schema may take, measured
before the schema is accepted (``runs.services.requests``): each value of an answer
is checked in at most the measure's number of steps, so a whole answer in at most its
number of values times the measure.

A validator applies a subschema each time a path through the schema reaches it. A
schema of two kilobytes whose thirty definitions each name the next twice (``anyOf``
of two ``$ref``) applies the last one 2**30 times to a single value, hours of CPU; a
``$ref`` cycle (``{"$ref": "#"}``) applies to the same value without end; a recursive
schema (``items: {"$ref": "#"}``) goes as deep as the answer does. So the schema is
unfolded over one value and the values below it, down to the depth an answer may
have: at each depth, the steps spent on a single value there, each ``$ref`` followed
where it is used, each keyword a step and each pattern ``PATTERN_STEPS`` (it runs over
the whole string). Subschemas applied to the same value add up (``allOf``, ``anyOf``,
``not``, ``if``…). Of those for one member of an object, only the costliest of
``properties`` counts (a member has one name), with all that may apply besides
(``patternProperties``, ``additionalProperties``…); for an item of an array, the
costliest of ``prefixItems`` (an item has one place) and all of ``items``,
``contains``…; and a value is an object or an array, never both, so that a schema of
any JSON value, or of a binary tree, costs as much at each depth as at the first.

Only what the measure can follow as the validator does is accepted: a ``$ref`` that is
a JSON Pointer within the schema (``#``, ``#/$defs/Name``) of a single resource (no
``$id`` below the top); ``$dynamicRef`` and ``$recursiveRef``, which resolve by the
path taken, are refused. Measuring visits each subschema once per depth and stops at
the first part over the limit, or after ``PARTS_MAX`` parts."""

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

PATTERN_STEPS = 50
PARTS_MAX = 20_000
# The keywords that apply subschemas: to whom (the value itself, one member of an
# object: the one of its name or all, one item of an array: the one of its place or
# all) and in what shape they hold them (one schema, a list or a map of them).
APPLIES = {
    **dict.fromkeys(("allOf", "anyOf", "oneOf"), ("same", "list")),
    **dict.fromkeys(("not", "if", "then", "else", "contentSchema"), ("same", "one")),
    **dict.fromkeys(("dependentSchemas", "dependencies"), ("same", "map")),
    "properties": ("member_named", "map"),
    "patternProperties": ("member", "map"),
    **dict.fromkeys(
        ("additionalProperties", "unevaluatedProperties", "propertyNames"), ("member", "one")
    ),
    "prefixItems": ("item_placed", "list"),
    **dict.fromkeys(("items", "additionalItems", "contains", "unevaluatedItems"), ("item", "one")),
}
DYNAMIC_REFS = ("$dynamicRef", "$recursiveRef")
CYCLE = (
    "a $ref cycle that applies to the same value without end: it never says what an answer must be"
)


class Unmeasurable(ValueError):
    """The schema cannot be measured, or measures over the limit; the message says why."""


def measure(schema: Any, *, depth: int, limit: int) -> int:
    """The most steps checking one value of an answer against ``schema`` may take, for
    an answer nested at most ``depth`` deep. ``Unmeasurable`` if that is over
    ``limit``, or if the schema holds what the measure cannot follow."""
    unfolding = _Unfolding(schema, limit)
    most = 0
    for below in range(depth):
        steps = max(unfolding.steps(schema, below))
        if steps == 0:
            break  # Nothing in the schema reaches this deep into an answer.
        most = max(most, steps)
    return most


@dataclass
class _Part:
    """A subschema applied to a value, and what it applies to one value ``below``
    levels under that one: its own keywords (at 0), and the subschemas it applies to the
    same value, to a member of an object or to an item of an array (one level up)."""

    node: Any
    below: int
    applies: dict[str, list] = field(default_factory=dict)

    def needs(self):
        for parts in self.applies.values():
            yield from parts


class _Unfolding:
    """The steps of each (subschema, depth below) part, computed once each, without
    recursion: a ``$ref`` chain may be longer than Python's recursion limit. A part's
    steps are a pair: if the value it applies to is an object, if it is an array."""

    def __init__(self, root: Any, limit: int) -> None:
        self.root, self.limit = root, limit
        self.known: dict[tuple[int, int], tuple[int, int]] = {}

    def steps(self, node: Any, below: int) -> tuple[int, int]:
        stack = [self._part(node, below)]
        needing = [stack[0].needs()]
        unfolding = {(id(node), below)}
        while stack:
            needed = next((n for n in needing[-1] if (id(n[0]), n[1]) not in self.known), None)
            if needed is None:
                part = stack.pop()
                needing.pop()
                unfolding.discard((id(part.node), part.below))
                self.known[id(part.node), part.below] = self._total(part)
                continue
            if (id(needed[0]), needed[1]) in unfolding:
                raise Unmeasurable(CYCLE)
            if len(self.known) + len(stack) >= PARTS_MAX:
                raise Unmeasurable(f"too large to measure: over {PARTS_MAX} subschemas to unfold")
            unfolding.add((id(needed[0]), needed[1]))
            stack.append(self._part(*needed))
            needing.append(stack[-1].needs())
        return self.known[id(node), below]

    def _total(self, part: _Part) -> tuple[int, int]:
        own = _own_steps(part.node) if part.below == 0 else 0
        same = [self.known[id(n), b] for n, b in part.applies.get("same", ())]
        if_object = own + sum(s[0] for s in same) + self._members(part, "member_named", "member")
        if_array = own + sum(s[1] for s in same) + self._members(part, "item_placed", "item")
        if max(if_object, if_array) > self.limit:
            raise Unmeasurable(
                f"too costly to check an answer against: over {self.limit} steps for a "
                "single value, each $ref followed where it is used"
            )
        return if_object, if_array

    def _members(self, part: _Part, named: str, every: str) -> int:
        """The steps on a member or an item: the costliest of those for its name or
        place, and all of those for every one; whatever it is itself, object or array."""
        costs = {
            group: [max(self.known[id(n), b]) for n, b in part.applies.get(group, ())]
            for group in (named, every)
        }
        return max(costs[named], default=0) + sum(costs[every])

    def _part(self, node: Any, below: int) -> _Part:
        part = _Part(node, below)
        if not isinstance(node, dict):
            return part  # true, false: a step.
        if node is not self.root:
            _one_resource(node)
        if dynamic := next((name for name in DYNAMIC_REFS if name in node), None):
            raise Unmeasurable(f"{dynamic}: not followed here; use $ref")
        if "$ref" in node:
            part.applies["same"] = [(self._target(node["$ref"]), below)]
        for keyword in node.keys() & APPLIES.keys():
            whom, shape = APPLIES[keyword]
            if keyword == "items" and isinstance(node[keyword], list):
                whom, shape = "item_placed", "list"  # Before 2020-12, prefixItems.
            if whom == "same" or below > 0:
                at = below if whom == "same" else below - 1
                held = _held(node[keyword], shape)
                part.applies.setdefault(whom, []).extend((schema, at) for schema in held)
        return part

    def _target(self, ref: Any) -> Any:
        """The subschema ``ref`` points to: a JSON Pointer in a URI fragment."""
        if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
            raise Unmeasurable(
                f"$ref {ref!r}: only a JSON Pointer within the schema, such as '#/$defs/Name'"
            )
        node = self.root
        for token in unquote(ref[2:]).split("/") if ref != "#" else []:
            name = token.replace("~1", "/").replace("~0", "~")
            if isinstance(node, list) and name.isdigit() and int(name) < len(node):
                node = node[int(name)]
            elif isinstance(node, dict) and name in node:
                node = node[name]
            else:
                raise Unmeasurable(f"$ref {ref!r}: points to nothing in the schema")
            _one_resource(node)
        if not isinstance(node, dict | bool):
            raise Unmeasurable(f"$ref {ref!r}: points to something that is not a schema")
        return node


def _held(value: Any, shape: str) -> list:
    """The subschemas a keyword's ``value`` holds in its ``shape``; what is not a schema
    (the names a ``dependencies`` entry may list instead) applies nothing."""
    if shape == "map":
        held = list(value.values()) if isinstance(value, dict) else []
    elif shape == "list":
        held = value if isinstance(value, list) else []
    else:
        held = [value]
    return [schema for schema in held if isinstance(schema, dict | bool)]


def _one_resource(node: Any) -> None:
    """Refuse a subschema with a base URI of its own (``id`` before draft 6): a ``$ref``
    in it resolves against that, not against the schema the measure follows."""
    if isinstance(node, dict) and any(isinstance(node.get(key), str) for key in ("$id", "id")):
        raise Unmeasurable("$id: only at the top of the schema (one resource, not several)")


def _own_steps(node: Any) -> int:
    """A step a keyword, and a pattern's run over the string; ``true`` and ``false`` one."""
    if not isinstance(node, dict):
        return 1
    return max(1, len(node)) + PATTERN_STEPS * _patterns_of(node)


def patterns(schema: Any) -> int:
    """How many regular expressions ``schema`` holds (``pattern``, the names of
    ``patternProperties``) wherever they are: each is compiled, used or not."""
    count, stack = 0, [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            count += _patterns_of(node)
            stack.extend(node.values())
    return count


def _patterns_of(node: dict) -> int:
    held = node.get("patternProperties")
    return isinstance(node.get("pattern"), str) + (len(held) if isinstance(held, dict) else 0)
