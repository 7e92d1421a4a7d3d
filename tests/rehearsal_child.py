"""``manage.py rehearse_rollback`` with one rollback path broken on purpose, in a child
process: ``python -m tests.rehearsal_child in-band|compensating``.

The broken rollback reports success and undoes nothing — the failure a status alone
would not reveal — so the rehearsal must notice it by looking at the effect.
"""

import sys

import django

django.setup()

from django.core.management import call_command  # noqa: E402

from runs.actions.files import FileWrite  # noqa: E402
from runs.actions.ledger import LedgerTransfer  # noqa: E402


def do_nothing(self, args, key, ctx) -> None:
    pass


BROKEN = {"in-band": (FileWrite, "undo"), "compensating": (LedgerTransfer, "compensate")}

if __name__ == "__main__":
    action, rollback = BROKEN[sys.argv[1]]
    setattr(action, rollback, do_nothing)
    call_command("rehearse_rollback")
