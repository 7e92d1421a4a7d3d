"""A preview runs in a reviewer's request on input the agent chose, so it has a budget
(#35 items 3 and 4). A file's diff takes a bounded number of steps, is made once per
(file, content) pair and reused by the page shown again and by the decision, and says
"too large to show as a diff" beyond its budget; the file of 80,000 short lines after
which every page and decision re-diffed for 30-46 s of CPU now costs a fraction of a
second. An HTTP preview waits a few seconds and reads a mebibyte at most, however patient
the workers may be: a target that never answers, or answers megabytes, holds a page no
longer. CPU is measured with ``time.process_time``, in-process; the bounds are generous."""

import contextlib
import random
import time
from pathlib import Path

import pytest

import runs.actions.previews
from runs.actions.base import PREVIEW_BUDGET
from runs.actions.files import workspace_of
from runs.actions.previews import DIFF_BUDGET, MAX_COMPARED, REMEMBERED
from runs.canonical import sha256_hex
from runs.models import Decision
from tests.helpers import page_of, post_decision
from tests.test_target_budgets import MARGIN, WAYS, start, stop

CPU_SECONDS = 5.0  # a page and a decision together; each took 30-46 s before
SHORT_LINES = "ok\n" * 80_000  # what one innocuous approved write left in the file


def write(propose, path: str, content: str, expected: str | None, call_id: str = "w-1"):
    arguments = {"path": path, "content": content, "expected_sha256": expected}
    return propose(call_id, action="file.write", arguments=arguments, rollback_kind="in_band")


def in_workspace(project, path: str, text: str) -> str:
    """Put ``text`` at ``path`` in the project's workspace; its sha256."""
    target = workspace_of(project) / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    return sha256_hex(target.read_bytes())


@pytest.fixture
def short_lines_file(project) -> str:
    """``log.txt`` holding 80,000 short lines; its sha256."""
    return in_workspace(project, "log.txt", SHORT_LINES)


def test_after_80000_short_lines_the_page_and_the_decision_take_little_cpu(
    client, reviewer, propose, short_lines_file
):
    """The issue's case: the next proposal replaces the file with 198 lines, and its
    page shows the diff at once, as does the decision's check."""
    op = write(propose, "log.txt", "ok\nfailed\n" * 99, short_lines_file)
    client.force_login(reviewer)
    started = time.process_time()

    page = client.get(page_of(op))
    decided = post_decision(client, op)  # Which opens the page again, then decides.

    assert time.process_time() - started < CPU_SECONDS
    assert page.status_code == 200
    assert "these lines change." in page.text
    assert '<span class="add">+ failed</span>' in page.text
    assert decided.status_code == 302
    assert Decision.objects.filter(operation=op, kind=Decision.Kind.APPROVE).exists()


def test_a_change_beyond_the_budget_is_too_large_to_show_as_a_diff(
    client, reviewer, propose, project
):
    """80,000 lines of a few values each, all shuffled: the shortest diff between them
    costs more steps than a preview may take. Both versions are described, the lines
    between where they start and end alike are named, and the new ones shown."""
    shuffled = random.Random(35)
    old = ["# log", *(str(shuffled.randrange(40)) for _ in range(79_999))]
    new = ["# log", *(str(shuffled.randrange(40)) for _ in range(80_000))]
    old[1], new[1], old[-1], new[-1] = "from", "to", "ended", "ends"
    before = in_workspace(project, "log.txt", "\n".join(old) + "\n")
    op = write(propose, "log.txt", "\n".join(new) + "\n", before)
    client.force_login(reviewer)
    started = time.process_time()

    page = client.get(page_of(op)).text

    assert time.process_time() - started < CPU_SECONDS
    sha_now, sha_after = before[:12], sha256_hex(("\n".join(new) + "\n").encode())[:12]
    assert "too large to show as a diff (80,000 lines" in page
    assert f"sha256 {sha_now}… now; 80,001 lines" in page
    assert f"sha256 {sha_after}… after): lines 2 to 80,000 (79,999 lines)" in page
    assert "are replaced by 80,000 lines, which read:" in page
    assert '<span class="hunk">@@ -2,79999 +2,80000 @@</span><span class="add">+ to</span>' in page
    assert "79,601 more lines not shown." in page


