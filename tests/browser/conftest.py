"""Browser tests: Debian's chromium driven by Playwright against pytest-django's live
server (a transactional database that the server thread and the test share).

Never run ``playwright install``: the browser is the system's chromium."""

import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import Page, Playwright, expect, sync_playwright

from runs.models import HumanRequest
from runs.services import requests as service
from tests.conftest import AGENT

CHROMIUM = shutil.which("chromium")
SKIP_REASON = "browser tests need Debian's chromium on PATH (apt-get install -y chromium)"
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 10_000
HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
SCREENSHOTS = REPO_ROOT / "test-artifacts" / "screenshots"
# axe-core from the npm registry (bin/setup-browser installs package-lock.json's).
AXE = REPO_ROOT / "node_modules" / "axe-core" / "axe.min.js"
WCAG = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
VIOLATIONS = """async (tags) => {
  const found = await axe.run(document, {runOnly: {type: "tag", values: tags}});
  return found.violations.map(v =>
    `${v.id} (${v.impact}): ${v.help} at ${v.nodes.map(n => n.target.join(" ")).join(", ")}`);
}"""
PASSWORD = "pw"
# What the test agent asks with each kind of request (``ask``).
REQUEST_KINDS = {
    "question": {"kind": "question"},
    "sign_off": {},
    "choice": {"choices": ["eu-west", "us-east", "ap-south"]},
    "data": {"answer_schema": {"type": "string", "title": "Release name"}},
}
# A paragraph of a request's context: a few of them make a page longer than the window.
LONG = "The plan, at length: each step, its owner, what could go wrong and how we notice. "

expect.set_options(timeout=TIMEOUT_MS)


def pytest_collection_modifyitems(config, items):
    if CHROMIUM:
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(skip)


@pytest.fixture(scope="package")
def browser():
    """One chromium for the browser tests, closed after the last of them (pytest ends a
    package's fixtures before a test of another package runs, whatever the order):
    Playwright's sync API keeps an event loop running in this thread while it is open,
    and the tests after these (the async client's) run event loops of their own."""
    if not CHROMIUM:
        pytest.skip(SKIP_REASON)
    with playwright_running() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        yield browser
        browser.close()


@contextmanager
def playwright_running() -> Iterator[Playwright]:
    """Playwright's sync API, with Django's async-safety check off while it runs and
    only then. It keeps an event loop running in this thread, and Django would refuse
    the test's own queries (and its database's flush) as "async unsafe"; anywhere else
    the check must stay on, as in production, where the long-polls are served on an
    event loop. The variable is set as Playwright starts and restored (or removed) once
    it has stopped: no other test, nor a child process one starts, runs without it."""
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        with sync_playwright() as playwright:
            yield playwright


@pytest.fixture
def page(browser, live_server):
    """A fresh browser context (no cookies) per test, pointed at the live server, with
    axe-core in every document (an init script: the pages' CSP does not apply to it).
    The page the test ends on is checked for accessibility, as every screenshot is."""
    assert AXE.exists(), f"{AXE} is missing: run bin/setup-browser (it needs npm)"
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    context.add_init_script(path=str(AXE))
    page = context.new_page()
    yield page
    if page.url.startswith(live_server.url):
        assert_accessible(page)
    context.close()


def assert_accessible(page: Page) -> None:
    """axe-core finds no WCAG 2.1 A/AA violation on the page as it is now."""
    found = page.evaluate(VIOLATIONS, WCAG)
    assert found == [], f"{page.url}: " + "; ".join(found)


def sign_in(page: Page, user, password: str = PASSWORD) -> None:
    """Sign in through the login form, as a person would."""
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(user.get_username())
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()


def arrived(page: Page, url: str | re.Pattern) -> None:
    """The page is at ``url`` and its scripts run. The URL changes as soon as the next
    document is committed, before keys.js listens: a key pressed in between is lost,
    as a person's would be, so a test waits for the load before its next key."""
    expect(page).to_have_url(url)
    page.wait_for_load_state()


def screenshot(page: Page, name: str) -> Path:
    """Save a full-page PNG under test-artifacts/screenshots/ (git-ignored), once the
    page passes axe-core's checks."""
    assert_accessible(page)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{re.sub(r'[^A-Za-z0-9_.-]+', '-', name)}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


@pytest.fixture
def ask(run, agent_token):
    """Ask a request of ``kind`` (one of ``REQUEST_KINDS``) on ``run``, as the test agent."""

    def _ask(kind: str, prompt: str, context: str = "") -> HumanRequest:
        asked = service.ask(
            run=run,
            prompt=prompt,
            context=context,
            actor=AGENT,
            token=agent_token,
            **REQUEST_KINDS[kind],
        )
        return asked[0]

    return _ask


@pytest.fixture
def long_sign_off(ask) -> HumanRequest:
    """A sign-off whose context runs over several windows, at 1280 by 800 as on a phone:
    out of the page's top, its answer is in reach through the decision bar alone."""
    return ask("sign_off", "Sign off the plan?", context="\n\n".join([LONG * 4] * 12))
