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
    """Post an answer from the request's page, from the form named by ``using`` (the
    request's own way to accept, if not given)."""
    human.refresh_from_db()
    return client.post(
        f"/requests/{human.pk}/answer/", {"kind": kind, "version": human.version, **fields}
    )


def errors(page: str) -> list[str]:
    return re.findall(r'<p class="error field-error" role="alert">([^<]*)</p>', page) + [
        error
        for block in re.findall(r'<div class="error" role="alert"[^>]*>(.*?)</div>', page, re.S)
        for error in re.findall(r"<p>([^<]*)</p>", block)
    ]


def control(page: str, element_id: str) -> str:
    """The opening tag of the element ``element_id`` (a field, with its attributes)."""
    return re.search(rf'<(?:input|textarea|select)[^>]*\bid="{element_id}"[^>]*>', page)[0]


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


# --- answering: a sign-off -----------------------------------------------------------------


def test_a_reviewer_signs_off_and_sees_who_answered_when(client, ask, reviewer, run):
    human = ask()
    client.force_login(reviewer)
    page = client.get(f"/requests/{human.pk}/").text
    assert "A sign-off the agent asks" in page
    form = re.search(r'<form[^>]*class="decision answer-sign_off".*?</form>', page, re.S)[0]
    assert re.findall(r"<button[^>]*>([^<]*)<", form) == ["Sign off"]
    assert '<input type="hidden" name="kind" value="approve"' in form
    assert '<label for="sign_off-comment">Comment (optional)</label>' in form
    assert "Type" not in page  # No challenge: nothing executes on an answer.

    response = post_answer(client, human, "approve", using="sign_off", comment="Looks right")

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


def test_a_sign_off_is_rejected_under_reject_with_a_reason_of_its_own(client, ask, reviewer):
    """Reject has its own box, after the sign-off's form: the reason is never a comment
    typed above Sign off."""
    human = ask()
    client.force_login(reviewer)
    page = client.get(f"/requests/{human.pk}/").text
    form = re.search(r'<form[^>]*class="decision answer-reject".*?</form>', page, re.S)[0]
    assert '<input type="hidden" name="kind" value="reject"' in form
    assert '<label for="reject-comment">Reason (required): the agent reads it</label>' in form
    assert page.index('id="sign_off-form"') < page.index('id="reject-form"')
    before = stored()

    response = post_answer(client, human, "reject", using="reject", comment="  ")

    assert response.status_code == 400
    assert errors(response.text) == ["Say why you reject it."]
    assert response.text.count("<title>Error: Request") == 1
    assert '<details class="more" open>\n            <summary>Reject</summary>' in response.text
    comment = control(response.text, "reject-comment")
    assert 'aria-invalid="true"' in comment and "autofocus" in comment
    assert 'aria-describedby="reject-comment_error"' in comment
    assert "aria-invalid" not in control(response.text, "sign_off-comment")
    assert stored() == before

    response = post_answer(client, human, "reject", using="reject", comment="Not on a Friday")
    assert response.status_code == 302
    human.refresh_from_db()
    assert (human.status, human.answer_kind, human.comment) == (
        "rejected",
        "reject",
        "Not on a Friday",
    )


def test_a_sign_off_page_from_before_still_rejects_from_its_shared_box(client, ask, reviewer):
    """A page loaded before Reject had its own box posted the rejection from the
    sign-off's form: it is still recorded, and still needs its reason."""
    human = ask()
    client.force_login(reviewer)
    response = post_answer(client, human, "reject", using="sign_off", comment="")
    assert response.status_code == 400
    assert errors(response.text) == ["Say why you reject it."]

    response = post_answer(client, human, "reject", using="sign_off", comment="Not on a Friday")
    assert response.status_code == 302
    human.refresh_from_db()
    assert (human.status, human.comment) == ("rejected", "Not on a Friday")


# --- answering: a question -------------------------------------------------------------------


