"""The action plugin interface.

An action is a class with a ``name``, an ``Arguments`` schema (a pydantic model), a
``rollback_kind`` and four parts, each called by the worker:

- ``precondition(args, ctx)`` checks the live target and raises ``PreconditionFailed``
  to refuse (the world is no longer as it was approved);
- ``execute(args, key, ctx)`` fires the effect, applied at most once per idempotency
  ``key``, and returns the observation the agent reads. It raises ``NotApplied`` when
  the target refused before applying anything (the operation then ends ``failed``,
  with nothing to roll back); any other exception leaves the outcome to ``verify``;
- ``verify(args, key, ctx)`` re-reads the target ("the call returned 200" is not
  verification) and answers what it sees: ``Effect.APPLIED`` (there, as approved),
  ``Effect.ABSENT`` (no trace of it: the target is as it was before) or
  ``Effect.UNCERTAIN`` (it cannot tell, or something is there that is not what was
  approved). ``True`` and ``False`` are read as applied and uncertain;
- ``undo(args, key, ctx)`` (in-band) or ``compensate(args, key, ctx)`` (compensating)
  reverses the effect when verification did not show it as approved. Each must be safe
  to repeat, and must raise ``NothingToRollBack`` rather than act when it cannot see
  the forward effect: a compensation for an effect that never happened invents one.

``preview(args, ctx)`` may show reviewers the effect, read from the live target (a
diff of the file, balances before and after…; see ``previews``): what a reviewer was
shown is stored with their decision, and a decision on a preview the target has since
moved past is refused. Without one, reviewers read the arguments. A preview runs in a
reviewer's request, on input the agent chose: its reads from a target keep the tighter
``PREVIEW_BUDGET`` (``target_budget``), and its own work must be bounded too.

``target(args)`` names what the call acts on that other calls may act on too (an
account, a file, a host), and ``together(pending, ctx)`` says what the calls waiting on
one target would do together: two transfers that each fit may overdraw their account
together, and a reviewer deciding on one is shown the others.

``snapshot(args, ctx)`` may capture what undo and verification need (e.g. the previous
content of a file) before the effect fires; the worker stores it, and any artifacts it
names, in the operation's intent checkpoint so that a worker resuming after a crash
has it.

Two declarations tell the worker what the target guarantees (see "What exactly once
rests on" in docs/concepts/leases.md):

- ``in_database``: the effect is rows in Oversight's own database. The worker runs
  ``execute``, ``verify`` and the record of the outcome in one transaction, conditional
  on its fencing epoch: exactly once by construction.
- ``deduplicates(args)``: the target makes a late repeat harmless: it deduplicates by
  the idempotency key, or refuses a stale fencing epoch (``ctx.epoch``). Only then may
  a worker that takes over after an intent, and cannot see the effect, fire again;
  otherwise it takes the uncertain path (at most once, and a person decides).
- ``absence_is_final(args)``: verification's "absent" also means no earlier attempt
  can still make the effect appear (its effects are fenced where they land: a lock, a
  record, a transaction). Where it is not (a request may still be on its way to an
  HTTP target), a takeover never records an operation as not executed on its own word.

- ``recorded_in_database``: the effect lands outside (a mail sent), but the record that
  verifies and deduplicates it lives in Oversight's database (``SentEmail``). A restore
  brings that record back as the backup had it, so after a restore "absent" cannot
  tell whether the effect happened since: the takeover is uncertain, a person decides.

An action that fires outside the database calls ``ctx.confirm_lease()`` as late as it
can before the effect (inside its own lock, if it takes one): it raises if another
worker holds the operation now.

A worker carries out many effects at once, grouped in lanes by the target they wait on
(``lane(arguments, project_id)``: by default the action's name, or "database" for an
effect inside it): each lane has its own limit and circuit breaker, so one slow or dead
target cannot take every slot. An action that talks to a target over the network calls
``target_answered(healthy)`` after each exchange (False: a timeout, a connection that
could not be made, a 5xx): that is what the lane's breaker counts.

The text of the exceptions above is shown to the agent, in alert summaries and emails:
write it for them, naming files by the path the agent gave, never an absolute server
path or another exception's text. Any other exception is described from a fixed
vocabulary (``plain_reason``); its own text goes to the server log only.

Register actions with the ``OVERSIGHT_ACTIONS`` setting (a list of dotted paths).
"""

import os
import smtplib
import socket
import ssl
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Protocol

from django.conf import settings
from django.db import DatabaseError
from pydantic import BaseModel, ConfigDict

from runs.actions.previews import Preview, Together
from runs.artifact_store import StoreUnavailable
from runs.errors import OversightError
from runs.models import Artifact, Operation


class PreconditionFailed(Exception):
    """The live target no longer satisfies what the reviewer approved."""


