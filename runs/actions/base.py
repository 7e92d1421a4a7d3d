"""The action plugin interface.

An action is a class with a ``name``, an ``Arguments`` schema (a pydantic model), a
``rollback_kind`` and four parts, each called by the worker outside any database
transaction:

- ``precondition(args, ctx)`` checks the live target and raises ``PreconditionFailed``
  to refuse (the world is no longer as it was approved);
- ``execute(args, key, ctx)`` fires the effect, applied at most once per idempotency
  ``key``, and returns the observation the agent reads;
- ``verify(args, key, ctx)`` re-reads the target and returns whether the effect is
  there ("the call returned 200" is not verification);
- ``undo(args, key, ctx)`` (in-band) or ``compensate(args, key, ctx)`` (compensating)
  reverses the effect when verification fails; each must be safe to repeat.

``snapshot(args, ctx)`` may capture what undo needs (e.g. the previous content of a
file) before the effect fires; the worker stores it, and any artifacts it names, in
the operation's intent checkpoint so that a worker resuming after a crash has it.
Register actions with the ``OVERSIGHT_ACTIONS`` setting (a list of dotted paths).
"""

from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from runs.models import Artifact, Operation


class PreconditionFailed(Exception):
    """The live target no longer satisfies what the reviewer approved."""


class ExecutionFailed(Exception):
    """The effect could not be applied; the worker verifies and rolls back as planned."""


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

    @property
    def project(self):
        return self.operation.project


class Action:
    name: ClassVar[str]
    Arguments: ClassVar[type[Arguments]]
    rollback_kind: ClassVar[str] = Operation.RollbackKind.NONE

    def rollback_kind_for(self, args: Any) -> str:
        """The rollback kind of this call (an action may offer several, by arguments)."""
        return self.rollback_kind

    def describe(self, args: Any) -> dict[str, str]:
        """Plain-language precondition and rollback plan, shown to reviewers."""
        return {"precondition": "", "rollback": ""}

    def precondition(self, args: Any, ctx: Context) -> None:
        """Raise ``PreconditionFailed`` if the live target is not as approved."""

    def snapshot(self, args: Any, ctx: Context) -> dict:
        """Capture what undo or verification will need, before the effect fires."""
        return {}

    def execute(self, args: Any, key: str, ctx: Context) -> dict:
        raise NotImplementedError

    def verify(self, args: Any, key: str, ctx: Context) -> bool:
        raise NotImplementedError

    def undo(self, args: Any, key: str, ctx: Context) -> None:
        raise NotImplementedError(f"{self.name} has no in-band undo")

    def compensate(self, args: Any, key: str, ctx: Context) -> None:
        raise NotImplementedError(f"{self.name} has no compensating operation")
