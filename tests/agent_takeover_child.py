"""The first caller of a supervised tool, as a real process, for tests/test_agent_takeover.py.

``python tests/agent_takeover_child.py BASE RUN_ID --state FOLDER [--deduplicates]``
(the token in ``OVERSIGHT_TOKEN``) calls ``pay`` with call_id ``pay-1``. Its function
says ``FIRING`` and stops the process (SIGSTOP) before the payment lands: paused there,
past its lease, while a second caller takes over. Once woken (SIGCONT), it says what
came of its call: the output, or ``refused: <the error's code>``.

``pay_tool`` is the tool both callers use, over the same ledger file: one line per
payment, each ending with the idempotency key it was made under. With
``deduplicates``, the ledger ignores a key it has seen (as a payment service that
deduplicates on the key would); without, every call pays."""

import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from oversight_client import Oversight, OversightError

PAYMENT = {"invoice": "INV-7", "amount": 45}


def pay_tool(
    ovs: Oversight, folder: Path, *, deduplicates: bool, before: Callable[[], Any] = lambda: None
) -> Callable[..., Any]:
    ledger = folder / "ledger"

    def paid(arguments: dict, key: str) -> str:
        lines = ledger.read_text().splitlines() if ledger.exists() else []
        return "applied" if any(line.endswith(f" {key}") for line in lines) else "absent"

    @ovs.tool(
        action="supplier.pay",
        rollback_kind="out_of_band",
        verify=paid,
        lease_seconds=1,
        deduplicates=deduplicates,
    )
    def pay(invoice: str, amount: int, *, idempotency_key: str) -> dict:
        """Pay a supplier's invoice."""
        before()
        if not (deduplicates and paid({}, idempotency_key) == "applied"):
            with ledger.open("a") as lines:
                lines.write(f"{invoice} {amount} {idempotency_key}\n")
        return {"paid": invoice}

    return pay


def main() -> None:
    base, run_id, _, folder, *options = sys.argv[1:]
    ovs = Oversight(base, os.environ["OVERSIGHT_TOKEN"], timeout=10, retries=3, backoff=0.05)

    def firing() -> None:
        print("FIRING", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)

    pay = pay_tool(ovs, Path(folder), deduplicates="--deduplicates" in options, before=firing)
    try:
        print(json.dumps(pay(int(run_id), "pay-1", **PAYMENT)), flush=True)
    except OversightError as error:
        print(f"refused: {error.code}", flush=True)


if __name__ == "__main__":
    main()
