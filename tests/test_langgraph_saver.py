"""OversightSaver's sync methods, a real graph on it, concurrent writers in two processes,
and what a deletion leaves in the named run's audit chain (the conformance suite, in
tests/test_langgraph_conformance.py, calls only the async methods)."""

import itertools
import os
import subprocess
import sys
import time
from typing import TypedDict

import pytest
from django.db import OperationalError, connection, transaction
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import START, StateGraph
from langgraph.types import Command, interrupt

from graphs.models import GraphCheckpoint, GraphWrite
from graphs.saver import OversightSaver
from runs.models import Checkpoint
from tests.processes import ROOT, child_env

# The saver writes on a connection of its own: the tests' data must be committed.
pytestmark = pytest.mark.django_db(transaction=True)


def thread(thread_id: str, ns: str = "") -> dict:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}


def put(saver, config, step: int, **metadata) -> dict:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"step": step, "text": "é" * 10}
    return saver.put(config, checkpoint, {"source": "loop", "step": step, **metadata}, {})


@pytest.fixture
def saver(project):
    saver = OversightSaver(project="acme")
    yield saver
    saver.close()


def test_put_then_get_tuple_returns_the_checkpoint_its_parent_and_metadata(saver):
    first = put(saver, thread("t1"), 0)
    second = put(saver, first, 1, score=42)

    latest = saver.get_tuple(thread("t1"))
    assert latest.config == second
    assert latest.checkpoint["channel_values"] == {"step": 1, "text": "é" * 10}
    assert latest.metadata == {"source": "loop", "step": 1, "score": 42}
    assert latest.parent_config == first
    assert saver.get_tuple(first).checkpoint["channel_values"]["step"] == 0
    assert saver.get_tuple(thread("t1", ns="child")) is None
    assert saver.get_tuple(thread("nobody")) is None


def test_pending_writes_come_back_in_the_order_langgraph_applies_them(saver):
    config = put(saver, thread("t1"), 0)
    # Stored out of order: LangGraph applies them by task path, then task id, then index.
    saver.put_writes(config, [("x", "c0")], "c", "~1")
    saver.put_writes(config, [("x", "b0"), ("y", "b1")], "b", "~0")
    saver.put_writes(config, [("x", "a0")], "a", "~0")

    pending = saver.get_tuple(config).pending_writes
    assert pending == [("a", "x", "a0"), ("b", "x", "b0"), ("b", "y", "b1"), ("c", "x", "c0")]
    assert next(saver.list(config)).pending_writes == pending


def test_a_retried_write_keeps_the_first_value_but_an_interrupt_write_is_replaced(saver):
    config = put(saver, thread("t1"), 0)
    saver.put_writes(config, [("x", "first")], "task")
    saver.put_writes(config, [("x", "retried")], "task")
    saver.put_writes(config, [("__interrupt__", "asked")], "task")
    saver.put_writes(config, [("__interrupt__", "asked again")], "task")

    pending = saver.get_tuple(config).pending_writes
    assert sorted(pending) == [("task", "__interrupt__", "asked again"), ("task", "x", "first")]


def test_list_spans_threads_newest_first_and_stays_in_the_saver_s_project(saver, other_project):
    a0 = put(saver, thread("a"), 0)
    b0 = put(saver, thread("b"), 0, kind="x")
    a1 = put(saver, a0, 1, kind="x")
    OversightSaver(project=other_project).put(thread("a"), empty_checkpoint(), {}, {})

    assert [t.config for t in saver.list(None)] == [a1, b0, a0]
    assert [t.config for t in saver.list(thread("a"))] == [a1, a0]
    assert [t.config for t in saver.list(None, filter={"kind": "x"})] == [a1, b0]
    assert [t.config for t in saver.list(None, before=a1, limit=1)] == [b0]
    assert len(list(OversightSaver(project="other").list(None))) == 1


def test_an_unknown_project_is_named_in_the_error(db):
    with pytest.raises(ValueError, match="no project with slug 'nope'"):
        OversightSaver(project="nope").get_tuple(thread("t"))


