"""Errors the services raise. Each carries a stable ``code`` that the API and pages map
to a status (409, 403, 422) and a sentence a person can act on."""


class OversightError(Exception):
    code = "error"


class IllegalTransition(OversightError):
    """The state machine has no edge from the current status to the requested one."""

    code = "illegal_transition"


class StaleVersion(OversightError):
    """A writer acted on a version that someone else has already moved past."""

    code = "stale_version"


class RunClosed(OversightError):
    """The run is cancelled or finished: nothing more may be proposed, decided or said."""

    code = "run_closed"


class RunNotAccepting(OversightError):
    """The run is open but halted (e.g. waiting for reconciliation)."""

    code = "run_not_accepting"


class ConflictingProposal(OversightError):
    """The call_id is already used in this run for different arguments."""

    code = "conflicting_proposal"


class ExternalIdConflict(OversightError):
    """The external_id already names another of the token's objects of this kind, one
    that describes something else (another token's names are its own, never refused)."""

    code = "external_id_conflict"


class DecisionRefused(OversightError):
    """The decision breaks a rule: own run, already decided, already approved by you…"""

    code = "decision_refused"


class ArgumentsChanged(OversightError):
    """The reviewer decided on arguments that are no longer the operation's arguments."""

    code = "arguments_changed"


class PreviewChanged(OversightError):
    """The reviewer decided on a preview of the effect that the target no longer shows."""

    code = "preview_changed"


class EarlierAttempt(OversightError):
    """Another fencing epoch recorded its intent to take this step and may still be
    taking it: the step is not taken again where the target does not deduplicate, and
    "absent" does not end the operation; the outcome is uncertain, for a person."""

    code = "earlier_attempt"


class OperationExpired(OversightError):
    """Nobody decided in time, or the approval lapsed before execution (fail closed)."""

    code = "expired"


class NotPermitted(OversightError):
    """The actor lacks the role this needs in the operation's project."""

    code = "not_permitted"


class InvalidInput(OversightError):
    """Input that fails validation (payload schema, arguments shape, reason missing)."""

    code = "invalid"
