"""What a reviewer sees of an operation's effect before deciding.

An action's ``preview(args, ctx)`` reads the live target and returns one of these
typed previews: the change to a file as a diff, balances before and after, a message as
its recipient will read it, an HTTP exchange. A preview is plain data (``as_json``):
the page renders it, and the exact preview a reviewer decided on is stored with the
decision (content-addressed, its hash in the checkpoint), so the audit trail shows what
each person was shown, not only the arguments.

Everything here comes from the agent or the target: it is data, rendered escaped, never
markup."""

import difflib
from dataclasses import asdict, dataclass, field
from typing import ClassVar

from runs.canonical import sha256_hex

MAX_LINES = 400  # diff lines shown; the rest is counted, not shown
MAX_COMPARED = 256_000  # bytes of a file compared line by line (a diff's time grows fast)
CONTEXT = 3  # unchanged lines around each change


@dataclass(frozen=True)
class Preview:
    kind: ClassVar[str]

    def as_json(self) -> dict:
        return {"kind": self.kind, **asdict(self)}


@dataclass(frozen=True)
class FileChange(Preview):
    """A file's change: ``state`` is "new", "changed", "unchanged", "binary" (the
    current file is not text) or "large" (too large to compare): the current file is
    then described in ``before``, and the new content shown whole. ``lines`` are
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


def file_change(path: str, current: bytes | None, content: str, expected: str | None) -> FileChange:
    """The change writing ``content`` to ``path`` makes to its ``current`` bytes (None:
    no such file)."""
    as_expected = (sha256_hex(current) if current is not None else None) == expected
    new = content.splitlines()
    if current is None:
        return _cut(FileChange(path, "new", as_expected, [["+", line] for line in new]))
    try:
        old = current.decode()
    except UnicodeDecodeError:
        old = None
    large = max(len(current), len(content)) > MAX_COMPARED
    if old is None or "\x00" in old or large:
        state = "large" if large and old is not None else "binary"
        size = f"{len(current)} bytes, sha256 {sha256_hex(current)[:12]}…"
        added = [["+", line] for line in new]
        return _cut(FileChange(path, state, as_expected, added, 0, size))
    if old == content:
        return FileChange(path, "unchanged", as_expected)
    diff = difflib.unified_diff(old.splitlines(), new, lineterm="", n=CONTEXT)
    lines = [["@", line] if line.startswith("@@") else [line[:1], line[1:]] for line in diff]
    return _cut(FileChange(path, "changed", as_expected, lines[2:]))  # past ---/+++


def _cut(change: FileChange) -> FileChange:
    if len(change.lines) <= MAX_LINES:
        return change
    shown = change.lines[:MAX_LINES]
    return FileChange(
        change.path,
        change.state,
        change.as_expected,
        shown,
        len(change.lines) - MAX_LINES,
        change.before,
    )


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
