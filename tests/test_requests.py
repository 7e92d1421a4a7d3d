"""Human requests (#12): an agent asks people a question, a sign-off, a choice or data
(#34: four kinds) that Oversight does not execute; the run waits until it is answered,
rejected, expired, withdrawn or its run ends. The services, on the database."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import IntegrityError, transaction

from runs.actors import Actor
from runs.errors import (
    DecisionRefused,
    ExternalIdConflict,
    IllegalTransition,
    InvalidInput,
    NotPermitted,
    OperationExpired,
    RunClosed,
    RunNotAccepting,
    StaleVersion,
)
from runs.models import ApprovalPolicy, Checkpoint, HumanRequest, Run
from runs.services import requests as service
from runs.services.alerts import raise_alert, resolve_alert
from runs.services.runs import (
    OWNER_REPLY,
    append_message,
    cancel_run,
    finish_run,
    open_session,
    request_input,
    start_run,
)
from runs.transitions import transition_operation, transition_run
from tests.conftest import AGENT, issued
from tests.helpers import decide_on, refused, steps_since

SCHEMA = {
    "type": "object",
    "properties": {"budget": {"type": "integer", "minimum": 0}},
    "required": ["budget"],
}


@pytest.fixture
def ask(run, agent_token):
    """Ask on ``run`` (or ``target``) as the test agent's token."""

    def _ask(prompt: str = "May I ship the release?", *, target=None, **fields) -> HumanRequest:
        request, _new = service.ask(
            run=target or run, prompt=prompt, actor=AGENT, token=agent_token, **fields
        )
        return request

    return _ask


def answer(request: HumanRequest, reviewer, kind: str, **fields) -> HumanRequest:
    """Answer as a reviewer would: on the version the request has right now."""
    request.refresh_from_db()
    fields.setdefault("version", request.version)
    return service.answer(request=request, reviewer=reviewer, kind=kind, **fields)


def run_state(run: Run) -> tuple[str, str, str]:
    run.refresh_from_db()
    return run.status, run.reason, run.unblock


# --- asking ---------------------------------------------------------------------------------


def test_asking_makes_the_run_wait_for_the_answer(run, ask, agent_token, settings):
    version = run.version
    request = ask(context="The *changelog* is attached.")

    assert run_state(run) == ("waiting", "needs_input", f"an answer to request {request.pk}")
    assert (request.status, request.version, request.asked_by_token) == ("open", 1, agent_token)
    assert steps_since(run, version) == [
        ("request.created", "", "open"),
        ("run.status", "running", "waiting"),
    ]
    created = Checkpoint.objects.get(run=run, event="request.created")
    assert created.request == request
    assert created.state["request"]["prompt"] == "May I ship the release?"
    # Without expires_in: the decision timeout proposals get.
    assert request.expires_at - created.created_at == pytest.approx(
        settings.OVERSIGHT_DECISION_TIMEOUT, abs=timedelta(seconds=5)
    )


def test_the_projects_default_rule_sets_the_deadline_unless_the_agent_does(run, ask, project):
    ApprovalPolicy.objects.create(project=project, decision_timeout=timedelta(minutes=10))
    by_policy = ask("First?")
    by_agent = ask("Second?", expires_in=120)
    assert by_policy.expires_at - by_policy.created_at == pytest.approx(
        timedelta(minutes=10), abs=timedelta(seconds=5)
    )
    assert by_agent.expires_at - by_agent.created_at == pytest.approx(
        timedelta(minutes=2), abs=timedelta(seconds=5)
    )


