"""The registered actions check an agent's arguments when it proposes (and a reviewer's
when they edit): a refused proposal names the field and writes nothing."""

from contextlib import contextmanager

import pytest
from django.core.exceptions import ImproperlyConfigured

from runs.actions.registry import get_action, registered
from runs.errors import InvalidInput
from runs.models import Decision, Operation
from tests.conftest import http_arguments
from tests.helpers import decide_on, refused

FILE = {"path": "notes/today.md", "content": "hello\n", "expected_sha256": None}
TRANSFER = {"from": "A", "to": "B", "amount": "100.00"}
EMAIL = {"to": ["ops@example.com"], "subject": "Report", "body": "All green."}


@contextmanager
def refused_naming(text: str):
    """Expect ``InvalidInput`` whose message contains ``text``, and nothing written."""
    with refused(InvalidInput):
        try:
            yield
        except InvalidInput as error:
            assert text in str(error)
            raise


def without(arguments: dict, key: str) -> dict:
    return {k: v for k, v in arguments.items() if k != key}


@pytest.mark.parametrize(
    "arguments, field",
    [
        (without(FILE, "expected_sha256"), "arguments.expected_sha256"),
        ({**FILE, "expected_sha256": "abc"}, "arguments.expected_sha256"),
        ({**FILE, "expected_sha256": "A" * 64}, "arguments.expected_sha256"),
        ({**FILE, "path": "/etc/passwd"}, "arguments.path"),
        ({**FILE, "path": "../x"}, "arguments.path"),
        ({**FILE, "path": "notes/../../x"}, "arguments.path"),
        ({**FILE, "path": "notes\\..\\x"}, "arguments.path"),
        ({**FILE, "path": ""}, "arguments.path"),
        ({**FILE, "mode": "0777"}, "arguments.mode"),
    ],
)
def test_file_write_refuses_bad_arguments(propose, arguments, field):
    with refused_naming(field):
        propose(action="file.write", arguments=arguments, rollback_kind="in_band")


@pytest.mark.parametrize("amount", [0, "0.00", -5, "-0.01", "10.005", "abc"])
def test_ledger_transfer_refuses_an_amount_that_is_not_positive_cents(propose, amount):
    with refused_naming("arguments.amount"):
        propose(arguments={**TRANSFER, "amount": amount})


@pytest.mark.parametrize("to", [["not-an-address"], ["ops@example.com", "a@b@c"], []])
def test_email_send_refuses_a_bad_recipient_list(propose, to):
    with refused_naming("arguments.to"):
        propose(action="email.send", arguments={**EMAIL, "to": to}, rollback_kind="out_of_band")


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda a, host: {**a, "url": "http://evil.example/x"}, "not in OVERSIGHT_HTTP_ALLOWED"),
        (lambda a, host: {**a, "url": f"ftp://{host}/items/x"}, "must be an http(s) URL"),
        (lambda a, host: {**a, "verify": {"url": "http://evil.example/x"}}, "arguments.verify.url"),
        (lambda a, host: {**a, "method": "GET"}, "arguments.method"),
        (lambda a, host: without(a, "verify"), "arguments.verify"),
    ],
)
def test_http_request_refuses_calls_outside_its_rules(propose, target, change, field):
    arguments = change(http_arguments(target.base), target.base.removeprefix("http://"))

    with refused_naming(field):
        propose(action="http.request", arguments=arguments, rollback_kind="out_of_band")


@pytest.mark.parametrize(
    "action, arguments, rollback_kind",
    [
        ("file.write", FILE, "compensating"),
        ("ledger.transfer", TRANSFER, "in_band"),
        ("email.send", EMAIL, "none"),
        ("http.request", "plain", "compensating"),
        ("http.request", "with-compensation", "out_of_band"),
    ],
)
def test_rollback_kind_must_be_the_one_the_action_offers(
    propose, target, action, arguments, rollback_kind
):
    if action == "http.request":
        arguments = http_arguments(target.base, compensate=arguments == "with-compensation")

    with refused_naming("rolls back"):
        propose(action=action, arguments=arguments, rollback_kind=rollback_kind)


def test_edit_that_breaks_the_schema_is_refused(propose, reviewer, accounts):
    op = propose(arguments=TRANSFER)

    with refused_naming("arguments.amount"):
        decide_on(op, reviewer, Decision.Kind.EDIT, arguments={**TRANSFER, "amount": "-1"})

    op.refresh_from_db()
    assert (op.status, op.arguments) == (Operation.Status.PROPOSED, TRANSFER)
    assert not op.decisions.exists()


@pytest.fixture
def fresh_registry():
    """The registry is computed once per process: recompute it for this test's
    settings, and again for the next test's."""
    registered.cache_clear()
    yield
    registered.cache_clear()


@pytest.mark.parametrize(
    "actions, problem",
    [
        (["runs.actions.nowhere.Missing"], "cannot import runs.actions.nowhere.Missing"),
        (["runs.actions.files.Missing"], "cannot import runs.actions.files.Missing"),
        (["runs.actions.base.Arguments"], "is not a named Action"),
        (["runs.actions.files.FileWrite"] * 2, "two actions are named file.write"),
    ],
)
def test_misconfigured_action_registry_fails_loudly(fresh_registry, settings, actions, problem):
    settings.OVERSIGHT_ACTIONS = actions

    with pytest.raises(ImproperlyConfigured, match=problem):
        get_action("file.write")


def test_action_listed_in_settings_is_registered(fresh_registry, settings):
    settings.OVERSIGHT_ACTIONS = ["runs.actions.ledger.LedgerTransfer"]

    assert list(registered()) == ["ledger.transfer"]
    assert get_action("file.write") is None
