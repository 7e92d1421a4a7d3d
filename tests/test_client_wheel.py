"""The client as a user gets it: its wheel, built here offline, installed into a fresh
virtual environment without Django, runs an agent against a live server. The agent opens
its session by thread id twice (one session), asks which account to pay from (a
reviewer answers on the request page, in chromium), reads the answer from its feed,
then pays through a supervised tool and is SIGKILLed after the effect, before its
report. Started again, it repeats the call and gets the output instead of paying twice."""

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from django.urls import reverse
from playwright.sync_api import expect, sync_playwright

from runs.models import AgentToken, Operation, Session
from tests.browser.conftest import CHROMIUM, LAUNCH_ARGS, SKIP_REASON, sign_in
from tests.helpers import decide_on
from tests.processes import ROOT, eventually

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not CHROMIUM, reason=SKIP_REASON),
]

AGENT = textwrap.dedent(
    '''
    import json, os, sys
    from pathlib import Path
    from oversight_client import Observed, Oversight

    base, token, notes, phase = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4]
    ovs = Oversight(base, token, timeout=10, backoff=0.05)

    def say(*words):
        print(*words, flush=True)

    session = ovs.open_session(title="Supplier run", external_id="thread-1")
    again = ovs.open_session(title="Supplier run", external_id="thread-1")
    say("session", session["id"], again["id"])
    run = ovs.start_run(session["id"], "Pay the supplier", external_id="thread-1/run")

    def paid(arguments, key):
        lines = notes.read_text().splitlines() if notes.exists() else []
        if any(line.endswith(f"[{key}]") for line in lines):
            return Observed("applied", output={"paid from": arguments["account"]})
        return "absent"

    @ovs.tool(action="supplier.pay", rollback_kind="none", verify=paid, lease_seconds=2)
    def pay(account, *, idempotency_key):
        """Pay the supplier from the chosen account."""
        with notes.open("a") as handle:
            handle.write(f"paid from {account} [{idempotency_key}]\\n")
        if phase == "first":
            os.kill(os.getpid(), 9)  # after the intent and the effect, before the report
        return {"paid from": account}

    if phase == "first":
        asked = ovs.ask(
            run["id"],
            "Which account pays the supplier?",
            choices=["savings", "checking"],
            external_id="which-account",
        )
        say("asked", asked["id"])
        for event in ovs.events(wait=10):
            if event["request"] == asked["id"] and event["event"] == "request.status":
                break
        account = ovs.request(asked["id"])["answer"]["data"]
        say("feed", event["to_status"], account)
    else:
        account = ovs.find_request("which-account")["answer"]["data"]
    say("paid", json.dumps(pay(run["id"], "pay-1", account=account)))
    say("again", json.dumps(pay(run["id"], "pay-1", account=account)))
    '''
)


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A fresh virtual environment with the client's wheel, built and installed offline."""
    where = tmp_path_factory.mktemp("wheel")
    offline = ["--no-index", "--disable-pip-version-check", "-q"]
    build = [sys.executable, "-m", "pip", "wheel", *offline, "--no-deps", "--no-build-isolation"]
    subprocess.run([*build, "-w", str(where), str(ROOT / "client")], check=True, timeout=120)
    (wheel,) = where.glob("oversight_client-0.2.0-py3-none-any.whl")
    subprocess.run([sys.executable, "-m", "venv", str(where / "venv")], check=True, timeout=120)
    python = where / "venv" / "bin" / "python"
    install = [str(python), "-m", "pip", "install", *offline, str(wheel)]
    subprocess.run(install, check=True, timeout=120)
    return python


def agent(python: Path, base: str, token: str, notes: Path, phase: str) -> subprocess.Popen:
    return subprocess.Popen(
        [str(python), "-c", AGENT, base, token, str(notes), phase],
        cwd=notes.parent,  # not the repository: only the installed wheel is importable
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def said(process: subprocess.Popen, first: str) -> str:
    """The rest of the agent's next line, which must start with ``first``."""
    word, _, rest = process.stdout.readline().strip().partition(" ")
    if word != first:
        process.kill()
        raise AssertionError(f"{word} {rest}, not {first}: {process.stderr.read()[-3000:]}")
    return rest


def test_the_venv_has_the_client_and_no_django(venv):
    has_django = subprocess.run([str(venv), "-c", "import django"], capture_output=True)
    assert has_django.returncode == 1 and b"No module named 'django'" in has_django.stderr
    shown = subprocess.run(
        [str(venv), "-c", "import oversight_client as c; print(c.__version__, c.__file__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    version, where = shown.stdout.split()
    assert version == "0.2.0" and "site-packages" in where


def test_an_agent_from_the_wheel_asks_reads_its_feed_and_survives_a_kill(
    venv, live_server, project, owner, reviewer, tmp_path
):
    token = AgentToken.issue(project=project, name="wheel-agent", owner=owner)[1]
    notes = tmp_path / "ledger.txt"
    first = agent(venv, live_server.url, token, notes, "first")
    one, two = said(first, "session").split()
    assert one == two
    request_id = int(said(first, "asked"))

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        page = browser.new_page(base_url=live_server.url)
        sign_in(page, reviewer)
        page.goto(reverse("request", args=[request_id]))
        expect(page.get_by_text("Which account pays the supplier?")).to_be_visible()
        page.get_by_role("button", name="savings").click()
        expect(page.locator("#outcome .status")).to_have_text("Answered")
        browser.close()

    assert said(first, "feed") == "answered savings"
    # The agent proposes just after it says so.
    op = eventually(Operation.objects.filter(call_id="pay-1").first, "the proposal", first)
    assert op.summary == "Pay the supplier from the chosen account."
    decide_on(op, reviewer)
    assert first.wait(timeout=30) == -signal.SIGKILL

    second = agent(venv, live_server.url, token, notes, "second")
    assert said(second, "session") == f"{one} {one}"
    assert json.loads(said(second, "paid")) == {"paid from": "savings"}
    assert json.loads(said(second, "again")) == {"paid from": "savings"}
    assert second.wait(timeout=30) == 0, second.stderr.read()

    assert len(notes.read_text().splitlines()) == 1
    assert Session.objects.filter(external_id="thread-1").count() == 1
    op.refresh_from_db()
    assert (op.status, op.result["output"]) == ("committed", {"paid from": "savings"})
