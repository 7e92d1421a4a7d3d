"""Reading a configuration file into values that remember their line, so that every
problem found later names the line to fix (``Problems``).

YAML through PyYAML's safe composer: the node tree keeps each value's position, which
a plain ``safe_load`` (or Python's TOML reader) throws away. Only the safe tags are
read (no Python objects), a key written twice in one mapping is a problem rather than
the last one silently winning, and aliases are refused: a file a person reviews should
say each thing where it applies (and an alias bomb is a budget no configuration needs)."""

from dataclasses import dataclass, field
from typing import Any

import yaml

MAX_BYTES = 1_000_000


@dataclass(frozen=True)
class Node:
    """A value read from the file, at its line (1-based). A mapping's value is a dict of
    key → ``Node`` (with ``key_lines``), a sequence's a list of ``Node``, a scalar's the
    Python value YAML's safe rules give it (str, int, float, bool, None)."""

    value: Any
    line: int
    key_lines: dict[str, int] = field(default_factory=dict)


@dataclass
class Problems:
    """What is wrong with a file, each at a line: collected all at once, so that one
    run of ``apply_config`` names every mistake rather than the first."""

    path: str
    found: list[tuple[int, str]] = field(default_factory=list)

    def add(self, line: int, message: str) -> None:
        self.found.append((line, message))

    def __bool__(self) -> bool:
        return bool(self.found)

    def lines(self) -> list[str]:
        return [f"{self.path}:{line}: {message}" for line, message in sorted(self.found)]


def read(text: str, problems: Problems) -> Node | None:
    """The file's top node, or ``None`` (with the problem added) when it is not YAML."""
    if len(text.encode()) > MAX_BYTES:
        problems.add(1, f"the file is larger than {MAX_BYTES} bytes")
        return None
    try:
        if aliases := [e for e in yaml.parse(text, Loader=yaml.SafeLoader) if _is_alias(e)]:
            for alias in aliases:
                problems.add(
                    alias.start_mark.line + 1, "aliases (*) are not used here: write it out"
                )
            return None
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        problems.add(mark.line + 1 if mark else 1, f"not valid YAML: {error.problem}")
        return None
    except yaml.YAMLError as error:
        problems.add(1, f"not valid YAML: {error}")
        return None
    if root is None:
        problems.add(1, "the file is empty")
        return None
    return _node(root, problems)


def _is_alias(event: yaml.Event) -> bool:
    return isinstance(event, yaml.AliasEvent)


def _node(node: yaml.Node, problems: Problems) -> Node:
    line = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        return _mapping(node, line, problems)
    if isinstance(node, yaml.SequenceNode):
        return Node([_node(item, problems) for item in node.value], line)
    return Node(yaml.constructor.SafeConstructor().construct_object(node), line)


def _mapping(node: yaml.MappingNode, line: int, problems: Problems) -> Node:
    values, key_lines = {}, {}
    for key_node, value_node in node.value:
        key_line = key_node.start_mark.line + 1
        if key_node.tag == "tag:yaml.org,2002:merge":
            problems.add(key_line, "merge keys (<<) are not used here: write it out")
            continue
        key = _node(key_node, problems).value
        if not isinstance(key, str):
            problems.add(key_line, f"a key must be text, not {key!r}")
            continue
        if key in values:
            problems.add(key_line, f"{key!r} is given twice (first at line {key_lines[key]})")
            continue
        values[key], key_lines[key] = _node(value_node, problems), key_line
    return Node(values, line, key_lines)