class Asked(TypedDict):
    answer: str


def ask(state: Asked) -> Asked:
    return {"answer": interrupt("Pay the invoice?")}


def asking_graph(saver):
    builder = StateGraph(Asked)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    return builder.compile(checkpointer=saver)


def test_a_graph_pauses_on_interrupt_and_resumes_from_the_saver(saver):
    config = {"configurable": {"thread_id": "invoice-7"}}
    paused = asking_graph(saver).invoke({"answer": ""}, config)
    question = paused["__interrupt__"][0]
    assert question.value == "Pay the invoice?"

    # Another graph object (another process, after a restart) resumes from the database.
    done = asking_graph(OversightSaver(project="acme")).invoke(
        Command(resume={question.id: "yes"}), config
    )
    assert done == {"answer": "yes"}
    history = list(saver.list(config))
    assert [t.metadata["step"] for t in history] == [1, 0, -1]


def test_copy_then_prune_keeps_the_latest_checkpoint_per_namespace(saver):
    config = put(saver, thread("src"), 0)
    config = put(saver, config, 1)
    saver.put_writes(config, [("x", 1)], "task")
    put(saver, thread("src", ns="sub"), 0)

    saver.copy_thread("src", "dst")
    assert [t.config["configurable"]["checkpoint_id"] for t in saver.list(thread("dst"))] == [
        t.config["configurable"]["checkpoint_id"] for t in saver.list(thread("src"))
    ]
    saver.prune(["dst"])
    kept = list(saver.list({"configurable": {"thread_id": "dst"}}))
    assert {(t.config["configurable"]["checkpoint_ns"], t.metadata["step"]) for t in kept} == {
        ("", 1),
        ("sub", 0),
    }
    latest = next(t for t in kept if t.config["configurable"]["checkpoint_ns"] == "")
    assert latest.pending_writes == [("task", "x", 1)]
    assert len(list(saver.list(thread("src")))) == 2


def test_deleting_a_run_s_thread_is_recorded_on_the_run_and_spares_its_checkpoints(saver, run):
    run.external_id = "thread-of-run"
    run.save(update_fields=["external_id"])
    config = put(saver, thread("thread-of-run"), 0)
    saver.put_writes(put(saver, config, 1), [("x", 1), ("y", 2)], "task")
    put(saver, thread("unnamed"), 0)
    before = list(run.checkpoints.values_list("seq", "event"))

    saver.prune(["thread-of-run", "unnamed"])
    saver.delete_thread("thread-of-run")
    saver.delete_thread("unnamed")

    steps = list(run.checkpoints.values_list("seq", "event", "state"))
    assert [(seq, event) for seq, event, _ in steps[: len(before)]] == before
    recorded = [
        (event, {key: state[key] for key in ("thread_id", "checkpoints", "writes", "by")})
        for _, event, state in steps[len(before) :]
    ]
    assert recorded == [
        (
            "graph.pruned",
            {
                "thread_id": "thread-of-run",
                "checkpoints": 1,
                "writes": 0,
                "by": "langgraph checkpointer",
            },
        ),
        (
            "graph.deleted",
            {
                "thread_id": "thread-of-run",
                "checkpoints": 1,
                "writes": 2,
                "by": "langgraph checkpointer",
            },
        ),
    ]
    assert not GraphCheckpoint.objects.exists()
    assert not GraphWrite.objects.exists()
    assert Checkpoint.objects.filter(run=run).count() == len(before) + 2


def test_deleting_a_langgraph_run_is_recorded_on_the_oversight_run(saver, run):
    run.external_id = "t"
    run.save(update_fields=["external_id"])
    config = put(saver, thread("t"), 0, run_id="lg-1")
    saver.put_writes(config, [("x", 1)], "task")
    put(saver, config, 1, run_id="lg-2")

    saver.delete_for_runs(["lg-1"])

    assert [t.metadata["run_id"] for t in saver.list(thread("t"))] == ["lg-2"]
    last = run.checkpoints.order_by("-seq").first()
    assert (last.event, last.state["checkpoints"], last.state["writes"]) == (
        "graph.deleted",
        1,
        1,
    )