def test_a_second_request_is_named_in_the_wait_too(run, ask):
    first, second = ask("First?"), ask("Second?")
    assert run_state(run)[2] == f"answers to requests {first.pk}, {second.pk}"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"prompt": "  "}, "prompt"),
        ({"prompt": "x" * 4001}, "prompt"),
        ({"context": "x" * 20_001}, "context"),
        ({"answer_schema": {"type": 5}}, "answer_schema"),
        ({"answer_schema": {"pattern": "("}}, "answer_schema"),
        ({"answer_schema": {"$ref": "#/$defs/missing"}}, "answer_schema"),
        ({"answer_schema": ["not", "an", "object"]}, "answer_schema"),
        ({"choices": []}, "choices"),
        ({"choices": ["Yes", "Yes"]}, "choices"),
        ({"choices": ["Yes", ""]}, "choices"),
        ({"choices": [str(n) for n in range(21)]}, "choices"),
        ({"choices": ["a"], "answer_schema": {"type": "string"}}, "choices"),
        ({"expires_in": 59}, "expires_in"),
        ({"expires_in": 30 * 24 * 3600 + 1}, "expires_in"),
        ({"external_id": "x" * 201}, "external_id"),
    ],
)
def test_a_malformed_request_is_refused_naming_the_field(run, ask, fields, field):
    with refused(InvalidInput):
        ask(**{"prompt": "Well?", **fields})
    with pytest.raises(InvalidInput, match=f"^{field}:"):
        ask(**{"prompt": "Well?", **fields})


def test_a_schema_pointing_outside_itself_is_refused_and_never_fetched(run, ask):
    with pytest.raises(InvalidInput, match="answer_schema: not a valid JSON Schema"):
        ask(answer_schema={"$ref": "http://127.0.0.1:9/schema.json"})


def test_a_closed_run_takes_no_request(run, ask):
    cancel_run(run=run, actor=AGENT, reason="Stop")
    with refused(RunClosed):
        ask()


def test_a_run_halted_for_reconciliation_takes_no_request(run, ask):
    transition_run(run=run, to="waiting", actor=AGENT, reason="reconciliation", unblock="an admin")
    with refused(RunNotAccepting):
        ask()


def test_proposals_wait_while_the_run_needs_input(run, ask, propose):
    ask()
    with refused(RunNotAccepting):
        propose("call-1")


# --- the four kinds ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "kind"),
    [
        ({}, "sign_off"),
        ({"choices": ["a", "b"]}, "choice"),
        ({"answer_schema": SCHEMA}, "data"),
        ({"kind": "question"}, "question"),
        ({"kind": "sign_off"}, "sign_off"),
        ({"kind": "choice", "choices": ["a", "b"]}, "choice"),
        ({"kind": "data", "answer_schema": SCHEMA}, "data"),
    ],
)
def test_a_request_is_of_the_kind_asked_or_else_what_its_fields_made_it(ask, fields, kind):
    """Without a kind, a request means what it meant before kinds: choices a choice, a
    schema data, neither a sign-off."""
    request = ask(**fields)
    assert request.kind == kind
    created = Checkpoint.objects.get(request=request, event="request.created")
    assert created.state["request"]["kind"] == kind


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"kind": "choice"}, "choices: a choice needs its choices"),
        ({"kind": "data"}, "answer_schema: data needs the JSON Schema"),
        ({"kind": "question", "choices": ["a"]}, "choices: only a choice has choices, not a q"),
        ({"kind": "sign_off", "choices": ["a"]}, "choices: only a choice has choices, not a s"),
        ({"kind": "data", "answer_schema": SCHEMA, "choices": ["a"]}, "choices: only a choice"),
        ({"kind": "question", "answer_schema": SCHEMA}, "answer_schema: only data has an answ"),
        ({"kind": "sign_off", "answer_schema": SCHEMA}, "answer_schema: only data has an answ"),
        ({"kind": "choice", "choices": ["a"], "answer_schema": SCHEMA}, "answer_schema: only"),
        ({"kind": "poll"}, "kind: one of question, sign_off, choice, data, not 'poll'"),
    ],
)
def test_a_kind_its_fields_contradict_is_refused_not_guessed(ask, fields, reason):
    with refused(InvalidInput):
        ask(**fields)
    with pytest.raises(InvalidInput, match=f"^{reason}"):
        ask(**fields)


