"""A reviewer works through requests as through operations (#34 item 10): the page
links the next and the previous request waiting for them, keeps the answer in reach
(a bar at the bottom of the window, a jump to the answer on a phone, keys), and, once
answered, opens the next one with a link back to the one answered. A form posted twice
(the second post after the first answered it) is refused, saying who answered, and
changes nothing, whatever the kind."""

import re

import pytest

from runs.models import HumanRequest
from runs.queue import QUEUE_LIMIT
from runs.services import requests as service
from runs.services.runs import open_session, start_run
from tests.conftest import AGENT
from tests.helpers import stored

SCHEMA = {
    "type": "object",
    "properties": {"item": {"type": "string"}, "quantity": {"type": "integer"}},
    "required": ["item"],
}
KINDS = {
    "question": {"kind": "question"},
    "sign_off": {},
    "choice": {"choices": ["eu-west", "us-east"]},
    "data": {"answer_schema": SCHEMA},
}
# Each kind's way to accept, as its page posts it.
ACCEPTED = {
    "question": {"using": "text", "kind": "answer", "value": "Blue Heron"},
    "sign_off": {"using": "sign_off", "kind": "approve"},
    "choice": {"using": "choose", "kind": "choose", "choice": "us-east"},
    "data": {"using": "fields", "kind": "answer", "field_0": "Pens", "field_1": "3"},
}
DONE = {
    "question": "Answered; the agent reads your answer.",
    "sign_off": "Signed off; the agent reads your answer.",
    "choice": "Chosen; the agent reads your choice.",
    "data": "Answered; the agent reads your answer.",
}
REJECTED = {"using": "reject", "kind": "reject", "comment": "Not now"}


@pytest.fixture
def ask(run, agent_token):
    def _ask(kind: str = "sign_off", prompt: str = "May I ship the release?", on=None):
        asked = service.ask(
            run=on or run, prompt=prompt, actor=AGENT, token=agent_token, **KINDS[kind]
        )
        return asked[0]

    return _ask


@pytest.fixture
def as_reviewer(client, reviewer):
    client.force_login(reviewer)
    return client


def post(client, human: HumanRequest, fields: dict, version: int | None = None):
    """Post ``fields`` from the request's page as it was at ``version`` (now, if None)."""
    if version is None:
        human.refresh_from_db()
        version = human.version
    return client.post(f"/requests/{human.pk}/answer/", {"version": version, **fields})


def messages(page: str) -> list[str]:
    return re.findall(r'<li class="message-success">(.*?)</li>', page, re.S)


def bar(page: str) -> str | None:
    found = re.search(r'<div class="decision-bar".*?</div>', page, re.S)
    return found[0] if found else None


def link(page: str, element_id: str) -> str | None:
    found = re.search(rf'<a id="{element_id}" href="([^"]*)">', page)
    return found[1] if found else None


# --- moving on ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(KINDS))
def test_an_answer_opens_the_next_request_with_a_link_back(as_reviewer, ask, kind):
    first, second = ask(kind, "First?"), ask("sign_off", "Second?")

    response = post(as_reviewer, first, ACCEPTED[kind])

    assert response.status_code == 302
    assert response["Location"] == f"/requests/{second.pk}/"
    first.refresh_from_db()
    assert first.status == "answered"
    label = HumanRequest.Kind(kind).label.lower()
    assert messages(as_reviewer.get(response["Location"]).text) == [
        f'<a href="/requests/{first.pk}/">Request {first.pk}</a> ({label}): {DONE[kind]} '
        "This one waits for you next."
    ]


def test_a_rejection_opens_the_next_one_too(as_reviewer, ask):
    first, second = ask("question", "First?"), ask("question", "Second?")
    response = post(as_reviewer, first, REJECTED)
    assert response["Location"] == f"/requests/{second.pk}/"
    (said,) = messages(as_reviewer.get(response["Location"]).text)
    assert said.endswith(
        "(question): Rejected; the agent reads your reason. This one waits for you next."
    )


def test_with_nothing_else_waiting_for_them_the_reviewer_stays(as_reviewer, ask, reviewer, project):
    """What waits in a run of their own is not theirs to answer: they stay on the page
    of the one they answered, as before."""
    mine = open_session(project=project, owner=reviewer, agent="theirs", title="Mine")
    first = ask("sign_off", "First?")
    ask("sign_off", "In my own run?", on=start_run(session=mine, goal="Mine", actor=AGENT))

    response = post(as_reviewer, first, ACCEPTED["sign_off"])

    assert response["Location"] == f"/requests/{first.pk}/"
    assert messages(as_reviewer.get(response["Location"]).text) == [DONE["sign_off"]]


def test_the_page_links_the_next_and_the_previous_waiting(as_reviewer, ask):
    first, second, third = ask(prompt="First?"), ask(prompt="Second?"), ask(prompt="Third?")

    page = as_reviewer.get(f"/requests/{second.pk}/").text
    assert link(page, "previous-request") == f"/requests/{first.pk}/"
    assert link(page, "next-request") == f"/requests/{third.pk}/"
    assert f"Next waiting for you: request {third.pk} (Third?)</a>" in page

    # Round past the end; with one other waiting, it is the next one only.
    page = as_reviewer.get(f"/requests/{third.pk}/").text
    assert link(page, "next-request") == f"/requests/{first.pk}/"
    post(as_reviewer, second, ACCEPTED["sign_off"])
    page = as_reviewer.get(f"/requests/{third.pk}/").text
    assert link(page, "next-request") == f"/requests/{first.pk}/"
    assert link(page, "previous-request") is None


