"""The reviewers' side of human requests (#12): the request page and its answer forms,
the queue beside operations, the run page, and the agent's own words (a request's
prompt and context, a proposal's summary and rationale) shown escaped."""

import re

import pytest

from runs.models import HumanRequest, Operation
from runs.services import requests as service
from tests.conftest import AGENT
from tests.helpers import stored

HTMX = {"HX-Request": "true"}
HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


@pytest.fixture
def ask(run, agent_token):
    def _ask(prompt: str = "May I ship the release?", **fields) -> HumanRequest:
        return service.ask(run=run, prompt=prompt, actor=AGENT, token=agent_token, **fields)[0]

    return _ask


def post_answer(client, human: HumanRequest, kind: str, **fields):
    human.refresh_from_db()
    return client.post(
        f"/requests/{human.pk}/answer/", {"kind": kind, "version": human.version, **fields}
    )


def errors(page: str) -> list[str]:
    return re.findall(r'<p class="error field-error" role="alert">([^<]*)</p>', page) + [
        error
        for block in re.findall(r'<div class="error" role="alert">(.*?)</div>', page, re.S)
        for error in re.findall(r"<p>([^<]*)</p>", block)
    ]


# --- access -----------------------------------------------------------------------------


def test_anonymous_is_sent_to_sign_in(client, ask):
    human = ask()
    response = client.get(f"/requests/{human.pk}/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_another_projects_member_finds_nothing(client, ask, outsider):
    human = ask()
    client.force_login(outsider)
    assert client.get(f"/requests/{human.pk}/").status_code == 404
    assert post_answer(client, human, "approve").status_code == 404
    human.refresh_from_db()
    assert human.status == "open"


def test_an_auditor_reads_but_may_not_answer(client, ask, auditor):
    human = ask()
    client.force_login(auditor)
    page = client.get(f"/requests/{human.pk}/").text
    assert "does not include deciding" in page
    assert "request-answer" not in page and 'action="/requests/' not in page
    before = stored()
    assert post_answer(client, human, "approve").status_code == 403
    assert stored() == before


# --- answering --------------------------------------------------------------------------


def test_a_reviewer_signs_off_and_sees_who_answered_when(client, ask, reviewer, run):
    human = ask()
    client.force_login(reviewer)
    page = client.get(f"/requests/{human.pk}/").text
    assert "A sign-off the agent asks" in page
    assert ">Sign off</button>" in page
    assert "Type" not in page  # No challenge: nothing executes on an answer.

    response = post_answer(client, human, "approve", comment="Looks right")

    assert response.status_code == 302
    assert response["Location"] == f"/requests/{human.pk}/"
    page = client.get(response["Location"]).text
    assert "Signed off; the agent reads your answer." in page
    assert re.search(r'<p id="answer">Approve by <strong>reviewer</strong>, <time', page)
    assert "Comment: “Looks right”" in page
    assert "This request no longer awaits an answer." in page
    human.refresh_from_db()
    assert (human.status, human.answered_by) == ("answered", reviewer)
    run.refresh_from_db()
    assert run.status == "queued"


def test_a_rejection_needs_a_reason(client, ask, reviewer):
    human = ask()
    client.force_login(reviewer)
    response = post_answer(client, human, "reject", comment="")
    assert response.status_code == 400
    assert errors(response.text) == ["Say why you reject it."]
    assert '<details class="more" open>' in response.text

    assert post_answer(client, human, "reject", comment="Not on a Friday").status_code == 302
    human.refresh_from_db()
    assert (human.status, human.comment) == ("rejected", "Not on a Friday")


def test_a_reviewer_chooses_with_a_button(client, ask, reviewer):
    human = ask("Which region?", choices=["eu-west", "us-east"])
    client.force_login(reviewer)
    page = client.get(f"/requests/{human.pk}/").text
    assert re.findall(r'<button type="submit" name="choice" value="([^"]*)"', page) == [
        "eu-west",
        "us-east",
    ]

    assert post_answer(client, human, "choose", choice="us-east").status_code == 302
    human.refresh_from_db()
    assert (human.answer_kind, human.answer) == ("choose", "us-east")
    assert "<strong>us-east</strong>" in client.get(f"/requests/{human.pk}/").text


def test_a_choice_with_spaces_around_it_can_be_chosen(client, ask, reviewer):
    human = ask("Ship?", choices=["yes ", " no"])
    client.force_login(reviewer)

    assert post_answer(client, human, "choose", choice=" no").status_code == 302

    human.refresh_from_db()
    assert (human.status, human.answer) == ("answered", " no")


def test_a_choice_not_offered_is_a_form_error(client, ask, reviewer):
    human = ask("Which region?", choices=["eu-west", "us-east"])
    client.force_login(reviewer)
    before = stored()
    response = post_answer(client, human, "choose", choice="mars")
    assert response.status_code == 400
    assert errors(response.text) == ["data: choose one of the request&#x27;s choices"]
    assert stored() == before


def test_an_answer_with_data_is_checked_against_the_schema(client, ask, reviewer):
    schema = {"type": "object", "properties": {"budget": {"type": "integer"}}}
    human = ask("What budget?", answer_schema=schema)
    client.force_login(reviewer)
    assert "Your answer (JSON)" in client.get(f"/requests/{human.pk}/").text

    not_json = post_answer(client, human, "answer", value="{budget: 5")
    assert not_json.status_code == 400
    assert errors(not_json.text)[0].startswith("Not valid JSON")
    invalid = post_answer(client, human, "answer", value='{"budget": "lots"}')
    assert invalid.status_code == 400
    assert errors(invalid.text) == [
        "data.budget: &quot;lots&quot; is not of type &quot;integer&quot;"
    ]
    human.refresh_from_db()
    assert human.status == "open"

    assert post_answer(client, human, "answer", value='{"budget": 1200}').status_code == 302
    human.refresh_from_db()
    assert human.answer == {"budget": 1200}
    assert "&quot;budget&quot;: 1200" in client.get(f"/requests/{human.pk}/").text


def test_a_string_schema_takes_plain_text(client, ask, reviewer):
    human = ask("What should the release be called?", answer_schema={"type": "string"})
    client.force_login(reviewer)
    page = client.get(f"/requests/{human.pk}/").text
    assert "Your answer (JSON)" not in page and "Your answer" in page

    assert post_answer(client, human, "answer", value="Blue Heron").status_code == 302
    human.refresh_from_db()
    assert human.answer == "Blue Heron"


def test_a_kind_the_request_does_not_take_is_a_form_error(client, ask, reviewer):
    human = ask()
    client.force_login(reviewer)
    before = stored()
    response = post_answer(client, human, "answer", value='"yes"')
    assert response.status_code == 400
    assert errors(response.text) == [
        "kind: this request is answered by approve or reject, not answer"
    ]
    assert stored() == before


def test_a_stale_page_is_a_form_error(client, ask, reviewer):
    human = ask()
    client.force_login(reviewer)
    before = stored()
    response = client.post(
        f"/requests/{human.pk}/answer/", {"kind": "approve", "version": human.version + 1}
    )
    assert response.status_code == 400
    assert "changed since you read it" in errors(response.text)[0]
    assert stored() == before


def test_the_owner_sees_why_they_may_not_answer(client, ask, owner):
    human = ask()
    client.force_login(owner)
    page = client.get(f"/requests/{human.pk}/").text
    assert "You own this run, so someone else must decide on it (four eyes)." in page
    assert "request-answer" not in page and ">Sign off</button>" not in page
    before = stored()
    response = post_answer(client, human, "approve")
    assert response.status_code == 400
    assert errors(response.text) == ["you own this run, so someone else must decide on it"]
    assert stored() == before


def test_an_answered_request_takes_no_second_answer(client, ask, reviewer, reviewer2):
    human = ask()
    client.force_login(reviewer)
    post_answer(client, human, "approve")
    client.force_login(reviewer2)
    before = stored()
    response = post_answer(client, human, "reject", comment="Wait")
    assert response.status_code == 400
    assert "it no longer awaits an answer" in errors(response.text)[0]
    assert stored() == before


# --- the agent's words, escaped ------------------------------------------------------------


def test_prompt_context_and_choices_are_escaped(client, ask, reviewer):
    context = (
        f"{HOSTILE}\n\n**Bold** and [docs](https://example.com/a?b=1&c=2) and "
        "[trap](javascript:alert(1))\n\n```\n<b>code</b>\n```"
    )
    human = ask(f"Ship {HOSTILE}?", context=context, choices=[HOSTILE, "plain"])
    client.force_login(reviewer)

    page = client.get(f"/requests/{human.pk}/").text

    assert "<script>" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert "<strong>Bold</strong>" in page
    assert (
        '<a href="https://example.com/a?b=1&amp;c=2" rel="nofollow noopener noreferrer">docs</a>'
        in page
    )
    assert 'href="javascript' not in page and "[trap](javascript:alert(1))" in page
    assert '<pre class="code">&lt;b&gt;code&lt;/b&gt;</pre>' in page
    assert 'value="&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&lt;img' in page

    queue = client.get("/approvals/").text
    assert "<script>" not in queue and "Ship &lt;script&gt;" in queue


def test_the_operation_page_and_queue_show_the_agents_why_escaped(client, propose, reviewer):
    op = propose(summary=f"Pay {HOSTILE}", rationale=f"Because\n{HOSTILE}")
    client.force_login(reviewer)

    page = client.get(f"/operations/{op.pk}/").text
    assert "Why, in the agent's words" in page
    assert "The agent's words, not checked by Oversight" in page
    assert '<p class="goal summary">Pay &lt;script&gt;' in page
    assert '<p class="rationale">Because\n&lt;script&gt;' in page
    assert "<script>" not in page

    queue = client.get("/approvals/").text
    row = re.search(rf'<tr id="op-{op.pk}".*?</tr>', queue, re.S)[0]
    assert "Agent says:</span> Pay &lt;script&gt;" in row
    assert "<script>" not in queue


def test_an_operation_without_a_why_shows_no_such_section(client, propose, reviewer):
    op = propose()
    client.force_login(reviewer)
    assert "in the agent's words" not in client.get(f"/operations/{op.pk}/").text


# --- the queue and the run page ------------------------------------------------------------


def test_the_queue_lists_open_requests_beside_operations(client, ask, propose, reviewer):
    op, human = propose("call-1"), None
    client.force_login(reviewer)
    since = re.search(r"\"since\": \"([^\"]+)\"", client.get("/approvals/", headers=HTMX).text)[1]
    human = ask("Sign off the plan?")
    assert Operation.objects.get(pk=op.pk).status == "proposed"

    fragment = client.get("/approvals/", {"since": since}, headers=HTMX)

    assert fragment.status_code == 200
    assert fragment.text.lstrip().startswith("<title>(2) Approvals")
    assert re.search(r'<span id="nav-pending"[^>]*>2</span>', fragment.text)
    assert "1 operation waiting for a decision and 1 request for an answer" in fragment.text
    assert f'<tr id="request-{human.pk}"' in fragment.text
    assert f'href="/requests/{human.pk}/"' in fragment.text
    new_since = re.search(r"\"since\": \"([^\"]+)\"", fragment.text)[1]
    assert client.get("/approvals/", {"since": new_since}, headers=HTMX).status_code == 204

    post_answer(client, human, "approve")
    after = client.get("/approvals/", {"since": new_since}, headers=HTMX)
    assert after.status_code == 200
    assert f'id="request-{human.pk}"' not in after.text


def test_filtering_by_action_or_risk_hides_requests(client, ask, reviewer):
    human = ask()
    client.force_login(reviewer)
    assert f'id="request-{human.pk}"' in client.get("/approvals/?project=acme").text
    assert f'id="request-{human.pk}"' not in client.get("/approvals/?risk=high").text


def test_the_run_page_lists_its_requests(client, ask, reviewer, run):
    first, second = ask("First?"), ask("Which?", choices=["a", "b"])
    client.force_login(reviewer)
    post_answer(client, second, "choose", choice="b")
    page = client.get(f"/runs/{run.pk}/").text
    assert f'<a href="/requests/{first.pk}/">Request {first.pk}</a>' in page
    assert re.search(rf'<tr id="request-{second.pk}">.*Choose by reviewer: b</td>', page)


# --- query counts --------------------------------------------------------------------------


@pytest.mark.parametrize("fields", [{}, {"choices": ["a", "b"]}, {"answer_schema": {}}])
def test_the_request_page_takes_a_fixed_number_of_queries(
    client, ask, reviewer, fields, django_assert_num_queries
):
    human = ask(**fields)
    client.force_login(reviewer)
    client.get(f"/requests/{human.pk}/")  # The first visit stores the time zone.
    # Session, user, the request with its run, project, owner and tokens, the decide
    # permission, the checkpoints, and the navigation's three.
    with django_assert_num_queries(8):
        assert client.get(f"/requests/{human.pk}/").status_code == 200


def test_an_answered_request_page_takes_as_many(client, ask, reviewer, django_assert_num_queries):
    human = ask()
    client.force_login(reviewer)
    post_answer(client, human, "approve")
    client.get(f"/requests/{human.pk}/")
    with django_assert_num_queries(8):
        assert client.get(f"/requests/{human.pk}/").status_code == 200
