"""When the target moved past the preview a reviewer decided on, the refusal says what
changed, in plain words, from the digest of the preview their page showed; what cannot
be told is said as such, and a digest that is not one is never trusted nor a 500."""

import json

import pytest

from runs.actions.previews import MAX_LINES
from runs.preview_changes import KEPT, LIMIT, UNKNOWN, digest, what_changed


def balances(a: str, holds: bool = True, why: str = "") -> dict:
    return {
        "kind": "balances",
        "rows": [
            {"account": "A", "before": a, "after": "0.00"},
            {"account": "B", "before": "0.00", "after": "100.00"},
        ],
        "floor": None,
        "holds": holds,
        "why": why,
    }


def file(as_expected: bool, added: str) -> dict:
    return {
        "kind": "file",
        "path": "README.md",
        "state": "changed",
        "as_expected": as_expected,
        "lines": [["-", "Run bin/setup."], ["+", added]],
        "folded": 0,
        "before": "",
    }


def exchange(now: str, colour: str) -> dict:
    return {
        "kind": "http",
        "method": "PUT",
        "url": "http://target/items/x",
        "headers": [],
        "body": "",
        "now": now,
        "fields": [{"field": "colour", "now": colour, "after": '"green"'}],
        "compensation": "",
    }


UNAVAILABLE = {"kind": "unavailable", "why": "link.md leads outside the workspace"}


@pytest.mark.parametrize(
    ("seen", "now", "said"),
    [
        (
            balances("5000.00"),
            balances("4000.00"),
            ["The balance of A changed since you looked: it was 5,000.00, it is now 4,000.00."],
        ),
        (
            balances("5000.00"),
            balances("50.00", False, "A holds 50.00, less than the 100 to transfer"),
            [
                "The balance of A changed since you looked: it was 5,000.00, it is now 50.00.",
                "Now the transfer could not be made: A holds 50.00, less than the 100 to transfer.",
            ],
        ),
        (
            file(True, "Run bin/demo."),
            file(False, "Run bin/demo."),
            [
                "The file README.md changed since you looked: it is no longer the one the "
                "agent based its change on, so the write would be refused."
            ],
        ),
        (
            file(True, "Run bin/demo."),
            file(True, "Run bin/test."),
            [
                "The file README.md changed since you looked: the lines the write changes "
                "differ now."
            ],
        ),
        (
            exchange("GET http://target/items/x answers 200", '"red"'),
            exchange("GET http://target/items/x answers 200", '"blue"'),
            ['The resource\'s colour changed since you looked: it was "red", it is now "blue".'],
        ),
        (
            exchange("GET http://target/items/x answers 200", '"red"'),
            exchange("GET http://target/items/x answers 404", '"red"'),
            ["The resource answers differently now: GET http://target/items/x answers 404."],
        ),
        (
            balances("5000.00"),
            UNAVAILABLE,
            ["Now there is no preview: link.md leads outside the workspace."],
        ),
        (UNAVAILABLE, balances("5000.00"), ["When you looked there was no preview; now there is."]),
        (balances("5000.00"), file(True, "Run bin/demo."), [UNKNOWN]),
    ],
    ids=[
        "balance",
        "balance-and-funding",
        "file-replaced",
        "file-lines",
        "resource-field",
        "resource-answer",
        "preview-lost",
        "preview-back",
        "another-kind",
    ],
)
def test_what_changed_is_said_plainly(seen, now, said):
    assert what_changed(digest(seen), now) == said


def test_a_long_diff_travels_by_its_hash_and_its_change_is_still_seen():
    lines = [["+", f"line {n}"] for n in range(MAX_LINES)]
    seen = {**file(True, ""), "lines": lines}
    kept = json.loads(digest(seen))
    assert kept["lines"].startswith("sha256:") and len(digest(seen)) < 2 * KEPT
    changed = {**seen, "lines": [*lines[:-1], ["+", "another line"]]}
    assert what_changed(digest(seen), changed) == [
        "The file README.md changed since you looked: the lines the write changes differ now."
    ]


def test_recipients_refused_now_are_named_however_many():
    """The sentence names them from the preview now, not from the digest, where a long
    list travels by its hash."""
    seen = {"kind": "message", "headers": [], "recipients": {}, "refused": [], "body": ""}
    refused = [f"person{n}@elsewhere.org" for n in range(40)]
    assert len(json.dumps(refused)) > KEPT
    assert what_changed(digest(seen), {**seen, "refused": refused}) == [
        "The recipients the sending would refuse changed since you looked: now "
        + ", ".join(refused)
        + "."
    ]
    assert what_changed(digest({**seen, "refused": refused}), seen) == [
        "The recipients the sending would refuse changed since you looked: now none."
    ]


@pytest.mark.parametrize(
    "sent",
    [
        "",
        "not json",
        "[" * 5_000,
        '"a string"',
        json.dumps({"kind": "balances", "rows": "sha256:00", "holds": "yes"}),
        json.dumps({"kind": "balances", "rows": [1, None, {"x": 1}]}),
        "{" + " " * LIMIT + "}",
    ],
    ids=["none", "garbage", "deep", "not-an-object", "hashed-rows", "bad-rows", "too-long"],
)
def test_a_digest_that_is_not_one_says_only_that_it_changed(sent):
    assert what_changed(sent, balances("4000.00")) == [UNKNOWN]


def test_with_no_preview_now_it_says_only_that_it_changed():
    assert what_changed(digest(balances("5000.00")), None) == [UNKNOWN]
    assert digest(None) == ""