class ExecutionFailed(Exception):
    """The effect may or may not have been applied: verification decides."""


class NotApplied(Exception):
    """The target refused before applying anything: the effect did not happen."""


class NothingToRollBack(Exception):
    """A rollback step cannot see the forward effect, so it does nothing."""


class TryLater(Exception):
    """The target is busy (e.g. locked by another writer): nothing was done this time."""


# Exceptions whose text was written for the people and agents who read it.
SAYS_WHY = (
    PreconditionFailed,
    ExecutionFailed,
    NotApplied,
    NothingToRollBack,
    TryLater,
    OversightError,
)


# Checked in order: the first class an error belongs to names it.
FIXED_WORDS: list[tuple[type[BaseException], str]] = [
    (StoreUnavailable, "the artifact store could not be reached"),
    (TimeoutError, "the target did not answer (timeout)"),
    (socket.gaierror, "the target's name could not be resolved"),
    (ConnectionRefusedError, "the target refused the connection"),
    (ConnectionError, "the connection to the target broke"),
    (ssl.SSLError, "the secure connection to the target failed"),
    (smtplib.SMTPException, "the mail server ended the exchange with an error"),
    (DatabaseError, "a database error, logged on the server"),
]


def foreseen(error: BaseException) -> bool:
    """Whether ``error`` is one a target is known to cause (an action's own words, a
    timeout, a refused connection, a mail server's error…): logged without a traceback,
    which would only say where Oversight noticed it."""
    known = (*SAYS_WHY, *(kind for kind, _ in FIXED_WORDS))
    return isinstance(error, known) or (isinstance(error, OSError) and bool(error.errno))


def plain_reason(error: BaseException) -> str:
    """What went wrong, fit for an agent, an alert summary or an email: an action's own
    words, or else a description from a fixed vocabulary. The text of other exceptions
    may hold absolute server paths, host names or someone else's data (an OSError names
    the file, a database error the row), so it is never part of the answer."""
    if isinstance(error, SAYS_WHY):
        return str(error)
    for kind, words in FIXED_WORDS:
        if isinstance(error, kind):
            return words
    if isinstance(error, OSError) and error.errno and error.errno > 0:
        return os.strerror(error.errno).lower()  # The system's fixed words for its code.
    return f"an unexpected {type(error).__name__}, logged on the server"


# Who hears how targets answer in this context: the worker's lane (nobody in a preview).
_listener: ContextVar[Callable[[bool], None] | None] = ContextVar("target_listener", default=None)


def target_answered(healthy: bool) -> None:
    """Tell the lane this effect runs in whether its target answered (False: it timed
    out, could not be reached, or answered 5xx): its circuit breaker counts these."""
    if (listener := _listener.get()) is not None:
        listener(healthy)


@contextmanager
def reporting_to(listener: Callable[[bool], None]) -> Iterator[None]:
    """Send what ``target_answered`` says in the block to ``listener``."""
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)


@dataclass(frozen=True)
class Budget:
    """What one request to a target may take: ``seconds`` in all (connecting, sending
    and the whole answer) and ``max_bytes`` of the answer's body."""

    seconds: float
    max_bytes: int


# A preview's reads hold a reviewer's page (and a web process's thread) while they wait:
# a few seconds and a mebibyte at most, however patient the workers may be.
PREVIEW_BUDGET = Budget(seconds=3, max_bytes=2**20)

_previewing: ContextVar[bool] = ContextVar("previewing", default=False)


def target_budget() -> Budget:
    """The budget of a request made now: the workers' (``OVERSIGHT_HTTP_DEADLINE``,
    ``OVERSIGHT_HTTP_MAX_RESPONSE_BYTES``), within ``PREVIEW_BUDGET`` in a preview."""
    seconds, most = settings.OVERSIGHT_HTTP_DEADLINE, settings.OVERSIGHT_HTTP_MAX_RESPONSE_BYTES
    if _previewing.get():
        seconds, most = min(seconds, PREVIEW_BUDGET.seconds), min(most, PREVIEW_BUDGET.max_bytes)
    return Budget(seconds, most)


@contextmanager
def previewing() -> Iterator[None]:
    """Requests made in the block are a preview's (see ``target_budget``)."""
    token = _previewing.set(True)
    try:
        yield
    finally:
        _previewing.reset(token)


class Effect(StrEnum):
    """What verification saw on the target."""

    APPLIED = "applied"
    ABSENT = "absent"
    UNCERTAIN = "uncertain"

    @classmethod
    def of(cls, answer: "Effect | bool") -> "Effect":
        """An action's answer; a bare ``bool`` (older actions) is applied or uncertain."""
        if isinstance(answer, cls):
            return answer
        if isinstance(answer, bool):
            return cls.APPLIED if answer else cls.UNCERTAIN
        raise TypeError(f"verify must answer an Effect or a bool, not {answer!r}")

    def observation(self, **more) -> dict:
        """The result an operation ending on this effect records: what the agent reads."""
        return {"verified": self is Effect.APPLIED, "effect": self.value, **more}


