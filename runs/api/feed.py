"""The feed of a token's events: every checkpoint of the runs its sessions hold
(decisions, status changes, cancellations, answers), numbered 1, 2, 3… per token in
the order they are seen committed (``runs.models.FeedEvent``). One long-poll serves an
agent resuming many paused threads: "what changed for me since cursor N"."""

from asgiref.sync import sync_to_async
from django.db import transaction
from ninja import Router

from runs.api import schemas as s
from runs.api.endpoints import PROBLEMS, check_page, token
from runs.api.waits import long_poll
from runs.api.watcher import feed_marks
from runs.models import AgentToken, FeedEvent

router = Router()
# Entries numbered by one reader at a time; a larger backlog is numbered by the next.
NUMBERED_AT_ONCE = 1000


@router.get("/events", response={200: s.EventsOut, 429: s.Problem, **PROBLEMS}, tags=["runs"])
async def events(request, after: int = 0, wait: int = 0, limit: int = 100):
    """The token's events after seq ``after``, in order, ``limit`` at a time, and the
    cursor to send next (the last seq returned, or ``after`` if none). The cursor is
    durable: an event committed later always has a higher seq, so ``after=N`` never
    skips one. With ``wait=N`` (seconds, bounded) the answer comes as soon as an event
    exists, or after N seconds with none; beyond the concurrent waits allowed, 429."""
    check_page(after, limit)
    me = token(request)
    page: list[FeedEvent] = []

    def arrived() -> bool:
        number_feed(me.pk)
        page[:] = FeedEvent.objects.filter(token=me, seq__gt=after).select_related(
            "checkpoint__run", "checkpoint__operation", "checkpoint__request"
        )[:limit]
        return bool(page)

    # Read before ``arrived``: an entry committed after it moves the mark.
    seen = await sync_to_async(feed_marks)({me.pk}) if wait else {}
    refusal = await long_poll(me.pk, wait, arrived, ("feed", me.pk, seen.get(me.pk)))
    if refusal:
        return refusal
    return await sync_to_async(_answer)(page, after)


def number_feed(token_pk: int) -> None:
    """Number the token's entries committed since the last numbering, in the order
    they were written, after the numbers already given. The counter's row is locked
    only for this short transaction, and the entries are read after it is taken: two
    readers numbering at once number each entry once."""
    waiting = FeedEvent.objects.filter(token_id=token_pk, seq__isnull=True)
    if not waiting.exists():
        return
    with transaction.atomic():
        counter = AgentToken.objects.select_for_update().filter(pk=token_pk)
        last = counter.values_list("feed_seq", flat=True).get()
        entries = list(waiting.order_by("pk").only("pk")[:NUMBERED_AT_ONCE])
        for entry in entries:
            last += 1
            entry.seq = last
        FeedEvent.objects.bulk_update(entries, ["seq"])
        counter.update(feed_seq=last)


def _answer(page: list[FeedEvent], after: int) -> s.EventsOut:
    return s.EventsOut(
        events=[s.EventOut.of(event) for event in page],
        cursor=page[-1].seq if page else after,
    )
