"""What changed between two checkpoints' states, and between two versions of a text
artifact, in the form the audit pages show."""

import difflib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

MISSING = object()


@dataclass(frozen=True)
class Change:
    path: str
    kind: str  # "added", "removed" or "changed"
    before: Any = None
    after: Any = None

    @property
    def before_json(self) -> str:
        return _json(self.before)

    @property
    def after_json(self) -> str:
        return _json(self.after)


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Flatten nested objects and lists into (path, scalar) pairs: ``run.status``,
    ``pending_operations[0].approved_by[1]``. Empty containers are leaves."""
    if isinstance(value, dict) and value:
        for key, item in value.items():
            yield from _leaves(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list) and value:
        for index, item in enumerate(value):
            yield from _leaves(item, f"{path}[{index}]")
    else:
        yield path, value


def state_diff(before: dict, after: dict) -> list[Change]:
    """Every leaf that was added, removed or changed from ``before`` to ``after``,
    in the order the paths appear (``after`` first, then what only ``before`` had).
    An empty list or object that gained (or lost) items is not reported besides its
    items: ``approved_by[0]`` added says enough, without ``approved_by: []`` removed."""
    old = dict(_leaves(before)) if before else {}
    new = dict(_leaves(after)) if after else {}
    changes = []
    for path, value in new.items():
        previous = old.get(path, MISSING)
        if previous is MISSING:
            if not _emptied(path, value, old):
                changes.append(Change(path, "added", after=value))
        elif type(previous) is not type(value) or previous != value:  # 1 is not true
            changes.append(Change(path, "changed", previous, value))
    changes.extend(
        Change(path, "removed", before=value)
        for path, value in old.items()
        if path not in new and not _emptied(path, value, new)
    )
    return changes


def _emptied(path: str, value: Any, other: dict) -> bool:
    """``value`` is an empty container at ``path`` whose items the other side has."""
    return value in ({}, []) and any(key.startswith((f"{path}.", f"{path}[")) for key in other)


def _lines(text: str) -> list[str]:
    return [line.removesuffix("\n").replace("\r", "␍") for line in text.splitlines(True)]


@dataclass(frozen=True)
class DiffLine:
    kind: str  # "context", "added", "removed" or "hunk"
    old_number: int | None
    new_number: int | None
    text: str


def text_diff(before: str, after: str, context: int = 3) -> list[DiffLine]:
    """A line diff with ``context`` unchanged lines around each change, numbered on
    both sides; ``hunk`` lines separate the groups. Empty if the texts are equal.
    Line endings count: a carriage return is shown as ␍, so two versions that differ
    only in their line endings show which lines differ."""
    old, new = _lines(before), _lines(after)
    lines = []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for group in matcher.get_grouped_opcodes(context):
        first = group[0]
        lines.append(DiffLine("hunk", first[1] + 1, first[3] + 1, ""))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                lines.extend(
                    DiffLine("context", i + 1, j + 1, old[i])
                    for i, j in zip(range(i1, i2), range(j1, j2), strict=True)
                )
                continue
            lines.extend(DiffLine("removed", i + 1, None, old[i]) for i in range(i1, i2))
            lines.extend(DiffLine("added", None, j + 1, new[j]) for j in range(j1, j2))
    return lines
