"""Retention for message payloads: the redact_messages command, what it keeps, how it
is recorded, and the pages and API that show a redacted message."""

import importlib
from datetime import timedelta
from io import StringIO

import pytest
from django.apps import apps
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction
from django.utils import timezone

from runs.canonical import json_hash
from runs.chain import verify_run_chain
from runs.models import Checkpoint, Message, Run
from runs.payloads import MessageKind
from runs.retention import redaction_digest
from runs.services.runs import append_message, finish_run, start_run
from tests.conftest import AGENT
from tests.helpers import stored

pytest_plugins = ["tests.api_helpers"]

SECRET = "card 4242 4242 4242 4242"


def say(run: Run, text: str, days_ago: int = 0) -> Message:
    message = append_message(run=run, kind=MessageKind.AGENT, payload={"text": text}, actor=AGENT)
    created = timezone.now() - timedelta(days=days_ago)
    Message.objects.filter(pk=message.pk).update(created_at=created)
    return message


def redact(*args: str) -> str:
    out = StringIO()
    call_command("redact_messages", *args, stdout=out)
    return out.getvalue().strip()


@pytest.fixture
def ended(run) -> Run:
    """A completed run: two messages older than a year, one from today."""
    say(run, SECRET, days_ago=400)
    say(run, "Paid", days_ago=380)
    say(run, "Done")
    return finish_run(run=run, status=Run.Status.COMPLETED, actor=AGENT)


@pytest.fixture
def open_run(session) -> Run:
    run = start_run(session=session, goal="Still at it", actor=AGENT)
    say(run, "An old step of a live run", days_ago=400)
    return run


def payloads(run: Run) -> dict[int, dict]:
    return dict(run.messages.values_list("seq", "payload"))


def test_saving_a_message_stores_the_hash_of_its_payload(run):
    message = say(run, "hello")
    assert message.payload_sha256 == json_hash({"text": "hello"})


def test_old_messages_of_ended_runs_are_redacted_keeping_their_hash(ended, open_run):
    assert redact() == "redacted 2 message payload(s) in 1 run(s) older than 365 days"

    old = list(ended.messages.filter(seq__lte=2))
    assert [m.payload_sha256 for m in old] == [
        json_hash({"text": SECRET}),
        json_hash({"text": "Paid"}),
    ]
    assert [m.payload for m in old] == [{"redacted": True, "sha256": m.payload_sha256} for m in old]
    assert all(m.redacted_at for m in old)
    assert payloads(ended)[3] == {"text": "Done"}
    assert payloads(open_run) == {1: {"text": "An old step of a live run"}}
    assert not Message.objects.filter(redacted_at__isnull=False, run=open_run).exists()


def test_redaction_is_a_checkpoint_and_the_chain_still_verifies(ended):
    version = ended.version
    redact()

    ended.refresh_from_db()
    assert ended.version == version + 1
    assert verify_run_chain(ended) is None
    checkpoint = Checkpoint.objects.get(run=ended, seq=ended.version)
    assert (checkpoint.event, checkpoint.actor_kind, checkpoint.actor_label) == (
        "messages.redacted",
        "policy",
        "retention",
    )
    assert checkpoint.from_status == checkpoint.to_status == Run.Status.COMPLETED
    kept = ended.messages.filter(redacted_at__isnull=False).values_list("seq", "payload_sha256")
    assert checkpoint.state["retention_days"] == 365
    assert checkpoint.state["redacted_messages"] == {
        "count": 2,
        "first_seq": 1,
        "last_seq": 2,
        "sha256": redaction_digest(kept),
    }


def test_a_second_pass_redacts_nothing_and_writes_no_checkpoint(ended):
    redact()
    before = stored()

    assert redact() == "redacted 0 message payload(s) in 0 run(s) older than 365 days"
    assert stored() == before


def test_dry_run_counts_and_changes_nothing(ended, open_run):
    before = stored(), payloads(ended)

    assert redact("--dry-run").startswith("would redact 2 message payload(s) in 1 run(s)")
    assert (stored(), payloads(ended)) == before


@pytest.mark.parametrize(
    ("args", "expected"),
    [((), 0), (("--older-than", "390"), 1), (("--older-than", "10"), 2)],
    ids=["setting", "option-longer", "option-shorter"],
)
def test_the_setting_is_the_default_and_the_option_overrides_it(settings, ended, args, expected):
    settings.OVERSIGHT_MESSAGE_RETENTION_DAYS = 500

    redact(*args)

    assert ended.messages.filter(redacted_at__isnull=False).count() == expected


def test_older_than_must_be_at_least_a_day(db):
    with pytest.raises(CommandError, match="at least 1 day"):
        redact("--older-than", "0")


def test_a_redacted_message_cannot_be_saved_again(ended):
    redact()
    message = ended.messages.get(seq=1)
    message.payload = {"text": SECRET}

    with pytest.raises(ValidationError, match="is redacted"):
        message.save()


def test_the_database_refuses_a_redaction_without_the_marker(run):
    message = say(run, "hello")
    with pytest.raises(IntegrityError), transaction.atomic():
        Message.objects.filter(pk=message.pk).update(redacted_at=timezone.now())


def test_migration_backfills_the_payload_hash(run):
    message = say(run, "hello")
    Message.objects.filter(pk=message.pk).update(payload_sha256="0" * 64)
    migration = importlib.import_module("runs.migrations.0005_message_retention")

    migration.backfill_payload_sha256(apps, None)

    message.refresh_from_db()
    assert message.payload_sha256 == json_hash({"text": "hello"})


def test_run_and_operation_pages_show_the_redaction(client, reviewer, run, propose):
    say(run, SECRET, days_ago=400)
    op = propose("call-1")
    finish_run(run=run, status=Run.Status.PARTIAL, actor=AGENT, outcome="gave up")
    redact()
    client.force_login(reviewer)
    today = timezone.now().strftime("%Y-%m-%d")

    for url in (f"/runs/{run.pk}/", f"/operations/{op.pk}/"):
        page = client.get(url)
        assert page.status_code == 200
        assert f"redacted on {today}" in page.text
        assert SECRET not in page.text


def test_api_shows_the_redaction_checkpoint(api, ended):
    redact()

    assert api.get(f"/runs/{ended.pk}").status_code == 200
    rows = api.get(f"/runs/{ended.pk}/checkpoints").json()
    assert rows[-1]["event"] == "messages.redacted"
    assert rows[-1]["actor"] == "retention"
    assert rows[-1]["state"]["redacted_messages"]["count"] == 2
