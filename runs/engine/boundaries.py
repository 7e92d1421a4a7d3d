"""A signal sent at each boundary of the commit protocol.

Receivers get ``boundary`` (one of ``BOUNDARIES``) and ``operation``. It exists for
observation — metrics, tracing — and for the crash tests, whose worker processes kill
themselves at a chosen boundary; the engine never depends on a receiver. An effect inside
Oversight's database is carried out in the transaction that claims it: its boundaries
(CLAIMED included) are reached before anything of that transaction is committed, and if
it rolls back to the claim to go step by step, INTENT, EXECUTED and VERIFIED are reached
again on the way.
"""

from django.dispatch import Signal

CLAIMED = "claimed"  # the lease is held and recorded
INTENT = "intent"  # precondition passed, snapshot and intent recorded; effect not fired
EXECUTED = "executed"  # the effect fired (or failed); not verified yet
VERIFIED = "verified"  # verification answered; result not recorded yet
ROLLING_BACK = "rolling_back"  # verification failure recorded; rollback under way

BOUNDARIES = (CLAIMED, INTENT, EXECUTED, VERIFIED, ROLLING_BACK)

boundary_reached = Signal()


def reach(boundary: str, operation) -> None:
    boundary_reached.send(sender=None, boundary=boundary, operation=operation)
