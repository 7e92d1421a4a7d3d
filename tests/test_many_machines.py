"""Many machines without a shared disk (#39 item 5), rehearsed with real processes: two
web processes and three workers, each with a var directory and a workspace of its own,
sharing only the PostgreSQL database and an S3-compatible object store (moto's, on
loopback). An agent, speaking to either web process in turn as a load balancer would
send it, proposes transfers and HTTP calls (half of them to a target that takes two
seconds) and uploads artifacts; a reviewer approves. Midway one worker is killed with
SIGKILL, likely inside an effect, and one web process is restarted while the agent
goes on. At the end: every effect happened once, every artifact reads back whole from
both web processes, and ``check_invariants`` and ``verify_audit_chain`` pass."""

import contextlib
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from decimal import Decimal

import pytest
from django.db import connection

from oversight_client import Oversight
from runs.models import Account, Checkpoint, LedgerEntry, Operation
from runs.services.decisions import decide
from runs.services.tokens import issue_token
from tests.processes import ROOT, child_env, free_port, manage, wait_until
from tests.test_object_store import PREFIX, bucket, s3_server  # noqa: F401 (fixtures)

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="machines share a PostgreSQL database"
    ),
]
ROUNDS = 12
ENDED = {"committed", "precondition_failed", "compensated", "alerted", "failed"}


class Machine:
    """A process of its own, with its own var directory and workspace."""

    def __init__(self, folder, store: str, *args: str) -> None:
        self.name, self.folder, self.store, self.args = folder.name, folder, store, args
        folder.mkdir(parents=True, exist_ok=True)
        self.log = folder / "process.log"
        self.process = self.start()

    def start(self) -> subprocess.Popen:
        """``manage.py ARGS`` in a process group of its own: a web process forks its
        server's processes, which a kill must reach too."""
        with self.log.open("a") as log:
            return subprocess.Popen(
                [sys.executable, "manage.py", *self.args],
                cwd=ROOT,
                env={
                    **child_env(),
                    "OVERSIGHT_VAR_DIR": str(self.folder / "var"),
                    "OVERSIGHT_WORKSPACE": str(self.folder / "workspace"),
                    "OVERSIGHT_TEST_ARTIFACT_STORE": self.store,
                },
                stdout=log,
                stderr=log,
                start_new_session=True,
            )

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def restart(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)
        self.process = self.start()


class Web(Machine):
    """``serve``, as in production: one process of four threads."""

    def __init__(self, folder, store: str) -> None:
        self.port = free_port()
        bind = f"127.0.0.1:{self.port}"
        serve = ("serve", "--bind", bind, "--processes", "1", "--threads", "4")
        super().__init__(folder, store, *serve)
        self.url = f"http://{bind}"


@pytest.fixture
def machines(tmp_path):
    started: list[Machine] = []
    yield started
    for machine in started:
        with contextlib.suppress(ProcessLookupError):
            machine.kill()


def answers(web: Web) -> bool:
    """Whether the web process answers HTTP (any status: /healthz may say degraded)."""
    try:
        urllib.request.urlopen(f"{web.url}/healthz?scope=web", timeout=5).close()
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
    return True


def holding_an_effect(workers: list[Machine]) -> Machine | None:
    """A worker carrying out an effect now, by the lease of an operation in flight."""
    owners = Operation.objects.filter(status="in_flight").values_list("lease_owner", flat=True)
    return next((w for w in workers for owner in owners if owner == w.name), None)


def test_two_web_processes_and_three_workers_share_only_the_database_and_the_store(
    tmp_path,
    machines,
    bucket,  # noqa: F811
    project,
    reviewer,
    owner,
    accounts,
    target,
):
    client, name = bucket
    store = (
        f"s3://{name}/{PREFIX}?endpoint_url={client.meta.endpoint_url}"
        "&region=us-east-1&addressing_style=path"
    )
    for n in (1, 2):
        machines.append(Web(tmp_path / f"web-{n}", store))
    for name in ("worker-1", "worker-2", "worker-3"):
        machines.append(
            Machine(tmp_path / name, store, "runworker", f"--name={name}", "--lease-seconds", "2")
        )
    webs, workers = machines[:2], machines[2:]
    for web in webs:
        wait_until(lambda web=web: answers(web), message=f"{web.url} answering")
    _, token = issue_token(project=project, name="agent", issued_by=owner, owner_username="owner")
    agents = [Oversight(web.url, token, backoff=0.5) for web in webs]

    session = agents[0].open_session(title="Many machines", agent="rehearsal")
    uploaded: dict[str, bytes] = {}
    for n in range(ROUNDS):
        agent = agents[n % 2]  # The load balancer's choice.
        run = agent.start_run(session["id"], goal=f"Round {n}")
        agent.propose(
            run["id"],
            f"pay-{n}",
            "ledger.transfer",
            {"from": "A", "to": "B", "amount": "10.00"},
            rollback_kind="compensating",
        )
        mode = "slow/items" if n % 2 else "items"
        agent.propose(
            run["id"],
            f"put-{n}",
            "http.request",
            {
                "method": "PUT",
                "url": f"{target.base}/{mode}/r{n}",
                "body": {"round": n},
                "verify": {"url": f"{target.base}/items/r{n}", "json": {"round": n}},
            },
            rollback_kind="out_of_band",
        )
        content = f"report of round {n}\n".encode() * 100
        uploaded[agent.upload_artifact(run["id"], f"report-{n}.txt", content)["sha256"]] = content
        for operation in Operation.objects.filter(status="proposed"):
            decide(
                operation=operation,
                reviewer=reviewer,
                kind="approve",
                arguments_hash=operation.arguments_hash,
            )
        if n == 5:  # Its PUT takes two seconds: a worker is inside it.
            killed = wait_until(lambda: holding_an_effect(workers), message="an effect in flight")
            killed.kill()
        if n == 7:
            webs[1].restart()

    wait_until(
        lambda: set(Operation.objects.values_list("status", flat=True)) <= ENDED,
        timeout=180,
        message="every operation ended",
    )
    assert set(Operation.objects.values_list("status", flat=True)) == {"committed"}
    # What the killed worker held was taken over by another, past its lease.
    taken_over = Checkpoint.objects.filter(event="operation.lease_taken_over")
    assert killed.name in " ".join(taken_over.values_list("reason", flat=True))
    assert Operation.objects.count() == 2 * ROUNDS
    for operation in Operation.objects.filter(action="http.request"):
        assert target.applied[operation.idempotency_key] == 1, operation.call_id
    assert LedgerEntry.objects.count() == ROUNDS
    assert Account.objects.get(name="A").balance == Decimal("5000.00") - 10 * ROUNDS
    for web in webs:
        reader = Oversight(web.url, token)
        for sha256, content in uploaded.items():
            assert reader.fetch_artifact(sha256) == content
    for check in ("check_invariants", "verify_audit_chain"):
        done = manage(check, OVERSIGHT_TEST_ARTIFACT_STORE=store)
        assert done.returncode == 0, done.stderr