class Lease(Protocol):
    epoch: int

    def confirm(self) -> None: ...


class Arguments(BaseModel):
    """Base for action argument schemas: unknown fields are refused."""

    model_config = ConfigDict(extra="forbid")


@dataclass
class Context:
    """What an action may know about the operation it serves."""

    operation: Operation
    # What ``snapshot`` returned, as stored in the intent (empty before the snapshot).
    intent: dict = field(default_factory=dict)
    # Artifacts to reference from the intent checkpoint, by name.
    artifacts: dict[str, Artifact] = field(default_factory=dict)
    # The worker's lease on the operation (None outside a worker, e.g. in a preview).
    lease: Lease | None = None

    @property
    def project(self):
        return self.operation.project

    @property
    def epoch(self) -> int:
        """The fencing epoch of the attempt: send it to targets that refuse stale ones."""
        return self.lease.epoch if self.lease else self.operation.fencing_epoch

    def confirm_lease(self) -> None:
        """Raise unless this worker still holds the operation, with its lease renewed
        from now (in the database's clock). Call it immediately before an effect."""
        if self.lease is not None:
            self.lease.confirm()


class Action:
    name: ClassVar[str]
    Arguments: ClassVar[type[Arguments]]
    rollback_kind: ClassVar[str] = Operation.RollbackKind.NONE
    in_database: ClassVar[bool] = False
    recorded_in_database: ClassVar[bool] = False
    # For the catalogue (``GET /api/v1/actions``): what it does (default: the class's
    # docstring), what ``precondition`` checks, in a sentence, and every rollback kind
    # ``rollback_kind_for`` may answer (default: ``rollback_kind`` alone).
    description: ClassVar[str] = ""
    checks: ClassVar[str] = ""
    rollback_kinds: ClassVar[tuple[str, ...]] = ()

    def lane(self, arguments: dict, project_id: int) -> str:
        """The lane of this call: the target it waits on (see above). ``arguments`` are
        as proposed or edited, not yet validated: read them defensively."""
        return "database" if self.in_database else self.name

    def rollback_kind_for(self, args: Any) -> str:
        """The rollback kind of this call (an action may offer several, by arguments)."""
        return self.rollback_kind

    def deduplicates(self, args: Any) -> bool:
        """Whether the target makes a late repeat of this call harmless (see above)."""
        return self.in_database

    def absence_is_final(self, args: Any) -> bool:
        """Whether "absent" rules out a late effect of an earlier attempt (see above)."""
        return self.in_database

    def gist(self, args: Any) -> str:
        """What this call would do, in one line read from its arguments alone (the target
        is not read): each row of the queue shows it, so it is worked out once, when the
        operation is proposed or edited, never per page. "": the action's name says it."""
        return ""

    def target(self, args: Any) -> str:
        """What this call acts on that other calls may act on too, from its arguments
        alone, named with its kind ("account operating", "file notes/a.md", "host
        example.com"): an operation's page lists the others still waiting on the same
        target, whose effects add up. Worked out once, as ``gist`` is. "": none shared."""
        return ""

    def together(self, pending: list[Any], ctx: Context) -> "Together | None":
        """What ``pending`` (calls of this action on one target, ``ctx``'s operation's
        first) would do together, read from the live target as cheaply as ``preview``:
        each may fit on its own while together they do not. None: nothing to say beyond
        each call's own preview."""
        return None

    def describe(self, args: Any) -> dict[str, str]:
        """Plain-language precondition and rollback plan, shown to reviewers."""
        return {"precondition": "", "rollback": ""}

    def preview(self, args: Any, ctx: Context) -> "Preview | None":
        """What the call would change, read from the live target (None: the arguments
        say it all). Cheap and without effect: it runs each time a reviewer looks."""
        return None

    def precondition(self, args: Any, ctx: Context) -> None:
        """Raise ``PreconditionFailed`` if the live target is not as approved."""

    def snapshot(self, args: Any, ctx: Context) -> dict:
        """Capture what undo or verification will need, before the effect fires."""
        return {}

    def execute(self, args: Any, key: str, ctx: Context) -> dict:
        raise NotImplementedError

    def verify(self, args: Any, key: str, ctx: Context) -> Effect | bool:
        raise NotImplementedError

    def undo(self, args: Any, key: str, ctx: Context) -> None:
        raise NotImplementedError(f"{self.name} has no in-band undo")

    def compensate(self, args: Any, key: str, ctx: Context) -> None:
        raise NotImplementedError(f"{self.name} has no compensating operation")
