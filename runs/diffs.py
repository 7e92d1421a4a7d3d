"""A line diff with a ceiling on its work, for previews whose input an agent controls.

``difflib``'s time grows with the product of the two texts' lengths, and again with how
often their lines repeat: a file of 80,000 short, repeated lines against a 200-line
replacement took 40 s of CPU to compare, on every page that showed it. Here the lines
both texts share at their start and at their end are set aside in linear time, and the
lines between are compared with Myers' algorithm (the shortest edit script: time
O((N + M) D) for D lines removed or added), counting its steps. Past ``budget`` steps it
gives up (None), and the caller shows the change as too large for a diff. The count,
not a clock, sets the limit, so the same texts always give the same answer however
loaded the machine: a reviewer's preview reads the same each time it is made.
"""

import re
from array import array
from collections.abc import Sequence

CHANGE = re.compile(r"[-+]+")  # A change: lines removed, added, or both.


def common_ends(old: Sequence, new: Sequence) -> tuple[int, int]:
    """How many lines ``old`` and ``new`` share at their start, then at their end (not
    counting those of the start again)."""
    most = min(len(old), len(new))
    start = 0
    while start < most and old[start] == new[start]:
        start += 1
    end = 0
    while end < most - start and old[-1 - end] == new[-1 - end]:
        end += 1
    return start, end


def hunk_header(old_start: int, old_count: int, new_start: int, new_count: int) -> str:
    """``@@ -l,s +l,s @@`` for lines from index ``*_start``, as ``diff -u`` writes it."""
    return f"@@ -{_range(old_start, old_count)} +{_range(new_start, new_count)} @@"


def _range(start: int, count: int) -> str:
    if count == 1:
        return str(start + 1)
    return f"{start + 1 if count else start},{count}"


def unified_diff(
    old: list[str], new: list[str], *, context: int, budget: int, shown: int
) -> tuple[list[list[str]], int] | None:
    """The change from ``old`` to ``new`` as unified diff rows ``[mark, text]``: mark "@"
    (a hunk's header), " " (``context`` lines around each change), "-" or "+". The first
    ``shown`` rows, and how many there are in all; None if finding them would take more
    than ``budget`` steps."""
    start, end = common_ends(old, new)
    middle = _numbered(old[start : len(old) - end], new[start : len(new) - end])
    marks = _edit_marks(*middle, budget)
    if marks is None:
        return None
    lead, tail = min(start, context), min(end, context)
    marks = " " * lead + marks + " " * tail
    spans = _spans(marks, context)
    rows = _hunks(old, new, marks, start - lead, spans, shown)
    return rows, sum(1 + hi - lo for lo, hi in spans)


def _numbered(old: list[str], new: list[str]) -> tuple[list[int], list[int]]:
    """Each line as a number, the same for equal lines: comparing two long equal lines
    costs their length, comparing numbers nothing."""
    numbers: dict[str, int] = {}
    return (
        [numbers.setdefault(line, len(numbers)) for line in old],
        [numbers.setdefault(line, len(numbers)) for line in new],
    )


def _edit_marks(old: list[int], new: list[int], budget: int) -> str | None:
    """The shortest edit from ``old`` to ``new``, one mark per line (" " kept, "-"
    removed, "+" added), removals first in each change; None past ``budget`` steps. A
    line found on one side only is a change whatever the others are: such lines are left
    out of the search (as GNU diff does), so that rewriting every line costs nothing."""
    in_old, in_new = set(old), set(new)
    kept_old = [i for i, line in enumerate(old) if line in in_new]
    kept_new = [j for j, line in enumerate(new) if line in in_old]
    a, b = [old[i] for i in kept_old], [new[j] for j in kept_new]
    start, end = common_ends(a, b)
    found = _shortest_edit(a[start : len(a) - end], b[start : len(b) - end], budget)
    if found is None:
        return None
    marks = " " * start + found + " " * end
    return _removals_first(_with_unmatched(marks, kept_old, kept_new, len(old), len(new)))