def test_a_data_request_keeps_the_agents_order_of_its_properties(ask):
    schema = {"type": "object", "properties": {"unit_price": {}, "item": {}, "colour": {}}}
    request = ask(answer_schema=schema)
    request.refresh_from_db()
    assert request.property_order == ["unit_price", "item", "colour"]
    assert ask("Sign off?").property_order is None


def test_a_question_is_answered_in_words_which_the_agent_reads_as_data(run, ask, reviewer):
    request = ask("What should the release be called?", kind="question")
    assert (request.choices, request.answer_schema) == (None, None)

    answered = answer(request, reviewer, "answer", data="Blue Heron")

    assert (answered.status, answered.answer_kind, answered.answer, answered.comment) == (
        "answered",
        "answer",
        "Blue Heron",
        "",
    )
    assert service.describe_answer(answered) | {"at": None} == {
        "request_kind": "question",
        "kind": "answer",
        "by": "reviewer",
        "at": None,
        "comment": "",
        "data": "Blue Heron",
    }
    detail = Checkpoint.objects.get(request=request, event="request.status").state
    assert (detail["answer"]["request_kind"], detail["answer"]["data"]) == (
        "question",
        "Blue Heron",
    )
    assert run_state(run)[0] == "queued"


@pytest.mark.parametrize("data", [None, "", "  \n", 42, {"text": "Blue"}, "x" * 20_001])
def test_a_questions_answer_is_text(ask, reviewer, data):
    request = ask("What should the release be called?", kind="question")
    with refused(InvalidInput):
        answer(request, reviewer, "answer", data=data)
    with pytest.raises(InvalidInput, match=r"^data: an answer in words, 1 to 20000 characters"):
        answer(request, reviewer, "answer", data=data)


@pytest.mark.parametrize(
    "change",
    [
        {"kind": "choice"},
        {"kind": "data"},
        {"kind": "question", "choices": ["a"]},
        {"kind": "sign_off", "answer_schema": {}},
        {"kind": "nonsense"},
    ],
)
def test_the_database_keeps_a_kind_and_its_fields_together(ask, change):
    request = ask()
    with pytest.raises(IntegrityError), transaction.atomic():
        HumanRequest.objects.filter(pk=request.pk).update(**change)


def test_the_database_keeps_an_answer_to_its_kind(ask, reviewer):
    request = answer(ask("Name it?", kind="question"), reviewer, "answer", data="Heron")
    with pytest.raises(IntegrityError), transaction.atomic():
        HumanRequest.objects.filter(pk=request.pk).update(answer_kind="approve")


# --- naming it: external_id -----------------------------------------------------------------


def test_asking_again_by_the_same_external_id_returns_the_request(run, agent_token):
    first, new = service.ask(
        run=run, prompt="Ship?", actor=AGENT, token=agent_token, external_id="interrupt-1"
    )
    version = run_state(run)
    again, new_again = service.ask(
        run=run, prompt="Ship?", actor=AGENT, token=agent_token, external_id="interrupt-1"
    )
    assert (new, new_again, again) == (True, False, first)
    assert HumanRequest.objects.count() == 1
    assert run_state(run) == version


def test_the_same_external_id_asking_another_kind_is_a_conflict(run, ask):
    ask("Ship?", external_id="interrupt-1")
    with refused(ExternalIdConflict):
        ask("Ship?", kind="question", external_id="interrupt-1")


def test_the_same_external_id_for_another_question_is_a_conflict(run, ask):
    ask("Ship?", external_id="interrupt-1")
    with refused(ExternalIdConflict):
        ask("Ship on Friday?", external_id="interrupt-1")
    with pytest.raises(ExternalIdConflict, match="use a new external_id"):
        ask(
            "Ship?",
            external_id="interrupt-1",
            target=start_run(session=run.session, goal="Another", actor=AGENT),
        )


