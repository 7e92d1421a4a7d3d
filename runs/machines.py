"""The state machines, as data. Every status change in the product is checked here.

The run table is seed 002's, with two edges added explicitly (as the seed allows) so a
run can be halted for reconciliation from wherever it is open: queued → waiting, and
waiting → waiting, which changes why it waits (approval → reconciliation) and is
checkpointed like any other transition. The operation table is PRODUCT.md's, plus the
edges its text implies: an approval that lapses before execution (approved → expired),
an in-flight operation cancelled before its effect fired (in_flight → cancelled), an
effect that provably did not happen (in_flight → failed: nothing to roll back), and a
worker taking over an expired lease (in_flight → in_flight, verify_failed →
verify_failed), recorded as a checkpoint with the new fencing epoch.
"""

from collections.abc import Mapping
from dataclasses import dataclass

from runs.errors import IllegalTransition


@dataclass(frozen=True)
class Machine:
    name: str
    edges: Mapping[str, frozenset[str]]

    def check(self, current: str, target: str) -> None:
        if target not in self.edges.get(current, frozenset()):
            raise IllegalTransition(f"a {self.name} cannot go from {current} to {target}")

    def is_terminal(self, status: str) -> bool:
        return not self.edges[status]

    @property
    def terminal(self) -> frozenset[str]:
        return frozenset(status for status, targets in self.edges.items() if not targets)

    @property
    def open(self) -> frozenset[str]:
        return frozenset(self.edges) - self.terminal


RUN = Machine(
    "run",
    {
        "queued": frozenset({"running", "waiting", "cancelled"}),
        "running": frozenset({"waiting", "completed", "partial", "failed", "cancelled"}),
        "waiting": frozenset({"queued", "waiting", "cancelled", "failed"}),
        "completed": frozenset(),
        "partial": frozenset(),
        "failed": frozenset(),
        "cancelled": frozenset(),
    },
)

OPERATION = Machine(
    "operation",
    {
        "proposed": frozenset({"approved", "rejected", "expired", "cancelled"}),
        "approved": frozenset({"in_flight", "expired", "cancelled"}),
        "in_flight": frozenset(
            {"committed", "precondition_failed", "verify_failed", "failed", "cancelled"}
        ),
        "verify_failed": frozenset({"rolled_back", "compensated", "alerted"}),
        "committed": frozenset(),
        "precondition_failed": frozenset(),
        "failed": frozenset(),
        "rolled_back": frozenset(),
        "compensated": frozenset(),
        "alerted": frozenset(),
        "rejected": frozenset(),
        "expired": frozenset(),
        "cancelled": frozenset(),
    },
)

REQUEST = Machine(
    "request",
    {
        "open": frozenset({"answered", "rejected", "expired", "cancelled"}),
        "answered": frozenset(),
        "rejected": frozenset(),
        "expired": frozenset(),
        "cancelled": frozenset(),
    },
)

ALERT = Machine(
    "alert",
    {
        "open": frozenset({"acknowledged", "resolved"}),
        "acknowledged": frozenset({"resolved"}),
        "resolved": frozenset(),
    },
)
