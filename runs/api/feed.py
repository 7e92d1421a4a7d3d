"""The feed of a token's events: every checkpoint of the runs its sessions hold
(decisions, status changes, cancellations, answers), numbered 1, 2, 3… per token in
the order they committed (``runs.models.FeedEvent``). One long-poll serves an agent
resuming many paused threads: "what changed for me since cursor N"."""

from asgiref.sync import sync_to_async
from ninja import Router

from runs.api import schemas as s
from runs.api.endpoints import PROBLEMS, check_page, token
from runs.api.waits import long_poll
from runs.models import FeedEvent

router = Router()


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
        page[:] = FeedEvent.objects.filter(token=me, seq__gt=after).select_related(
            "checkpoint__run", "checkpoint__operation", "checkpoint__request"
        )[:limit]
        return bool(page)

    # Any event committed after the token was read numbers itself above its feed_seq.
    refusal = await long_poll(me.pk, wait, arrived, ("feed", me.pk, me.feed_seq))
    if refusal:
        return refusal
    return await sync_to_async(_answer)(page, after)


def _answer(page: list[FeedEvent], after: int) -> s.EventsOut:
    return s.EventsOut(
        events=[s.EventOut.of(event) for event in page],
        cursor=page[-1].seq if page else after,
    )
