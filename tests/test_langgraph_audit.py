"""The run's audit page shows the LangGraph checkpoints of the thread named by the run's
external id ("Graph state"): read-only, values decoded and escaped, a fixed number of
queries however long the thread."""

import html
import re

import ormsgpack
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph

from graphs.models import GraphCheckpoint
from graphs.saver import OversightSaver
from runs.middleware import NUL_REFUSED
from runs.models import Run

# The saver writes on a connection of its own: the tests' data must be committed.
pytestmark = pytest.mark.django_db(transaction=True)
XSS = "<script>alert(1)</script>"
NOT_AN_ID = "graph_before: not a LangGraph checkpoint id"


def reply(state: MessagesState) -> MessagesState:
    return {"messages": [AIMessage(f"Paid. {XSS}")]}


def chat(saver, thread_id: str, turns: int) -> None:
    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    graph = builder.compile(checkpointer=saver)
    for n in range(turns):
        graph.invoke(
            {"messages": [HumanMessage(f"turn {n}")]}, {"configurable": {"thread_id": thread_id}}
        )


@pytest.fixture
def as_auditor(client, auditor):
    client.force_login(auditor)
    return client


@pytest.fixture
def threaded(run):
    run.external_id = "invoice-7"
    run.save(update_fields=["external_id"])
    return run


def graph_section(response) -> str:
    assert response.status_code == 200
    text = response.text
    assert text.count('id="graph-state"') == 1
    return text[text.index('<section class="card" id="graph-state">') :]


def test_the_audit_page_shows_the_thread_s_checkpoints_decoded_and_escaped(
    as_auditor, threaded, project, other_project
):
    chat(OversightSaver(project=project), "invoice-7", turns=2)
    OversightSaver(project=other_project).put(
        {"configurable": {"thread_id": "invoice-7", "checkpoint_ns": ""}},
        {
            "id": "elsewhere",
            "v": 1,
            "ts": "",
            "channel_values": {},
            "channel_versions": {},
            "versions_seen": {},
        },
        {},
        {},
    )

    section = graph_section(as_auditor.get(reverse("audit-run", args=[threaded.pk])))

    ids = GraphCheckpoint.objects.filter(project=project).order_by("-checkpoint_id")
    shown = [section.index(cid) for cid in ids.values_list("checkpoint_id", flat=True)]
    assert len(shown) == 6 and shown == sorted(shown)  # newest first
    assert "elsewhere" not in section
    assert html.escape(XSS) in section and XSS not in section
    assert "&quot;type&quot;: &quot;ai&quot;" in section  # a message, as its fields
    assert "turn 1" in section
    assert "response_metadata" not in section and "additional_kwargs" not in section
    assert "Step 1 · loop" in section and "Step -1 · input" in section


def test_an_auditor_pages_back_to_the_thread_s_first_checkpoint(
    as_auditor, threaded, project, monkeypatch
):
    monkeypatch.setattr("graphs.display.GRAPH_PAGE_CHECKPOINTS", 4)
    chat(OversightSaver(project=project), "invoice-7", turns=5)
    url = reverse("audit-run", args=[threaded.pk])
    everything = list(
        GraphCheckpoint.objects.order_by("-checkpoint_id").values_list("checkpoint_id", flat=True)
    )
    seen, pages, query = [], 0, ""
    while True:
        section = graph_section(as_auditor.get(url + query))
        pages += 1
        seen += re.findall(
            r'<details class="graph-checkpoint">\s*<summary>[^<]*<code>([^<]+)', section
        )
        older = re.search(r'href="\?graph_before=([^"#]+)#graph-state">Older', section)
        if not older:
            break
        query = f"?graph_before={older[1]}"
    assert seen == everything and pages == -(-len(everything) // 4)
    assert "The latest</a>" in section
    refused = as_auditor.get(url, {"graph_before": "x" * 65})
    assert (refused.status_code, refused.text) == (400, NOT_AN_ID)
    refused = as_auditor.get(url, {"graph_before": "cp\x00"})  # Before any view reads it.
    assert (refused.status_code, refused.text) == (400, NUL_REFUSED)


def test_the_page_costs_two_queries_more_however_long_the_thread(as_auditor, threaded, project):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert as_auditor.get(reverse("audit-run", args=[threaded.pk])).status_code == 200
        return len(captured)

    queries()  # The first page of a session loads the session and the user.
    # The run names a thread with no checkpoints yet: one query finds none.
    without_thread = queries()
    saver = OversightSaver(project=project)
    chat(saver, "invoice-7", turns=1)
    short = queries()
    chat(saver, "invoice-7", turns=5)
    # Then one more query, for the pending writes of the listed checkpoints.
    assert (short, queries()) == (without_thread + 1, without_thread + 1)


def test_a_value_that_cannot_be_decoded_shows_the_metadata_only(as_auditor, threaded, project):
    OversightSaver(project=project).put(
        {"configurable": {"thread_id": "invoice-7", "checkpoint_ns": ""}},
        {
            "id": "cp-1",
            "v": 1,
            "ts": "",
            "channel_values": {},
            "channel_versions": {},
            "versions_seen": {},
        },
        {"source": "input", "note": XSS},
        {},
    )
    GraphCheckpoint.objects.update(type="msgpack+aes", checkpoint=b"\x00sealed")

    section = graph_section(as_auditor.get(reverse("audit-run", args=[threaded.pk])))

    assert "Cannot be decoded here." in section
    assert html.escape(f'"note": "{XSS}"', quote=False).replace('"', "&quot;") in section


def test_a_run_without_an_external_id_has_no_graph_section(as_auditor, run):
    response = as_auditor.get(reverse("audit-run", args=[run.pk]))
    assert response.status_code == 200
    assert "Graph state" not in response.text


def test_a_run_named_by_another_framework_has_no_graph_section(as_auditor, run):
    """An OpenAI Agents or Agent Framework run has an external id too, and no LangGraph
    checkpoints: its history does not speak of LangGraph."""
    Run.objects.filter(pk=run.pk).update(external_id="oa-thread")
    response = as_auditor.get(reverse("audit-run", args=[run.pk]))
    assert response.status_code == 200
    assert "Graph state" not in response.text
    assert "LangGraph" not in response.text


def test_a_stored_value_naming_a_function_never_runs_it(as_auditor, threaded, project, tmp_path):
    """Whoever can write the graph tables (an agent beside Oversight) chooses the bytes:
    the page decodes them without constructing anything they name."""
    ran = tmp_path / "ran"
    named = ormsgpack.packb(("builtins", "exec", f"open({str(ran)!r}, 'w').write('x')"))
    GraphCheckpoint.objects.create(
        project=project,
        thread_id="invoice-7",
        checkpoint_id="cp-1",
        type="msgpack",
        checkpoint=ormsgpack.packb({"channel_values": {"plan": ormsgpack.Ext(0, named)}}),
        metadata={"source": "loop", "step": 0},
        created_at=timezone.now(),
    )

    section = graph_section(as_auditor.get(reverse("audit-run", args=[threaded.pk])))

    assert not ran.exists()
    assert "Step 0 · loop" in section
    assert html.escape(f"open('{ran}', 'w').write('x')") in section  # shown as data