def test_the_next_link_shows_the_prompt_escaped(as_reviewer, ask):
    first = ask(prompt="First?")
    ask(prompt='<script>alert("x")</script>')
    page = as_reviewer.get(f"/requests/{first.pk}/").text
    assert "(&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;)</a>" in page
    assert "<script>alert" not in page


# --- the answer in reach -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "main", "keys"),
    [
        (
            "sign_off",
            '<button type="submit" form="sign_off-form" class="primary">Sign off</button>',
            "<kbd>a</kbd> sign off · <kbd>r</kbd> reject",
        ),
        (
            "question",
            '<a class="button primary" href="#text-value">Answer</a>',
            "<kbd>a</kbd> answer · <kbd>r</kbd> reject",
        ),
        (
            "choice",
            '<a class="button primary" href="#choice-1">Choose…</a>',
            "<kbd>1</kbd> to <kbd>2</kbd> choose · <kbd>r</kbd> reject",
        ),
        (
            "data",
            '<a class="button primary" href="#fields-field_0">Answer</a>',
            "<kbd>a</kbd> answer · <kbd>r</kbd> reject",
        ),
    ],
)
def test_the_answer_stays_in_reach(as_reviewer, ask, kind, main, keys):
    human = ask(kind)
    page = as_reviewer.get(f"/requests/{human.pk}/").text

    assert f'aria-label="Answer request {human.pk}"' in bar(page)
    assert main in bar(page)
    main_target = re.search(r'href="#([^"]+)"', main)
    if main_target:
        assert f'id="{main_target[1]}"' in page
    assert '<a class="button" href="#reject-comment">Reject</a>' in bar(page)
    assert 'id="reject-comment"' in page
    assert '<a class="jump" href="#decision">Go to the answer</a>' in page
    assert '<section class="card decide" id="decision"' in page
    assert f"Keys: {keys} · <kbd>n</kbd> next" in page
    if kind == "sign_off":
        assert '<form method="post" action="/requests/' in page
        assert 'id="sign_off-form"' in page


def test_who_may_not_answer_now_gets_no_bar(client, ask, owner, auditor, reviewer):
    human = ask()
    for user in (owner, auditor):
        client.force_login(user)
        page = client.get(f"/requests/{human.pk}/").text
        assert bar(page) is None and "Go to the answer" not in page
    client.force_login(reviewer)
    post(client, human, ACCEPTED["sign_off"])
    page = client.get(f"/requests/{human.pk}/").text
    assert bar(page) is None and "Go to the answer" not in page


def test_the_keys_are_not_shown_to_who_turned_them_off(as_reviewer, ask):
    human = ask()
    page = as_reviewer.get(f"/requests/{human.pk}/").text
    assert "<kbd>a</kbd> sign off" in page
    assert as_reviewer.post("/account/", {"time_zone": "UTC"}).status_code == 302
    page = as_reviewer.get(f"/requests/{human.pk}/").text
    assert "<kbd>" not in page


# --- a form posted twice -------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_form_posted_twice_is_refused_the_second_time(as_reviewer, ask, kind):
    human = ask(kind)
    human.refresh_from_db()
    seen = human.version
    assert post(as_reviewer, human, ACCEPTED[kind], version=seen).status_code == 302
    before = stored()

    again = post(as_reviewer, human, ACCEPTED[kind], version=seen)

    assert again.status_code == 400
    assert f"Request {human.pk} was already answered by you; this answer was not recorded." in (
        again.text
    )
    assert "<title>Error: Request" in again.text
    assert "This request no longer awaits an answer." in again.text
    assert stored() == before


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_rejection_posted_twice_is_refused_the_second_time(as_reviewer, ask, kind):
    human = ask(kind)
    human.refresh_from_db()
    seen = human.version
    assert post(as_reviewer, human, REJECTED, version=seen).status_code == 302
    before = stored()

    again = post(as_reviewer, human, REJECTED, version=seen)

    assert again.status_code == 400
    assert f"Request {human.pk} was already rejected by you" in again.text
    assert stored() == before


def test_an_answer_after_another_reviewers_names_them(client, ask, reviewer, reviewer2):
    human = ask("data")
    human.refresh_from_db()
    seen = human.version
    client.force_login(reviewer2)
    post(client, human, ACCEPTED["data"], version=seen)
    client.force_login(reviewer)
    before = stored()

    again = post(client, human, {**ACCEPTED["data"], "field_1": "4"}, version=seen)

    assert again.status_code == 400
    assert f"Request {human.pk} was already answered by reviewer2;" in again.text
    assert stored() == before
    human.refresh_from_db()
    assert human.answer == {"item": "Pens", "quantity": 3}


# --- a fixed number of queries -------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "after", "queries"),
    [(0, 0, 12), (2, 2, 12), (QUEUE_LIMIT + 5, 0, 13), (0, QUEUE_LIMIT + 5, 13)],
)
def test_the_page_takes_a_fixed_number_of_queries(
    as_reviewer, ask, before, after, queries, django_assert_num_queries
):
    """However many wait before and after it: the request page's eight, and the next
    and the previous waiting, each found in two (the keys of those after it, then the
    first of them that is the reviewer's), or three where it goes round to the other
    end (the keys from there): the last one's next is the first, the first one's
    previous the last."""
    for n in range(before):
        ask(prompt=f"Before {n}?")
    human = ask(prompt="This one?")
    for n in range(after):
        ask(prompt=f"After {n}?")
    as_reviewer.get(f"/requests/{human.pk}/")  # The first visit stores the time zone.
    with django_assert_num_queries(queries):
        assert as_reviewer.get(f"/requests/{human.pk}/").status_code == 200
