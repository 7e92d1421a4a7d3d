"""``<!-- machine: NAME -->`` in a page becomes a Mermaid state diagram of
``runs.machines.NAME.upper()``, drawn from the table every status change is checked
against, so that a page cannot show a transition the code does not allow, or miss one.
(``runs.machines`` imports nothing of Django's: the site builds without settings.)"""

import re

from runs import machines

MARKER = re.compile(r"<!-- machine: (\w+) -->")


def diagram(name: str) -> str:
    """The machine as ``stateDiagram-v2``: its first status is where it starts, and each
    terminal status ends it."""
    machine = getattr(machines, name.upper())
    lines = ["```mermaid", "stateDiagram-v2", f"    [*] --> {next(iter(machine.edges))}"]
    for status, targets in machine.edges.items():
        lines += [f"    {status} --> {target}" for target in sorted(targets)]
    lines += [f"    {status} --> [*]" for status in sorted(machine.terminal)]
    return "\n".join([*lines, "```"])


def draw(app, docname: str, source: list[str]) -> None:
    source[0] = MARKER.sub(lambda found: diagram(found.group(1)), source[0])


def setup(app):
    app.connect("source-read", draw)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
