"""What an agent proposes is refused at proposal, with the field and the reason, when it
would be shown as something other than it is or fail only when carried out: an amount
written with an exponent ("1e3", accepted and shown as "1e3"), and an email subject with
any line separator (VT, FF, FS, GS, RS, NEL, U+2028, U+2029 were accepted and refused
only by the mail library at sending, halting the run on an alert) (#35 items 7, 12)."""

import pytest

from runs.models import Operation
from tests.api_helpers import problem, proposal

pytest_plugins = ["tests.api_helpers"]


@pytest.fixture
def run_id(api) -> int:
    session = api.post("/sessions", {"title": "Plain"}).json()["id"]
    return api.post("/runs", {"session": session, "goal": "Plain"}).json()["id"]


def transfer(amount) -> dict:
    return proposal(arguments={"from": "A", "to": "B", "amount": amount})


@pytest.mark.parametrize("amount", ["1e3", "1E3", " 12", "12 ", "1,000.00", "NaN", "Infinity"])
def test_an_amount_that_is_not_a_plain_decimal_is_refused(api, run_id, amount):
    body = problem(api.propose(run_id, transfer(amount)), 422, "arguments.amount")

    assert "amount" in body["detail"] and "plain decimal" in body["detail"]
    assert not Operation.objects.exists()


@pytest.mark.parametrize(("amount", "shown"), [("1250.00", "1250.00"), (1000, "1000"), ("7", "7")])
def test_a_plain_amount_is_kept_as_written(api, run_id, amount, shown):
    created = api.propose(run_id, transfer(amount))

    assert created.status_code == 201, created.content
    assert str(Operation.objects.get().arguments["amount"]) == shown


SEPARATORS = ["\r", "\n", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


def test_the_separators_are_every_one_str_splitlines_knows():
    found = [c for c in map(chr, range(0x110000)) if len(f"a{c}b".splitlines()) > 1]

    assert sorted(found) == sorted(SEPARATORS)


@pytest.mark.parametrize("separator", SEPARATORS, ids=[hex(ord(c)) for c in SEPARATORS])
def test_an_email_subject_with_a_line_separator_is_refused_at_proposal(api, run_id, separator):
    arguments = {"to": ["ops@example.com"], "subject": f"Hi{separator}Bcc: x", "body": "."}
    response = api.propose(
        run_id, proposal(action="email.send", arguments=arguments, rollback_kind="out_of_band")
    )

    problem(response, 422, "arguments.subject")
    assert not Operation.objects.exists()