def test_another_tokens_external_id_names_a_request_of_its_own(project, owner, ask, admin_user):
    mine = ask("Ship the secret release?", external_id="interrupt-1")
    other = issued(project, "other-agent", admin_user)
    session = open_session(project=project, owner=admin_user, agent="other", token=other)
    their_run = start_run(session=session, goal="Theirs", actor=AGENT)
    theirs, new = service.ask(
        run=their_run, prompt="Hello?", actor=AGENT, token=other, external_id="interrupt-1"
    )
    assert new
    assert theirs.pk != mine.pk
    assert (theirs.prompt, theirs.run_id) == ("Hello?", their_run.pk)
    assert HumanRequest.objects.count() == 2


# --- answering ------------------------------------------------------------------------------


def test_a_sign_off_is_approved_and_the_run_goes_back_to_the_queue(run, ask, reviewer):
    request = ask()
    run.refresh_from_db()
    version = run.version

    answered = answer(request, reviewer, "approve", comment="Go ahead")

    assert (answered.status, answered.answer_kind, answered.answer) == ("answered", "approve", None)
    assert (answered.answered_by, answered.comment) == (reviewer, "Go ahead")
    assert answered.answered_at is not None
    assert run_state(run) == ("queued", "", "")
    assert steps_since(run, version) == [
        ("request.status", "open", "answered"),
        ("run.status", "waiting", "queued"),
    ]
    checkpoint = Checkpoint.objects.get(run=run, event="request.status")
    assert (checkpoint.actor_kind, checkpoint.actor_user, checkpoint.request) == (
        "user",
        reviewer,
        request,
    )
    assert checkpoint.state["answer"]["by"] == "reviewer"


def test_a_rejection_needs_a_reason_and_records_it(run, ask, reviewer):
    request = ask()
    with refused(InvalidInput):
        answer(request, reviewer, "reject", comment="  ")

    rejected = answer(request, reviewer, "reject", comment="Not before the audit")

    assert (rejected.status, rejected.answer_kind, rejected.comment) == (
        "rejected",
        "reject",
        "Not before the audit",
    )
    assert run_state(run)[0] == "queued"


def test_an_answer_must_be_valid_against_the_schema(run, ask, reviewer):
    request = ask("What budget?", answer_schema=SCHEMA)
    with refused(InvalidInput):
        answer(request, reviewer, "answer", data={"budget": -5})
    with pytest.raises(InvalidInput, match=r"^data\.budget: -5 is less than the minimum of 0"):
        answer(request, reviewer, "answer", data={"budget": -5})
    with pytest.raises(InvalidInput, match="is a required property"):
        answer(request, reviewer, "answer", data={})

    answered = answer(request, reviewer, "answer", data={"budget": 1200})

    assert (answered.status, answered.answer_kind, answered.answer) == (
        "answered",
        "answer",
        {"budget": 1200},
    )


def test_a_choice_must_be_one_of_the_requests(run, ask, reviewer):
    request = ask("Which region?", choices=["eu-west", "us-east"])
    with refused(InvalidInput):
        answer(request, reviewer, "choose", data="ap-south")

    chosen = answer(request, reviewer, "choose", data="us-east")

    assert (chosen.status, chosen.answer_kind, chosen.answer) == ("answered", "choose", "us-east")


@pytest.mark.parametrize(
    ("fields", "kind"),
    [
        ({}, "answer"),
        ({}, "choose"),
        ({"kind": "question"}, "approve"),
        ({"kind": "question"}, "choose"),
        ({"choices": ["a", "b"]}, "approve"),
        ({"choices": ["a", "b"]}, "answer"),
        ({"answer_schema": SCHEMA}, "approve"),
        ({"answer_schema": SCHEMA}, "choose"),
        ({}, "edit"),
    ],
)
def test_each_request_takes_only_its_own_kind_of_answer(run, ask, reviewer, fields, kind):
    request = ask(**fields)
    with refused(InvalidInput):
        answer(request, reviewer, kind, data="a")


def test_the_runs_owner_may_not_answer(run, ask, owner):
    request = ask()
    with refused(DecisionRefused):
        answer(request, owner, "approve")
    with pytest.raises(DecisionRefused, match="you own this run"):
        answer(request, owner, "approve")


