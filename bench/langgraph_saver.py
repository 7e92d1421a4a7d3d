"""OversightSaver against LangGraph's SqliteSaver, in one run on the same machine:
sequential put + put_writes of ~5 KB checkpoints (steps/s), get_tuple, list of a whole
thread, a page of its newest ten and the ten before its last, and invoke + resume cycles
of a one-interrupt graph; prints the ratios (above 1:
Oversight is faster). Both savers use a file in the same folder (SqliteSaver in WAL
mode); Oversight uses its settings' database (a throwaway SQLite file, or DATABASE_URL's
database, into which it writes a bench project). Needs the dev lock (langgraph,
langgraph-checkpoint-sqlite).

    .venv/bin/python bench/langgraph_saver.py [--steps 2000] [--cycles 200] [--repeat 3]
"""

import argparse
import os
import sys
import time
from pathlib import Path
from typing import TypedDict

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.environment import start_django

start_django()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from langgraph.graph import START, StateGraph  # noqa: E402
from langgraph.types import Command, interrupt  # noqa: E402

from bench.peer import put_steps, sqlite_saver  # noqa: E402
from bench.report import Figures, add_json_option  # noqa: E402
from graphs.saver import OversightSaver  # noqa: E402
from runs.models import Project  # noqa: E402


def elapsed_ms(work) -> float:
    started = time.perf_counter()
    work()
    return (time.perf_counter() - started) * 1000


class Asked(TypedDict):
    answer: str


def ask(state: Asked) -> Asked:
    return {"answer": interrupt("ok?")}


def cycle_ms(saver, cycles: int, prefix: str) -> float:
    """Milliseconds per invoke (pauses on interrupt) + resume, each on a new thread."""
    builder = StateGraph(Asked)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    graph = builder.compile(checkpointer=saver)
    started = time.perf_counter()
    for n in range(cycles):
        config = {"configurable": {"thread_id": f"{prefix}-cycle-{n}"}}
        paused = graph.invoke({"answer": ""}, config)
        graph.invoke(Command(resume={paused["__interrupt__"][0].id: "yes"}), config)
    return (time.perf_counter() - started) / cycles * 1000


def one_round(saver, prefix: str, listed: tuple[dict, dict], args) -> dict[str, float]:
    whole, last = listed
    rate, _ = put_steps(saver, f"{prefix}-put", args.steps)
    return {
        "put+put_writes steps/s": rate,
        "get_tuple ms": min(elapsed_ms(lambda: saver.get_tuple(last)) for _ in range(50)),
        f"list {args.steps:,} ms": min(
            elapsed_ms(lambda: sum(1 for _ in saver.list(whole))) for _ in range(5)
        ),
        # A page of the newest, and the page before a checkpoint: what a thread's
        # history view and LangGraph's get_state_history(limit=) ask for.
        "list(limit=10) ms": min(
            elapsed_ms(lambda: sum(1 for _ in saver.list(whole, limit=10))) for _ in range(50)
        ),
        "list(before=, limit=10) ms": min(
            elapsed_ms(lambda: sum(1 for _ in saver.list(whole, before=last, limit=10)))
            for _ in range(50)
        ),
        "invoke+resume ms/cycle": cycle_ms(saver, args.cycles, prefix),
    }


def measure(savers: dict, args) -> dict[str, dict[str, float]]:
    """The best of ``--repeat`` rounds, each round running every saver in turn, so
    that a change in the machine's load hits both alike."""
    listed = {}
    for name, saver in savers.items():
        _, last = put_steps(saver, f"{name}-listed", args.steps)
        whole = {"configurable": {"thread_id": f"{name}-listed", "checkpoint_ns": ""}}
        assert sum(1 for _ in saver.list(whole)) == args.steps
        listed[name] = (whole, last)
    rounds = []
    for n in range(args.repeat):
        rounds.append(
            {
                name: one_round(saver, f"{name}-{n}", listed[name], args)
                for name, saver in savers.items()
            }
        )
    best = {True: max, False: min}  # a rate's best is its highest
    return {
        name: {
            figure: best[figure.endswith("/s")](r[name][figure] for r in rounds)
            for figure in rounds[0][name]
        }
        for name in savers
    }


def main() -> None:
    parser = add_json_option(argparse.ArgumentParser())
    parser.add_argument("--steps", type=int, default=2000, help="checkpoints in the thread")
    parser.add_argument("--cycles", type=int, default=200, help="invoke+resume cycles")
    parser.add_argument("--repeat", type=int, default=3, help="rounds: the best of each")
    args = parser.parse_args()
    figures = Figures(__file__, args)
    call_command("migrate", verbosity=0)
    suffix = str(time.time_ns())
    Project.objects.create(slug=f"bench-{suffix}", name="Bench")
    ours = OversightSaver(project=f"bench-{suffix}")
    baseline = sqlite_saver()

    print(f"database: {connection.vendor} {connection.settings_dict['NAME']}")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}")
    best = measure({"SqliteSaver": baseline, "Oversight": ours}, args)
    print(f"{'':<28} {'SqliteSaver':>12} {'Oversight':>12} {'ratio':>7}")
    for name, base in best["SqliteSaver"].items():
        mine = best["Oversight"][name]
        # Above 1 means Oversight is faster: a rate divides the other way from a time.
        ratio = mine / base if name.endswith("/s") else base / mine
        what, unit = name.rsplit(" ", 1)
        figures.add(f"{what}: SqliteSaver", base, unit)
        figures.add(f"{what}: Oversight", mine, unit)
        figures.add(f"{what}: ratio (above 1: Oversight is faster)", ratio, "ratio")
        print(f"{name:<28} {base:>12,.3f} {mine:>12,.3f} {ratio:>7.2f}")
    figures.write()


if __name__ == "__main__":
    main()