def test_a_question_is_answered_in_words(client, ask, reviewer):
    """#34: a question had no answer box; the answer went in the comment and the agent
    read a sign-off."""
    human = ask("What should the release be called?", kind="question")
    client.force_login(reviewer)
    page = client.get(f"/requests/{human.pk}/").text
    assert "A question the agent asks" in page
    assert '<label for="text-value">Your answer</label>' in page
    assert control(page, "text-value").startswith("<textarea")
    assert "Sign off" not in page and 'id="text-comment"' not in page

    response = post_answer(client, human, "answer", using="text", value="Blue Heron\n")

    assert response.status_code == 302
    human.refresh_from_db()
    assert (human.status, human.answer_kind, human.answer, human.comment) == (
        "answered",
        "answer",
        "Blue Heron",
        "",
    )
    page = client.get(f"/requests/{human.pk}/").text
    assert "Answered; the agent reads your answer." in page
    assert '<blockquote class="answer-text">Blue Heron</blockquote>' in page


@pytest.mark.parametrize(
    ("kind", "error", "focused"),
    [
        ("answer", "Write your answer.", "text-value"),
        # A forged rejection from the answer's box, which has no room for a reason.
        ("reject", "Say why you reject it.", None),
    ],
)
def test_a_questions_answer_without_words_is_refused_on_the_form(
    client, ask, reviewer, kind, error, focused
):
    human = ask("What should the release be called?", kind="question")
    client.force_login(reviewer)
    before = stored()
    response = post_answer(client, human, kind, using="text", value=" \n ")
    assert response.status_code == 400
    assert error in errors(response.text)
    if focused:
        assert "autofocus" in control(response.text, focused)
    assert stored() == before


def test_a_question_may_be_rejected_under_reject(client, ask, reviewer):
    human = ask("What should the release be called?", kind="question")
    client.force_login(reviewer)
    response = post_answer(client, human, "reject", using="reject", comment="")
    assert response.status_code == 400
    assert errors(response.text) == ["Say why you reject it."]
    assert '<details class="more" open>\n            <summary>Reject</summary>' in response.text
    assert "autofocus" in control(response.text, "reject-comment")

    rejected = post_answer(client, human, "reject", using="reject", comment="Ask legal")
    assert rejected.status_code == 302
    human.refresh_from_db()
    assert (human.status, human.answer_kind, human.comment) == ("rejected", "reject", "Ask legal")


# --- answering: a choice ---------------------------------------------------------------------


def test_a_reviewer_chooses_with_a_button(client, ask, reviewer):
    human = ask("Which region?", choices=["eu-west", "us-east"])
    client.force_login(reviewer)
    page = client.get(f"/requests/{human.pk}/").text
    assert "A choice the agent asks" in page
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


# --- answering: data -------------------------------------------------------------------------

ORDER = {
    "type": "object",
    "title": "Order",
    "description": "What to buy, and how.",
    "properties": {
        "item": {"type": "string", "title": "Item", "description": "As the supplier names it"},
        "quantity": {"type": "integer", "minimum": 1, "default": 1},
        "unit_price": {"type": "number", "title": "Unit price"},
        "express": {"type": "boolean", "title": "Express delivery", "default": False},
        "colour": {"$ref": "#/$defs/Colour"},
    },
    "required": ["item", "quantity"],
    "$defs": {"Colour": {"enum": ["red", "blue"], "type": "string", "title": "Colour"}},
}


