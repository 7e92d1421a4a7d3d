"""A target's answer is as hostile as an agent's request: ``http.request`` stores what
a target answered in the operation's result, so an answer Oversight cannot store (NaN,
NUL, a lone surrogate, nesting thousands deep) must end as readable text, never crash
the worker that verifies it."""

import json
from http.server import BaseHTTPRequestHandler

import pytest

from runs.models import Decision, Operation
from tests.helpers import drained, page_of, post_decision
from tests.test_http_redirects import serve

HOSTILE = {
    "nan": b'{"colour": NaN}',
    "infinity": b'{"colour": 1e999}',
    "nul": b'{"colour": "gr\\u0000een"}',
    "surrogate": b'{"colour": "\\ud800"}',
    "deep": b"[" * 5000 + b"]" * 5000,
    "not utf-8": b'{"colour": "\xff"}',
}


@pytest.fixture
def hostile(request, settings, target):
    answer = HOSTILE[request.param]

    class Hostile(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format, *args) -> None:
            pass

    server = serve(Hostile)
    settings.OVERSIGHT_HTTP_ALLOWED_HOSTS = [
        *settings.OVERSIGHT_HTTP_ALLOWED_HOSTS,
        server.base.removeprefix("http://"),
    ]
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("hostile", list(HOSTILE), indirect=True)
def test_an_answer_that_cannot_be_stored_is_kept_as_text(approved, hostile):
    op = drained(
        approved("http", verify={"url": f"{hostile.base}/items/x", "json": {"colour": "green"}})
    )

    # Not the expected colour: verification cannot show the effect, a person is told.
    assert op.status == Operation.Status.ALERTED
    stored = json.dumps(Operation.objects.get(pk=op.pk).result, allow_nan=False)
    assert "\\u0000" not in stored


@pytest.mark.parametrize("hostile", list(HOSTILE), indirect=True)
def test_a_preview_of_an_answer_that_cannot_be_stored_can_be_decided_on(
    client, reviewer, propose, hostile
):
    """A reviewer's page reads the same answers (within a preview's budget: see
    test_preview_budgets), and the preview kept with the decision must be storable."""
    arguments = {
        "method": "PUT",
        "url": f"{hostile.base}/items/x",
        "verify": {"url": f"{hostile.base}/items/x", "json": {"colour": "green"}},
    }
    op = propose("put", action="http.request", arguments=arguments, rollback_kind="out_of_band")
    client.force_login(reviewer)

    page = client.get(page_of(op))

    assert page.status_code == 200
    assert f"GET {hostile.base}/items/x answers 200." in page.text
    assert post_decision(client, op, confirm="http.request").status_code == 302
    assert Decision.objects.get(operation=op).preview_sha256
