"""What changed in an operation's preview between the page a reviewer decided on and
the target now, said plainly: "The balance of A changed since you looked: it was
5,000.00, it is now 50.00."

A decision is bound to the hash of the preview its reviewer was shown
(``runs.services.previews``), and refused if the target shows another by then; a hash
says only *that* it changed. So each decision form also carries a digest of the preview
on its page (``digest``): the preview's fields, each one longer than ``KEPT`` characters
replaced by its hash, so that balances, a file's state or a resource's answer travel
whole and a diff or a message's body by hash, and a form stays small. The digest is the
reviewer's own page sent back: it words the refusal and binds nothing (a forged one
misleads only the person who sent it; what they decide is bound by the hash)."""

import json

from runs.amounts import readable_amount
from runs.canonical import canonical_json, sha256_hex

KEPT = 400  # bytes of one field's JSON kept as they are
# A digest longer than any page writes is not read: it was not ours (and so short a text
# cannot nest deep enough to exhaust the parser's recursion).
LIMIT = 8_000
UNKNOWN = "What it would change is different from what you saw."


def digest(preview: dict | None) -> str:
    """What a decision form carries of the preview on its page ("" for none)."""
    if preview is None:
        return ""
    return canonical_json({name: _kept(value) for name, value in preview.items()}).decode()


def _kept(value):
    text = canonical_json(value)
    return value if len(text) <= KEPT else f"sha256:{sha256_hex(text)}"


def what_changed(seen: str, now: dict | None) -> list[str]:
    """How the preview ``now`` differs from the one whose digest the reviewer's form
    carried (``seen``), in sentences; one that says only that it changed when that is
    all that can be told (no digest, another kind of preview, or no preview now)."""
    before = _read(seen)
    if before is None or now is None:
        return [UNKNOWN]
    if "unavailable" in (before.get("kind"), now["kind"]):
        said = _availability(before, now)
    elif before.get("kind") == now["kind"] and now["kind"] in SAYS:
        said = SAYS[now["kind"]](before, now)
    else:
        said = []
    return said or [UNKNOWN]


def _differs(before: dict, now: dict, name: str) -> bool:
    """Field ``name`` of the preview ``now`` is not the one in the digest ``before``."""
    return before.get(name) != _kept(now[name])


def _read(seen: str) -> dict | None:
    """The digest a form sent back, if it is one: the reviewer's browser sent it."""
    if not seen or len(seen) > LIMIT:
        return None
    try:
        value = json.loads(seen)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _availability(before: dict, now: dict) -> list[str]:
    if now["kind"] != "unavailable":
        return ["When you looked there was no preview; now there is."]
    if before.get("kind") != "unavailable":
        return [f"Now there is no preview: {now['why']}."]
    return [f"There is still no preview, now because {now['why']}."]


def _balances(before: dict, now: dict) -> list[str]:
    was = _column(before.get("rows"), "account", "before")
    said = [
        f"The balance of {account} changed since you looked: it was "
        f"{readable_amount(was[account])}, it is now {readable_amount(balance)}."
        for account, balance in _column(now["rows"], "account", "before").items()
        if account in was and was[account] != balance
    ]
    if before.get("holds") is True and not now["holds"]:
        said.append(f"Now the transfer could not be made: {now['why']}.")
    elif before.get("holds") is False and now["holds"]:
        said.append("Now the transfer could be made.")
    return said


def _file(before: dict, now: dict) -> list[str]:
    path = now["path"]
    if before.get("as_expected") is True and not now["as_expected"]:
        return [
            f"The file {path} changed since you looked: it is no longer the one the agent "
            "based its change on, so the write would be refused."
        ]
    if before.get("as_expected") is False and now["as_expected"]:
        return [f"The file {path} is again the one the agent based its change on."]
    return [f"The file {path} changed since you looked: the lines the write changes differ now."]


def _message(before: dict, now: dict) -> list[str]:
    if not _differs(before, now, "refused"):
        return []
    refused = ", ".join(now["refused"]) or "none"
    return [f"The recipients the sending would refuse changed since you looked: now {refused}."]


def _exchange(before: dict, now: dict) -> list[str]:
    was = _column(before.get("fields"), "field", "now")
    said = [
        f"The resource's {field} changed since you looked: it was {was[field]}, it is now {value}."
        for field, value in _column(now["fields"], "field", "now").items()
        if field in was and was[field] != value
    ]
    if not said and _differs(before, now, "now"):
        said.append(f"The resource answers differently now: {now['now']}.")
    return said


def _column(rows, key: str, value: str) -> dict[str, str]:
    """``{row[key]: row[value]}`` of a preview's table, as text; nothing of anything else
    (a digest's table may be a hash, or not a table at all)."""
    if not isinstance(rows, list):
        return {}
    return {str(row.get(key)): str(row.get(value)) for row in rows if isinstance(row, dict)}


SAYS = {"balances": _balances, "file": _file, "message": _message, "http": _exchange}