def test_data_is_answered_in_fields_drawn_from_its_schema(client, ask, reviewer):
    human = ask("What should we order?", answer_schema=ORDER)
    client.force_login(reviewer)
    page = client.get(f"/requests/{human.pk}/").text
    assert "Data the agent asks for" in page
    assert re.findall(r'<label for="fields-(field_\d)">([^<]*)</label>', page) == [
        ("field_0", "Item (required)"),
        ("field_1", "quantity (required)"),
        ("field_2", "Unit price"),
        ("field_3", "Express delivery"),
        ("field_4", "Colour"),
    ]
    assert '<p class="muted">What to buy, and how.</p>' in page
    assert 'id="fields-field_0_helptext">As the supplier names it</span>' in page
    assert 'aria-describedby="fields-field_0_helptext"' in control(page, "fields-field_0")
    assert 'type="number"' in control(page, "fields-field_1") and 'value="1"' in page
    assert re.findall(r'<option value="([^"]*)"( selected)?>([^<]*)</option>', page) == [
        ("", "", "—"),
        ("true", "", "Yes"),
        ("false", " selected", "No"),
        ("", " selected", "—"),
        ("&quot;red&quot;", "", "red"),
        ("&quot;blue&quot;", "", "blue"),
    ]
    # Raw JSON stays at hand, folded: for what the fields cannot say.
    assert "<summary>Answer in JSON instead</summary>" in page

    response = post_answer(
        client,
        human,
        "answer",
        using="fields",
        field_0="Printer paper",
        field_1="12",
        field_2="4.5",
        field_3="true",
        field_4='"blue"',
    )

    assert response.status_code == 302, errors(response.text)
    human.refresh_from_db()
    assert human.answer == {
        "item": "Printer paper",
        "quantity": 12,
        "unit_price": 4.5,
        "express": True,
        "colour": "blue",
    }
    page = client.get(f"/requests/{human.pk}/").text
    assert "&quot;quantity&quot;: 12" in page


def test_a_field_left_empty_is_left_out_of_the_data(client, ask, reviewer):
    human = ask("What should we order?", answer_schema=ORDER)
    client.force_login(reviewer)
    fields = {"field_0": "Pens", "field_1": "3", "field_2": "", "field_3": "", "field_4": ""}
    assert post_answer(client, human, "answer", using="fields", **fields).status_code == 302
    human.refresh_from_db()
    assert human.answer == {"item": "Pens", "quantity": 3}


@pytest.mark.parametrize(
    ("fields", "field", "error"),
    [
        ({"field_1": "0"}, "field_1", "0 is less than the minimum of 1"),
        ({"field_1": "lots"}, "field_1", "Enter a whole number."),
        ({"field_0": ""}, "field_0", "This field is required."),
        ({"field_4": '"green"'}, "field_4", "Select a valid choice."),
    ],
)
def test_a_field_the_schema_refuses_is_an_error_on_that_field(
    client, ask, reviewer, fields, field, error
):
    human = ask("What should we order?", answer_schema=ORDER)
    client.force_login(reviewer)
    before = stored()
    posted = {"field_0": "Pens", "field_1": "3", **fields}
    response = post_answer(client, human, "answer", using="fields", **posted)
    assert response.status_code == 400
    shown = errors(response.text)
    assert len(shown) == 1 and shown[0].startswith(error), shown
    tag = control(response.text, f"fields-{field}")
    assert 'aria-invalid="true"' in tag and "autofocus" in tag
    assert re.search(rf'aria-describedby="[^"]*fields-{field}_error"', tag)
    # What was typed comes back, to be corrected rather than typed again.
    assert f'value="{posted["field_1"]}"' in control(response.text, "fields-field_1")
    assert stored() == before


def test_data_may_be_answered_in_json_instead(client, ask, reviewer):
    human = ask("What should we order?", answer_schema=ORDER)
    client.force_login(reviewer)

    not_json = post_answer(client, human, "answer", using="json", value="{item: 5")
    assert not_json.status_code == 400
    assert errors(not_json.text)[0].startswith("Not valid JSON")
    assert '<details class="more" open>\n            <summary>Answer in JSON instead' in (
        not_json.text
    )
    invalid = post_answer(client, human, "answer", using="json", value='{"item": "Pens"}')
    assert errors(invalid.text) == ["data: &quot;quantity&quot; is a required property"]

    answer = '{"item": "Pens", "quantity": 2}'
    assert post_answer(client, human, "answer", using="json", value=answer).status_code == 302
    human.refresh_from_db()
    assert human.answer == {"item": "Pens", "quantity": 2}