def test_the_owner_of_the_asking_token_may_not_answer(project, owner, reviewer2):
    """Four eyes, as for operations: the person the agent acts for cannot sign off
    what it asks, even on a run someone else owns."""
    token = issued(project, "reviewer2-agent", reviewer2)
    session = open_session(project=project, owner=owner, agent="helper", token=token)
    run = start_run(session=session, goal="Tidy up", actor=AGENT)
    request, _ = service.ask(run=run, prompt="Delete the branch?", actor=AGENT, token=token)
    with refused(DecisionRefused):
        answer(request, reviewer2, "approve")
    with pytest.raises(DecisionRefused, match="the agent token that asked this"):
        answer(request, reviewer2, "approve")


def test_a_member_who_may_not_decide_may_not_answer(run, ask, auditor):
    request = ask()
    with refused(NotPermitted):
        answer(request, auditor, "approve")


def test_an_answer_on_a_stale_version_is_refused(run, ask, reviewer):
    request = ask()
    seen = request.version
    HumanRequest.objects.filter(pk=request.pk).update(version=seen + 1)
    with refused(StaleVersion):
        answer(request, reviewer, "approve", version=seen)


def test_an_answered_request_takes_no_second_answer(run, ask, reviewer, reviewer2):
    request = ask()
    answer(request, reviewer, "approve")
    with refused(DecisionRefused):
        answer(request, reviewer2, "reject", comment="Too late")


# --- the run's wait -------------------------------------------------------------------------


def test_the_run_waits_for_its_proposals_again_once_answered(run, ask, propose, reviewer):
    op = propose("call-1")
    assert run_state(run)[:2] == ("waiting", "approval")
    request = ask()
    assert run_state(run)[:2] == ("waiting", "needs_input")

    answer(request, reviewer, "approve")
    assert run_state(run) == (
        "waiting",
        "approval",
        "a reviewer's decision on every proposed operation",
    )
    decide_on(op, reviewer)
    assert run_state(run)[0] == "queued"


def test_a_decision_on_a_proposal_leaves_the_run_waiting_for_its_request(
    run, ask, propose, reviewer
):
    op = propose("call-1")
    request = ask()
    decide_on(op, reviewer)
    assert run_state(run) == ("waiting", "needs_input", f"an answer to request {request.pk}")


def test_the_wait_names_the_requests_still_open(run, ask, reviewer):
    first, second = ask("First?"), ask("Second?")
    answer(first, reviewer, "approve")
    assert run_state(run) == ("waiting", "needs_input", f"an answer to request {second.pk}")
    answer(second, reviewer, "reject", comment="No")
    assert run_state(run)[0] == "queued"


# --- expiry, withdrawal, the run's end ------------------------------------------------------


def test_an_unanswered_request_expires_by_the_sweep(run, ask, reviewer):
    due, later = ask("Due?", expires_in=60), ask("Later?", expires_in=3600)
    now = due.expires_at + timedelta(seconds=1)

    assert service.expire_due_requests(now=now) == 1

    due.refresh_from_db()
    assert (due.status, due.answer) == ("expired", None)
    expired = Checkpoint.objects.get(request=due, event="request.status")
    assert (expired.actor_kind, expired.actor_label) == ("policy", "decision timeout")
    assert run_state(run) == ("waiting", "needs_input", f"an answer to request {later.pk}")
    # An answer after the deadline is refused, and the request expires then.
    with pytest.raises(OperationExpired):
        answer(later, reviewer, "approve", now=later.expires_at)
    later.refresh_from_db()
    assert (later.status, later.answered_by) == ("expired", None)
    assert run_state(run)[0] == "queued"


def test_an_expired_request_lets_the_run_go_on(run, ask):
    request = ask(expires_in=60)
    assert service.expire_if_due(request, request.expires_at) is True
    assert run_state(run)[0] == "queued"


