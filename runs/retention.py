"""Retention for message payloads.

Messages older than the retention whose run has ended (completed, partial, failed,
cancelled) lose their content: the payload becomes ``{"redacted": true, "sha256": …}``
and ``redacted_at`` is set. Messages of open runs are never redacted, however old: the
agent may still need its history. What stays is the row (run, seq, kind, author, time)
and ``payload_sha256``, so whoever holds an original can prove it is the one that was
there.

No checkpoint holds a message payload, so the chain is untouched; the redaction itself
is recorded as a ``messages.redacted`` checkpoint on each affected run (actor
``policy:retention``) with the count, the seq range and ``redaction_digest`` of the
kept hashes, which puts those hashes under the chain.
"""

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Count, Max, Min, QuerySet
from django.utils import timezone

from runs import machines
from runs.actors import Actor
from runs.models import Message
from runs.models.runs import redacted_payload
from runs.transitions import lock_run, record_run_event

BATCH = 500
RETENTION = Actor.policy("retention")


@dataclass(frozen=True)
class Redaction:
    messages: int
    runs: int


def redaction_digest(rows: Iterable[tuple[int, str]]) -> str:
    """sha256 over one line ``"<seq> <payload_sha256>\\n"`` per message, in seq order."""
    digest = hashlib.sha256()
    for seq, sha256 in rows:
        digest.update(f"{seq} {sha256}\n".encode())
    return digest.hexdigest()


def due_messages(cutoff: datetime) -> QuerySet[Message]:
    return Message.objects.filter(
        redacted_at__isnull=True, created_at__lt=cutoff, run__status__in=machines.RUN.terminal
    )


def redact_messages(*, days: int, dry_run: bool = False) -> Redaction:
    """Redact the payloads due after ``days`` days, one run (one transaction) at a time."""
    cutoff = timezone.now() - timedelta(days=days)
    due = due_messages(cutoff)
    if dry_run:
        totals = due.aggregate(messages=Count("pk"), runs=Count("run", distinct=True))
        return Redaction(**totals)
    messages = runs = last_run = 0
    # Keyset over run ids: memory stays bounded however many runs are due.
    while (
        run_id := due.filter(run_id__gt=last_run)
        .order_by("run_id")
        .values_list("run_id", flat=True)
        .first()
    ) is not None:
        redacted = redact_run(run_id, cutoff=cutoff, days=days)
        messages, runs, last_run = messages + redacted, runs + bool(redacted), run_id
    return Redaction(messages, runs)


@transaction.atomic
def redact_run(run_id: int, *, cutoff: datetime, days: int) -> int:
    """Redact one run's due messages and append the checkpoint that records it. The
    run lock makes a concurrent redactor wait, then find nothing left to redact."""
    run = lock_run(run_id)
    due = due_messages(cutoff).filter(run=run)
    span = due.aggregate(count=Count("pk"), first_seq=Min("seq"), last_seq=Max("seq"))
    if not span["count"]:
        return 0
    now = timezone.now()
    while batch := list(due.order_by("seq").only("pk", "seq", "payload_sha256")[:BATCH]):
        for message in batch:
            message.payload = redacted_payload(message.payload_sha256)
            message.redacted_at = now
        # A queryset write, not save(): the marker is not a payload of the message's kind.
        Message.objects.bulk_update(batch, ["payload", "redacted_at"])
    kept = (
        run.messages.filter(redacted_at=now)
        .order_by("seq")
        .values_list("seq", "payload_sha256")
        .iterator(chunk_size=BATCH)
    )
    record_run_event(
        run=run,
        actor=RETENTION,
        event="messages.redacted",
        reason=f"message payloads older than {days} days redacted; their sha256 is kept",
        detail={
            "redacted_messages": {**span, "sha256": redaction_digest(kept)},
            "retention_days": days,
        },
    )
    return span["count"]