def test_a_schema_fields_cannot_draw_is_answered_in_json(client, ask, reviewer):
    schema = {"properties": {"budget": {"type": "integer"}, "tags": {"type": "array"}}}
    human = ask("What budget?", answer_schema=schema)
    client.force_login(reviewer)
    page = client.get(f"/requests/{human.pk}/").text
    assert "Your answer (JSON)" in page and "Answer in JSON instead" not in page
    assert 'id="fields-' not in page

    invalid = post_answer(client, human, "answer", value='{"budget": "lots"}')
    assert invalid.status_code == 400
    assert errors(invalid.text) == [
        "data.budget: &quot;lots&quot; is not of type &quot;integer&quot;"
    ]
    assert "autofocus" in control(invalid.text, "json-value")
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
    assert '<label for="fields-field_0">Your answer</label>' in page
    assert control(page, "fields-field_0").startswith("<textarea")

    assert post_answer(client, human, "answer", field_0="Blue Heron").status_code == 302
    human.refresh_from_db()
    assert human.answer == "Blue Heron"


# --- answering: what does not fit ------------------------------------------------------------


def test_a_kind_the_request_does_not_take_is_a_form_error(client, ask, reviewer):
    human = ask()
    client.force_login(reviewer)
    before = stored()
    response = post_answer(client, human, "answer", using="text", value="yes")
    assert response.status_code == 400
    assert errors(response.text) == [
        "kind: this request is answered by approve or reject, not answer"
    ]
    assert stored() == before


def test_a_post_without_its_hidden_fields_says_what_is_missing(client, ask, reviewer):
    human = ask()
    client.force_login(reviewer)
    before = stored()
    response = client.post(f"/requests/{human.pk}/answer/", {"using": "sign_off"})
    assert response.status_code == 400
    assert errors(response.text) == [
        "kind: This field is required.",
        "version: This field is required.",
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
    assert errors(response.text) == [
        f"Request {human.pk} was already answered by reviewer; this answer was not recorded."
    ]
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


def test_a_schemas_titles_descriptions_and_values_are_escaped(client, ask, reviewer):
    schema = {
        "description": HOSTILE,
        "properties": {
            "a": {"type": "string", "title": HOSTILE, "description": HOSTILE, "default": HOSTILE},
            "b": {"enum": [HOSTILE, "plain"]},
        },
    }
    human = ask("Well?", answer_schema=schema)
    client.force_login(reviewer)
    page = client.get(f"/requests/{human.pk}/").text
    assert "<script>" not in page and "<img src=x" not in page
    assert page.count("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;") >= 5


def test_a_questions_answer_is_shown_escaped(client, ask, reviewer):
    human = ask("Anything to add?", kind="question")
    client.force_login(reviewer)
    post_answer(client, human, "answer", using="text", value=HOSTILE)
    page = client.get(f"/requests/{human.pk}/").text
    assert "<script>" not in page and "&lt;script&gt;alert" in page


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


def test_the_queue_says_what_answer_each_request_asks_for(client, ask, reviewer):
    asked = {
        "In words": ask("Name it?", kind="question"),
        "Sign off": ask("Sign off the plan?"),
        "Choose one of 2": ask("Which?", choices=["a", "b"]),
        "Data": ask("How many?", answer_schema={"type": "integer"}),
    }
    client.force_login(reviewer)
    queue = client.get("/approvals/").text
    for answer, human in asked.items():
        assert re.search(
            rf'<tr id="request-{human.pk}".*?data-label="Answer">{answer}<', queue, re.S
        )


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


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"kind": "question"},
        {"choices": ["a", "b"]},
        {"answer_schema": {}},
        {"answer_schema": ORDER},
    ],
)
def test_the_request_page_takes_a_fixed_number_of_queries(
    client, ask, reviewer, fields, django_assert_num_queries
):
    human = ask(**fields)
    client.force_login(reviewer)
    client.get(f"/requests/{human.pk}/")  # The first visit stores the time zone.
    # Session, user, the request with its run, project, owner and tokens, the decide
    # permission, the checkpoints, the navigation's three, and the next and the previous
    # request waiting for the reviewer, two each (tests/test_request_flow.py).
    with django_assert_num_queries(12):
        assert client.get(f"/requests/{human.pk}/").status_code == 200


def test_an_answered_request_page_takes_as_many(client, ask, reviewer, django_assert_num_queries):
    human = ask()
    client.force_login(reviewer)
    post_answer(client, human, "approve")
    client.get(f"/requests/{human.pk}/")
    with django_assert_num_queries(12):
        assert client.get(f"/requests/{human.pk}/").status_code == 200
