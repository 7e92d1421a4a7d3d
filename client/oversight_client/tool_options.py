"""``ToolOptions``: how a supervised tool is proposed and carried out, declared once.
``Oversight.tool`` takes them as keywords, and so does every framework adapter's tool
decorator, which forwards them as they are: an option added here reaches each adapter,
and an adapter cannot quietly drop one (``deduplicates``, say, which decides whether a
takeover may fire the effect again)."""

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SUMMARY_CHARS = 300  # the server's limit on a proposal's summary


@dataclass(frozen=True)
class ToolOptions:
    """The options of ``Oversight.tool`` (its docstring says what each does)."""

    action: str
    rollback_kind: str
    risk: str = "medium"
    summary: str | None = None
    verify: Callable[..., Any] | None = None
    undo: Callable[..., Any] | None = None
    executor: str = ""
    lease_seconds: int = 60
    deduplicates: bool = False

    def of(self, fn: Callable[..., Any]) -> "ToolOptions":
        """These options for ``fn``: the summary, by default the first line of its
        docstring, as reviewers will read it."""
        line = (fn.__doc__ or "").strip().partition("\n")[0]
        summary = line if self.summary is None else self.summary
        return dataclasses.replace(self, summary=summary[:SUMMARY_CHARS])

    @property
    def proposal(self) -> dict[str, Any]:
        """What a call of the tool is proposed with, besides its call id and arguments
        (the keywords of ``propose``)."""
        return {
            "action": self.action,
            "rollback_kind": self.rollback_kind,
            "risk": self.risk,
            "summary": self.summary or "",
        }


def taking_options[F: Callable[..., Any]](fn: F) -> F:
    """``fn``, whose ``**options`` are a ``ToolOptions``'s, with them named in its
    signature (for help() and an editor's hints)."""
    own = inspect.signature(fn).parameters.values()
    kept = [p for p in own if p.kind is not inspect.Parameter.VAR_KEYWORD]
    named = [
        p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
        for p in inspect.signature(ToolOptions).parameters.values()
    ]
    fn.__signature__ = inspect.signature(fn).replace(parameters=[*kept, *named])  # type: ignore[attr-defined]
    return fn
