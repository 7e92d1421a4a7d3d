"""The demo's supervisor in a process of its own, for tests/test_supervisor.py, which
signals that process and never itself: ``python -m tests.supervisor_child CHILDREN``,
CHILDREN a JSON list of ``[name, python_code, once]``. It prints each line the
supervisor writes, then, once the supervisor returns, ``exit CODE`` and one line
``NAME RETURNCODE`` for each child."""

import json
import sys

from runs.supervisor import Child, Supervisor


def main() -> None:
    children = [
        Child(name, [sys.executable, "-c", code], once=once)
        for name, code, once in json.loads(sys.argv[1])
    ]
    code = Supervisor(children, write=lambda line: print(line, flush=True)).run()
    print(f"exit {code}", flush=True)
    for child in children:
        print(f"{child.name} {child.process.returncode}", flush=True)


if __name__ == "__main__":
    main()
