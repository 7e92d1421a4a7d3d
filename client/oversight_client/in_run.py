"""Which Oversight run the supervised calls of an agent's turn are proposed in, for the
adapters whose framework cannot carry it to the tool (the OpenAI Agents SDK, the Agent
Framework): a context variable, so concurrent runs each see their own. Framework-free."""

import contextlib
import contextvars
from collections.abc import Iterator

_run: contextvars.ContextVar[int] = contextvars.ContextVar("oversight_run")


@contextlib.contextmanager
def in_run(run_id: int) -> Iterator[None]:
    """Propose the supervised calls made inside this block in run ``run_id``."""
    token = _run.set(run_id)
    try:
        yield
    finally:
        _run.reset(token)


def current_run() -> int:
    try:
        return _run.get()
    except LookupError:
        raise RuntimeError(
            "a supervised tool runs in an Oversight run: run the agent inside in_run(run_id) "
            "(OversightRunner and WorkflowDriver do)"
        ) from None
