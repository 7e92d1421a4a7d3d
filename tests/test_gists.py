"""Each row of the queue says what its operation would do, in one line worked out from
its arguments when it is proposed or edited: a reviewer tells two transfers apart
without opening them, and the page reads a column instead of computing it per view."""

import pytest

from runs.models import Operation
from tests.conftest import http_arguments
from tests.helpers import decide_on

pytestmark = pytest.mark.django_db

TRANSFER = {"from": "operating", "to": "acme-supplies", "amount": "1250.00"}


def test_each_action_says_what_it_would_do_in_one_line(propose, target):
    gists = {
        "ledger.transfer": (
            {**TRANSFER, "require_balance_above": "10000"},
            "compensating",
            "operating → acme-supplies: 1,250.00, keeping operating above 10,000.00",
        ),
        "file.write": (
            {"path": "reports/day-2.md", "content": "a\nb\nc\n", "expected_sha256": None},
            "in_band",
            "write reports/day-2.md (new file, 3 lines)",
        ),
        "email.send": (
            {
                "to": ["a@example.com", "b@example.com", "c@example.org"],
                "subject": "Q3",
                "body": ".",
            },
            "out_of_band",
            "email to 3 recipients at 2 domains: Q3",
        ),
        "http.request": (
            http_arguments(target.base),
            "out_of_band",
            f"PUT {target.base}/items/x",
        ),
    }
    for n, (action, (arguments, rollback, gist)) in enumerate(gists.items()):
        op = propose(f"call-{n}", action=action, arguments=arguments, rollback_kind=rollback)
        assert op.gist == gist, action


def test_replacing_a_file_says_so(propose):
    arguments = {"path": "notes.md", "content": "one line", "expected_sha256": "0" * 64}
    op = propose(action="file.write", arguments=arguments, rollback_kind="in_band")
    assert op.gist == "write notes.md (replaces the file, 1 line)"


def test_an_action_not_registered_here_has_no_gist_and_the_queue_shows_its_name(
    propose, client, reviewer
):
    op = propose(action="crm.update", arguments={"id": 1}, rollback_kind="out_of_band")
    assert op.gist == ""
    client.force_login(reviewer)
    page = client.get("/approvals/").content.decode()
    assert f'id="op-{op.pk}-link"><code>crm.update</code></a>' in page


def test_a_long_gist_is_cut_to_its_column(propose):
    long = {"to": ["x@example.com"], "subject": "s" * 290, "body": "."}
    op = propose(action="email.send", arguments=long, rollback_kind="out_of_band")
    most = Operation._meta.get_field("gist").max_length
    assert len(op.gist) == most
    assert op.gist.endswith("s…")


def test_an_edit_gives_the_operation_the_gist_of_its_edited_arguments(propose, reviewer):
    op = propose(arguments=TRANSFER)
    decide_on(op, reviewer, "edit", arguments={**TRANSFER, "amount": "900.00"})
    op.refresh_from_db()
    assert op.gist == "operating → acme-supplies: 900.00"


def test_two_transfers_read_apart_in_the_queue_and_the_agent_s_text_is_escaped(
    propose, client, reviewer
):
    propose("call-1", arguments=TRANSFER)
    propose("call-2", arguments={"from": "<b>ops</b>", "to": "payroll", "amount": "75000"})
    client.force_login(reviewer)
    page = client.get("/approvals/").content.decode()
    assert '<span class="gist">operating → acme-supplies: 1,250.00</span>' in page
    assert '<span class="gist">&lt;b&gt;ops&lt;/b&gt; → payroll: 75,000.00</span>' in page
