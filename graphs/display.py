"""The "Graph state" section of a run's audit page: the LangGraph checkpoints of the
thread named by the run's external id, in the run's project, newest first, a page at a
time (``?graph_before=<checkpoint id>`` pages back to the first).

Two queries (checkpoints, then their pending writes) however long the thread; nothing
when the run has no external id. LangGraph is imported only to decode values, and only
when there is something to decode (graphs.decode).
"""

from dataclasses import dataclass, field

from graphs.models import GraphCheckpoint, GraphWrite

GRAPH_PAGE_CHECKPOINTS = 50
CHECKPOINT_ID_LENGTH = GraphCheckpoint._meta.get_field("checkpoint_id").max_length


@dataclass
class ShownWrite:
    task_id: str
    channel: str
    value: str | None


@dataclass
class ShownCheckpoint:
    checkpoint_id: str
    checkpoint_ns: str
    created_at: object
    size: int
    metadata: str
    values: str | None
    writes: list[ShownWrite] = field(default_factory=list)
    step: int | None = None  # LangGraph's super-step (-1: the input), from the metadata
    source: str = ""  # input, loop, update or fork


@dataclass
class GraphState:
    thread_id: str
    checkpoints: list[ShownCheckpoint]
    before: str  # the page's bound ("": the latest)
    older: str | None  # the next page's bound, if there are older checkpoints
    decodable: bool


def graph_state(run, before: str = "") -> GraphState | None:
    """The page of checkpoints older than checkpoint id ``before`` (the latest if "");
    None for a run that has none in Oversight (not a LangGraph thread, or one whose
    checkpoints its agent keeps elsewhere): its page has no Graph state section."""
    if not run.external_id:
        return None
    stored = GraphCheckpoint.objects.filter(project_id=run.project_id, thread_id=run.external_id)
    if before:
        stored = stored.filter(checkpoint_id__lt=before)
    rows = list(
        stored.order_by("-checkpoint_id", "checkpoint_ns").values_list(
            "checkpoint_id", "checkpoint_ns", "created_at", "type", "checkpoint", "metadata"
        )[: GRAPH_PAGE_CHECKPOINTS + 1]
    )
    more, rows = len(rows) > GRAPH_PAGE_CHECKPOINTS, rows[:GRAPH_PAGE_CHECKPOINTS]
    older = rows[-1][0] if more else None
    if not rows:
        return GraphState(run.external_id, [], before, None, True) if before else None
    from graphs.decode import as_text, decoder

    decode = decoder()
    writes: dict[tuple[str, str], list[ShownWrite]] = {}
    stored = GraphWrite.objects.filter(
        project_id=run.project_id,
        thread_id=run.external_id,
        checkpoint_id__in=[row[0] for row in rows],
    ).order_by("task_path", "task_id", "idx")
    for checkpoint_id, ns, task_id, channel, type_, value in stored.values_list(
        "checkpoint_id", "checkpoint_ns", "task_id", "channel", "type", "value"
    ):
        shown = _shown(decode, as_text, type_, value)
        writes.setdefault((checkpoint_id, ns), []).append(ShownWrite(task_id, channel, shown))
    checkpoints = []
    for checkpoint_id, ns, created_at, type_, blob, metadata in rows:
        decoded = decode(type_, blob) if decode else None
        values = as_text(decoded.get("channel_values", {})) if isinstance(decoded, dict) else None
        checkpoints.append(
            ShownCheckpoint(
                checkpoint_id,
                ns,
                created_at,
                len(blob),
                as_text(metadata),
                values,
                writes.get((checkpoint_id, ns), []),
                *_step_and_source(metadata),
            )
        )
    return GraphState(run.external_id, checkpoints, before, older, decode is not None)


def _shown(decode, as_text, type_: str, value: bytes) -> str | None:
    if decode is None:
        return None
    decoded = decode(type_, value)
    return None if decoded is None and type_ != "null" else as_text(decoded)


def _step_and_source(metadata) -> tuple[int | None, str]:
    """LangGraph's step and source, if the metadata (any JSON the agent stored) has them."""
    if not isinstance(metadata, dict):
        return None, ""
    step = metadata.get("step")
    return (step if type(step) is int else None), str(metadata.get("source", ""))[:20]