def test_a_diff_is_made_once_for_the_page_shown_again_and_the_decision(
    client, reviewer, propose, short_lines_file, monkeypatch
):
    made = []
    diff = runs.actions.previews.unified_diff

    def counted(*args, **kwargs):
        made.append(args)
        return diff(*args, **kwargs)

    monkeypatch.setattr(runs.actions.previews, "unified_diff", counted)
    op = write(propose, "log.txt", "ok\nonce\n" * 99, short_lines_file)
    client.force_login(reviewer)

    assert client.get(page_of(op)).status_code == 200
    assert post_decision(client, op).status_code == 302

    assert len(made) == 1


def test_a_large_file_changed_in_one_line_is_a_diff(propose, project, client, reviewer):
    """Nearly a megabyte: the lines both versions share are set aside in linear time, so
    a small change to a large file is shown as what it is."""
    lines = [f"line {n}" for n in range(80_000)]
    before = in_workspace(project, "big.txt", "\n".join(lines) + "\n")
    lines[40_000] = "line forty thousand"
    op = write(propose, "big.txt", "\n".join(lines) + "\n", before)
    client.force_login(reviewer)

    page = client.get(page_of(op)).text

    assert "these lines change." in page
    assert (
        '<span class="hunk">@@ -39998,7 +39998,7 @@</span><span class="same">  line 39997</span>'
    ) in page
    assert (
        '<span class="del">- line 40000</span><span class="add">+ line forty thousand</span>'
        in (page)
    )


def stalled(handler) -> None:
    """A 200 announcing 5 MB, 2 MiB of which come at once, the rest never."""
    handler.send_response(200)
    handler.send_header("Content-Length", str(5 * 10**6))
    handler.end_headers()
    handler.wfile.write(b"x" * 2**21)
    handler.server.stop.wait()


@pytest.fixture
def patient(request, settings, monkeypatch):
    """A target answering GETs as ``request.param`` says, on an installation whose
    workers may wait 30 s and read 10 MB of an answer."""
    monkeypatch.setitem(WAYS, "stalled", stalled)
    server = start(request.param, settings)
    server.picks = lambda handler: handler.command == "GET"
    settings.OVERSIGHT_HTTP_DEADLINE = 30
    settings.OVERSIGHT_HTTP_MAX_RESPONSE_BYTES = 10 * 10**6
    yield server
    with contextlib.suppress(OSError):
        stop(server)


def put(propose, server):
    arguments = {
        "method": "PUT",
        "url": f"{server.base}/items/x",
        "verify": {"url": f"{server.base}/items/x"},
    }
    return propose("put", action="http.request", arguments=arguments, rollback_kind="out_of_band")


@pytest.mark.parametrize(
    ("patient", "said"),
    [
        ("silent", f"the target did not finish answering within {PREVIEW_BUDGET.seconds:g} s"),
        ("stalled", f"the answer is too large (over {PREVIEW_BUDGET.max_bytes:,} bytes)"),
    ],
    indirect=["patient"],
)
def test_an_http_preview_holds_a_page_a_few_seconds_at_most(
    client, reviewer, propose, patient, said
):
    """A target that never answers holds the page for the preview's deadline, not the
    workers' 30 s; one answering 5 MB is shown as too large once the preview's mebibyte
    is read, without waiting for the rest (which never comes, so reading past the cap
    would have waited for the deadline instead)."""
    op = put(propose, patient)
    client.force_login(reviewer)
    started = time.monotonic()

    page = client.get(page_of(op))

    assert time.monotonic() - started < PREVIEW_BUDGET.seconds + MARGIN
    assert page.status_code == 200
    assert f"GET {patient.base}/items/x: {said}." in page.text


def test_the_security_page_says_what_previews_may_cost():
    page = " ".join((Path(__file__).parents[1] / "docs/operating/security.md").read_text().split())
    assert f"diff takes at most {DIFF_BUDGET:,} steps" in page
    assert f"(the last {REMEMBERED} are kept)" in page
    assert f"A current file over {MAX_COMPARED // 2**20} MiB is described" in page
    assert f"gets {PREVIEW_BUDGET.seconds} seconds in all and 1 MiB of the answer" in page
    assert PREVIEW_BUDGET.max_bytes == 2**20