@pytest.mark.parametrize("threads", [("shared", "shared"), ("left", "right")], ids=["one", "two"])
def test_two_processes_writing_at_once_lose_nothing(project, threads):
    count = 40
    writers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.graph_writer", "acme", thread_id, name, str(count)],
            cwd=ROOT,
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, thread_id in zip(("left", "right"), threads, strict=True)
    ]
    for writer in writers:
        out, err = writer.communicate(timeout=120)
        assert (writer.returncode, out) == (0, "DONE\n"), err

    saver = OversightSaver(project="acme")
    for name, thread_id in zip(("left", "right"), threads, strict=True):
        mine = [t for t in saver.list(thread(thread_id)) if t.metadata["writer"] == name]
        assert [t.metadata["step"] for t in mine] == list(range(count - 1, -1, -1))
        assert all(
            t.pending_writes
            == [
                (f"{name}-{t.metadata['step']}", "writer", name),
                (f"{name}-{t.metadata['step']}", "step", t.metadata["step"]),
            ]
            for t in mine
        )
    assert len(list(saver.list(None))) == 2 * count


def test_the_server_never_imports_an_agent_framework(db):
    """Django's start-up, the URLs (every view) and the run services load no module of
    LangGraph, the OpenAI Agents SDK, Microsoft Agent Framework or the Claude Agent SDK:
    only graphs.saver and graphs.decode load LangGraph, when asked for."""
    frameworks = "('lang', 'agents', 'openai', 'agent_framework', 'claude', 'anthropic', 'mcp')"
    probe = (
        "import sys, django; django.setup(); "
        "import oversight.urls, runs.transitions, runs.services.runs, graphs.models; "
        f"print(sorted({{m.split('.')[0] for m in sys.modules if m.startswith({frameworks})}}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=child_env(), capture_output=True, text=True
    )
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr
    probe = probe.replace("graphs.models;", "graphs.models, graphs.saver;")
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=child_env(), capture_output=True, text=True
    )
    assert "'langgraph'" in done.stdout, done.stderr  # the probe does see LangGraph


class Counted(TypedDict):
    n: int


class Undone(Exception):
    pass


def test_a_node_rolling_back_its_own_transaction_keeps_the_checkpoints_saved_meanwhile(saver):
    """LangGraph saves a step's checkpoint from another thread while the next node runs:
    the node's own database work, rolled back, must not take the checkpoint with it."""

    def work(state: Counted) -> Counted:
        try:
            with transaction.atomic():
                Checkpoint.objects.count()  # the node's own ORM work, which takes time…
                time.sleep(0.3)  # simulates a slow target (LangGraph saves meanwhile)
                raise Undone
        except Undone:
            pass
        return {"n": state["n"] + 1}

    builder = StateGraph(Counted)
    builder.add_node("first", work)
    builder.add_node("second", work)
    builder.add_edge(START, "first")
    builder.add_edge("first", "second")
    builder.compile(checkpointer=saver).invoke({"n": 0}, {"configurable": {"thread_id": "tx"}})

    history = list(saver.list(thread("tx")))
    assert [t.metadata["step"] for t in history] == [2, 1, 0, -1]
    assert all(t.parent_config == older.config for t, older in itertools.pairwise(history))


@pytest.mark.skipif(
    not os.environ.get("DATABASE_URL", "").startswith("postgres"),
    reason="a database server that drops connections is PostgreSQL's case",
)
def test_after_the_database_dropped_its_connection_the_saver_reconnects(saver):
    assert saver.get_tuple(thread("t")) is None
    with connection.cursor() as cursor:  # as a restart of PostgreSQL would
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    outcomes = []
    for _ in range(3):
        try:
            outcomes.append(saver.get_tuple(thread("t")))
        except OperationalError:
            outcomes.append("failed")
    assert outcomes in (["failed", None, None], [None, None, None])