def _with_unmatched(marks: str, kept_old: list[int], kept_new: list[int], n: int, m: int) -> str:
    """``marks`` of the lines kept in the search (``kept_old``: their places in the ``n``
    lines of the old text; ``kept_new``, in the ``m`` of the new), with the lines left out
    put back as removed or added where they were."""
    out: list[str] = []
    i = j = p = q = 0  # The next line of each text, and of each list of kept lines.
    for mark in marks:
        if mark != "+":
            out.append("-" * (kept_old[p] - i))
            i, p = kept_old[p] + 1, p + 1
        if mark != "-":
            out.append("+" * (kept_new[q] - j))
            j, q = kept_new[q] + 1, q + 1
        out.append(mark)
    out.append("-" * (n - i) + "+" * (m - j))
    return "".join(out)


def _shortest_edit(old: list[int], new: list[int], budget: int) -> str | None:
    """Myers' shortest edit from ``old`` to ``new`` (marks in the order found); None past
    ``budget`` steps (a diagonal tried, or two lines compared). ``furthest[d][i]`` is the
    furthest ``x`` (in ``old``) that a path with ``d`` changes reaches on diagonal
    ``k = x - y = 2i - d``: kept as arrays, 8 bytes each."""
    if not old or not new:
        return "-" * len(old) + "+" * len(new)
    furthest: list[array] = []
    previous = array("l", [0])
    for changes in range(len(old) + len(new) + 1):
        reach = array("l", bytes(8 * (changes + 1)))
        furthest.append(reach)
        for i in range(changes + 1):
            x = previous[i] if _added(previous, i, changes) else previous[i - 1] + 1
            y = x - 2 * i + changes
            begin = x
            while x < len(old) and y < len(new) and old[x] == new[y]:
                x, y = x + 1, y + 1
            reach[i] = x
            if x >= len(old) and y >= len(new):
                return _path(furthest, len(old), len(new))
            budget -= 1 + x - begin
            if budget < 0:
                return None
        previous = reach
    raise AssertionError("a path with len(old) + len(new) changes always ends")


def _added(previous: array, i: int, changes: int) -> bool:
    """Whether the path to diagonal ``2i - changes`` comes from the one above it (a line
    added), rather than from the one below (a line removed): whichever reached further."""
    return i == 0 or (i != changes and previous[i - 1] < previous[i])


def _path(furthest: list[array], x: int, y: int) -> str:
    """The marks of the path ``furthest`` found to (``x``, ``y``), walked back."""
    marks = []
    for changes in range(len(furthest) - 1, 0, -1):
        i, previous = (x - y + changes) // 2, furthest[changes - 1]
        added = _added(previous, i, changes)
        px = previous[i] if added else previous[i - 1]
        py = px - (x - y + 1 if added else x - y - 1)
        marks.append(" " * (x - (px if added else px + 1)))
        marks.append("+" if added else "-")
        x, y = px, py
    marks.append(" " * x)
    return "".join(reversed(marks))


def _removals_first(marks: str) -> str:
    """Each change's removals, then its additions, as ``diff -u`` shows them."""
    return CHANGE.sub(lambda run: "-" * run[0].count("-") + "+" * run[0].count("+"), marks)


def _hunks(
    old: list[str], new: list[str], marks: str, first: int, spans: list[list[int]], shown: int
) -> list[list[str]]:
    """The first ``shown`` rows of the hunks ``spans`` of ``marks``, whose first mark is
    of line ``first`` in both texts."""
    rows: list[list[str]] = []
    at, i, j = 0, first, first
    for lo, hi in spans:
        i += lo - at - marks.count("+", at, lo)
        j += lo - at - marks.count("-", at, lo)
        part = marks[lo:hi]
        rows.append(
            ["@", hunk_header(i, len(part) - part.count("+"), j, len(part) - part.count("-"))]
        )
        for mark in part:
            if len(rows) >= shown:
                return rows[:shown]
            rows.append([mark, new[j] if mark == "+" else old[i]])
            i += mark != "+"
            j += mark != "-"
        at = hi
    return rows[:shown]


def _spans(marks: str, context: int) -> list[list[int]]:
    """Where each hunk begins and ends in ``marks``: a change with ``context`` lines
    around it, changes whose contexts meet in one hunk."""
    spans: list[list[int]] = []
    for run in CHANGE.finditer(marks):
        lo, hi = max(run.start() - context, 0), min(run.end() + context, len(marks))
        if spans and lo <= spans[-1][1]:
            spans[-1][1] = hi
        else:
            spans.append([lo, hi])
    return spans
