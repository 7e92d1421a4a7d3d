"""Django's async-safety check is on in every test but the browser tests, whose
Playwright keeps an event loop running in the test's thread: a synchronous query inside
an event loop (a long-poll's view is served on one) fails in the suite as it fails in
production, whichever tests ran before in the same process.

The browser tests' conftest is imported here, as a full run imports it: loading it
must not turn the check off."""

import asyncio
import logging
import os

import pytest
from asgiref.sync import sync_to_async
from asgiref.testing import ApplicationCommunicator
from django.core.exceptions import SynchronousOnlyOperation
from django.db import connection
from django.http import JsonResponse
from django.urls import path

from oversight.asgi import WaitHandler, waits
from runs.models import Project
from tests.browser.conftest import playwright_running
from tests.processes import child_env

UNSAFE = "DJANGO_ALLOW_ASYNC_UNSAFE"


async def counted_in_the_loop(request, pk: int = 0) -> JsonResponse:
    """An async view that queries on the event loop: the mistake the check catches."""
    return JsonResponse({"projects": Project.objects.count()})


async def counted_in_a_thread(request, pk: int = 0) -> JsonResponse:
    """The same view done right, as ``runs.api``'s are: the query in a thread."""
    return JsonResponse({"projects": await sync_to_async(Project.objects.count)()})


# Paths of the long-polls, so that a ``?wait=`` read goes where an agent's does.
urlpatterns = [
    path("api/v1/events", counted_in_the_loop),
    path("api/v1/operations/<int:pk>", counted_in_a_thread),
]


def long_poll(url_path: str) -> tuple[int, bytes]:
    """The status and body of ``GET url_path?wait=5`` answered by the production
    server's handler of long-polls (``oversight.asgi.WaitHandler``), on an event loop."""
    scope = {
        "type": "http",
        "method": "GET",
        "path": url_path,
        "query_string": b"wait=5",
        "headers": [(b"host", b"testserver")],
    }
    assert waits(scope)

    async def exchange() -> tuple[int, bytes]:
        server = ApplicationCommunicator(WaitHandler(), scope)
        await server.send_input({"type": "http.request", "body": b""})
        start = await server.receive_output(timeout=30)
        body = await server.receive_output(timeout=30)
        await server.wait(timeout=30)
        return start["status"], body["body"]

    return asyncio.run(exchange())


@pytest.mark.django_db
def test_a_query_inside_an_event_loop_is_refused():
    async def count() -> int:
        return Project.objects.count()

    assert UNSAFE not in os.environ
    with pytest.raises(SynchronousOnlyOperation):
        asyncio.run(count())


@pytest.mark.urls(__name__)
@pytest.mark.django_db(transaction=True)
def test_a_long_poll_view_querying_on_its_event_loop_fails(caplog):
    Project.objects.create(slug="acme", name="Acme")
    with caplog.at_level(logging.ERROR, logger="django.request"):
        status, _ = long_poll("/api/v1/events")

    assert status == 500
    errors = [record.exc_info[0] for record in caplog.records if record.name == "django.request"]
    assert errors == [SynchronousOnlyOperation]


@pytest.mark.urls(__name__)
@pytest.mark.django_db(transaction=True)
def test_a_long_poll_view_querying_in_a_thread_answers():
    Project.objects.create(slug="acme", name="Acme")
    assert long_poll("/api/v1/operations/1") == (200, b'{"projects": 1}')


def test_child_processes_run_with_the_check_on_even_when_a_browser_test_starts_them():
    assert UNSAFE not in child_env()
    with playwright_running():
        assert os.environ[UNSAFE] == "true"
        assert UNSAFE not in child_env()


@pytest.mark.django_db
def test_the_check_is_off_only_while_playwright_runs():
    with playwright_running():
        # Playwright's loop runs in this thread: the browser tests' own queries.
        asyncio.get_running_loop()
        try:
            assert Project.objects.count() == 0
        finally:
            # While a loop runs, Django gives the thread a connection of its own, out of
            # reach once the loop has stopped: closed now, or the database stays in use.
            connection.close()
    assert UNSAFE not in os.environ
    assert UNSAFE not in child_env()