def test_the_expire_command_expires_requests_too(run, ask):
    request = ask(expires_in=60)
    HumanRequest.objects.filter(pk=request.pk).update(
        expires_at=request.created_at - timedelta(seconds=1)
    )
    out = StringIO()
    call_command("expire_operations", stdout=out)
    assert "1 request(s) expired" in out.getvalue()
    request.refresh_from_db()
    assert request.status == "expired"


def test_the_agent_withdraws_its_request(run, ask):
    request = ask()
    withdrawn = service.withdraw(request=request, actor=AGENT, reason="Found it myself")
    assert withdrawn.status == "cancelled"
    assert Checkpoint.objects.get(request=request, event="request.status").reason == (
        "Found it myself"
    )
    assert run_state(run)[0] == "queued"
    # Withdrawing again answers the request as it is, and writes nothing.
    before = Checkpoint.objects.count()
    assert service.withdraw(request=request, actor=AGENT).status == "cancelled"
    assert Checkpoint.objects.count() == before


def test_an_answered_request_cannot_be_withdrawn(run, ask, reviewer):
    request = ask()
    answer(request, reviewer, "approve")
    with refused(IllegalTransition):
        service.withdraw(request=request, actor=AGENT)


def test_cancelling_the_run_cancels_its_open_requests(run, ask, reviewer, admin_user):
    request = ask()
    cancel_run(run=run, actor=Actor.of_user(admin_user), reason="Wrong goal")
    request.refresh_from_db()
    assert request.status == "cancelled"
    assert Checkpoint.objects.get(request=request, event="request.status").reason == "Wrong goal"
    with refused(RunClosed):
        answer(request, reviewer, "approve")


def test_finishing_the_run_cancels_its_open_requests(run, ask):
    request = ask()
    finish_run(run=run, status="completed", actor=AGENT)
    request.refresh_from_db()
    assert request.status == "cancelled"
    assert run_state(run)[0] == "completed"


def test_resolving_an_alert_leaves_the_run_waiting_for_its_open_request(
    run, ask, propose, reviewer, admin_user
):
    """The run was halted for reconciliation while a request was open: once the alert is
    resolved, the run waits for that answer again (it went to the queue before, and the
    answer then left it there)."""
    pushed = propose(
        "push-1", action="git.push", arguments={"remote": "o", "branch": "m"}, rollback_kind="none"
    )
    decide_on(pushed, reviewer)
    human = ask(choices=["a", "b"])
    transition_operation(operation=pushed, to="in_flight", actor=AGENT)
    transition_operation(operation=pushed, to="verify_failed", actor=AGENT)
    alert = raise_alert(operation=pushed, actor=AGENT, summary="push unverified", state_left={})
    run.refresh_from_db()
    assert run.reason == Run.Reason.RECONCILIATION

    resolve_alert(alert=alert, user=admin_user, note="checked the remote by hand")

    run.refresh_from_db()
    assert (run.status, run.reason, run.unblock) == (
        "waiting",
        "needs_input",
        f"an answer to request {human.pk}",
    )


def test_a_wait_for_the_owners_reply_is_left_to_the_owner(run, ask, propose, reviewer, owner):
    """``request_input`` waits for the session owner's message, not for reviewers: an
    answer or a decision elsewhere does not end it, and the owner's message does not
    end a wait for a request's answer."""
    answer(ask(), reviewer, "approve")
    decided = propose("later")
    request_input(run=run, question="Which account?", actor=AGENT)

    decide_on(decided, reviewer)

    assert run_state(run) == ("waiting", "needs_input", OWNER_REPLY)
    append_message(run=run, kind="user", payload={"text": "C"}, actor=Actor.of_user(owner))
    assert run_state(run)[0] == "queued"


def test_the_owners_message_does_not_end_a_wait_for_an_answer(run, ask, owner):
    human = ask()

    append_message(run=run, kind="user", payload={"text": "go"}, actor=Actor.of_user(owner))

    assert run_state(run) == ("waiting", "needs_input", f"an answer to request {human.pk}")
