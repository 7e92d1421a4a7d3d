"""What a reviewer sees of an operation's effect before deciding.

An action's ``preview(args, ctx)`` reads the live target and returns one of these
typed previews: the change to a file as a diff, balances before and after, a message as
its recipient will read it, an HTTP exchange. A preview is plain data (``as_json``):
the page renders it, and the exact preview a reviewer decided on is stored with the
decision (content-addressed, its hash in the checkpoint), so the audit trail shows what
each person was shown, not only the arguments.

Everything here comes from the agent or the target: it is data, rendered escaped, never
markup. And the agent sets how much work a preview is, so each has a budget: a file's
diff at most ``DIFF_BUDGET`` steps, made once per (file, content) pair in a process and
reused by the page shown again and the decision on it; an HTTP read the deadline and
size cap of ``runs.actions.http``'s previews."""

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import ClassVar

from runs.canonical import sha256_hex
from runs.diffs import common_ends, hunk_header, unified_diff

MAX_LINES = 400  # diff lines shown; the rest is counted, not shown
CONTEXT = 3  # unchanged lines around each change
# A diff's steps (``runs.diffs``): a few tenths of a second of CPU at most; a change that
# needs more is shown as too large for a diff.
DIFF_BUDGET = 500_000
# Bytes of the current file read as lines (a proposal's content is at most 1,000,000
# characters: 4 MiB of UTF-8); a larger file is described by its size and hash.
MAX_COMPARED = 4 * 2**20
# Changes kept in each process, by (current file's sha256, content's sha256): a page
# shown again, and the decision on it, reuse the diff instead of making it again.
REMEMBERED = 32


@dataclass(frozen=True)
class Preview:
    kind: ClassVar[str]

    def as_json(self) -> dict:
        return {"kind": self.kind, **asdict(self)}


@dataclass(frozen=True)
class FileChange(Preview):
    """A file's change: ``state`` is "new", "changed", "unchanged", "binary" (the
    current file is not text) or "large" (too large to show as a diff): the current
    file is then described in ``before`` and the new content in ``after``, and the lines
    the write puts in place of others shown, ``replaced`` saying which. ``lines`` are
    ``[mark, text]``, mark "@" (a hunk's place), " " (context), "-" (removed) or "+"
    (added); ``folded`` counts the lines beyond ``MAX_LINES``. ``as_expected``: the
    file's current content is the one the agent based its change on (the precondition
    holds now)."""

    kind = "file"
    path: str
    state: str
    as_expected: bool
    lines: list[list[str]] = field(default_factory=list)
    folded: int = 0
    before: str = ""  # the current file, when described rather than shown
    after: str = ""  # the new content, when the change is too large for a diff
    replaced: str = ""  # which lines the new ones replace, then


def file_change(path: str, current: bytes | None, content: str, expected: str | None) -> FileChange:
    """The change writing ``content`` to ``path`` makes to its ``current`` bytes (None:
    no such file), worked out once per (current, content) pair in each process."""
    found = sha256_hex(current) if current is not None else None
    key = (found, sha256_hex(content.encode()))
    change = _remembered(key, lambda: _change(current, content))
    return replace(change, path=path, as_expected=found == expected)


_changes: OrderedDict[tuple[str | None, str], FileChange] = OrderedDict()
_changes_lock = threading.Lock()  # A process's threads share what it remembers.


def _remembered(key: tuple[str | None, str], make: Callable[[], FileChange]) -> FileChange:
    """The change ``make`` makes, made once while it is among the last ``REMEMBERED``."""
    with _changes_lock:
        if (known := _changes.get(key)) is not None:
            _changes.move_to_end(key)
            return known
    made = make()
    with _changes_lock:
        _changes[key] = made
        while len(_changes) > REMEMBERED:
            _changes.popitem(last=False)
    return made


def _change(current: bytes | None, content: str) -> FileChange:
    """The change, for whichever file and expectation (``file_change`` sets those)."""
    new = content.splitlines()
    if current is None:
        return FileChange("", "new", False, *_shown(new))
    if len(current) > MAX_COMPARED:
        return _too_large(current, content, None, new)
    old = _text(current)
    if old is None:
        return FileChange("", "binary", False, *_shown(new), before=_described(current))
    if old == content:
        return FileChange("", "unchanged", False)
    lines = old.splitlines()
    diff = unified_diff(lines, new, context=CONTEXT, budget=DIFF_BUDGET, shown=MAX_LINES)
    if diff is None:
        return _too_large(current, content, lines, new)
    rows, total = diff
    return FileChange("", "changed", False, rows, total - len(rows))


def _text(data: bytes) -> str | None:
    """``data`` as text, or None if it is not (not UTF-8, or holding NUL)."""
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return None
    return None if "\x00" in text else text


def _too_large(current: bytes, content: str, old: list[str] | None, new: list[str]) -> FileChange:
    """Both versions described, and the new lines shown: past where both versions start
    alike, up to where they end alike, if the old one was read as lines (``old``)."""
    after = _described(content.encode(), len(new))
    if old is None:
        return FileChange("", "large", False, *_shown(new), _described(current), after)
    start, end = common_ends(old, new)
    removed, added = len(old) - start - end, new[start : len(new) - end]
    rows, folded = _shown(added, MAX_LINES - 1)
    replaced = (
        f"lines {start + 1:,} to {start + removed:,} ({_count(removed)}) are replaced by "
        f"{_count(len(added))}"
    )
    header = ["@", hunk_header(start, removed, start, len(added))]
    return FileChange(
        "", "large", False, [header, *rows], folded, _described(current, len(old)), after, replaced
    )


def _shown(new: list[str], most: int = MAX_LINES) -> tuple[list[list[str]], int]:
    """The first ``most`` of ``new`` as added lines, and how many more there are."""
    return [["+", line] for line in new[:most]], max(len(new) - most, 0)


def _described(data: bytes, lines: int | None = None) -> str:
    """A version of the file in a few words: its lines (if text), bytes and sha256."""
    counted = f"{_count(lines)}, " if lines is not None else ""
    return f"{counted}{len(data):,} bytes, sha256 {sha256_hex(data)[:12]}…"


def _count(lines: int) -> str:
    return f"{lines:,} line{'' if lines == 1 else 's'}"


@dataclass(frozen=True)
class Balances(Preview):
    """Accounts before → after (``rows``: ``{account, before, after}``, amounts as
    text), the floor the source must stay above, if any, and whether the transfer could
    be made now (``holds``; ``why`` not, if not)."""

    kind = "balances"
    rows: list[dict]
    floor: str | None
    holds: bool
    why: str = ""


@dataclass(frozen=True)
class Message(Preview):
    """A message as its recipients will read it: ``headers`` (``[name, value]``), the
    recipients grouped by domain, those a precondition would refuse, and the body."""

    kind = "message"
    headers: list[list[str]]
    recipients: dict[str, list[str]]
    refused: list[str]
    body: str


@dataclass(frozen=True)
class Exchange(Preview):
    """An HTTP call as it will be sent (``headers``: ``[name, value]``; ``body`` pretty
    JSON), and the resource its verification reads: as it answers now (``now``, or why
    it could not be read) and each field verified, now → after (``fields``:
    ``{field, now, after}``, values as JSON)."""

    kind = "http"
    method: str
    url: str
    headers: list[list[str]]
    body: str
    now: str
    fields: list[dict]
    compensation: str = ""


@dataclass(frozen=True)
class Together:
    """What several calls waiting on one target would do together (``Action.together``),
    in a sentence or two, and whether they cannot all be made (``clash``: e.g. they would
    overdraw their account, or each expects the file as it is now)."""

    said: str
    clash: bool
