"""The production server's application (``oversight.asgi``) hands a request to Django
only once its body is whole: a client that leaves half-way has sent no request.

The server's own timing and limits on bodies are tested on a running server
(tests/test_production_server.py); this is the application alone, in this process, so
that the end of a request that was never handed on can be awaited."""

import asyncio

import pytest
from asgiref.testing import ApplicationCommunicator

from oversight.asgi import Oversight
from runs.models import Session

pytestmark = pytest.mark.django_db(transaction=True)  # Its thread must see the token.


def sent(app: Oversight, token: str, *messages: dict) -> list[dict]:
    """What ``app`` answers to an agent's POST of a session declaring a body of 100
    bytes, then ``messages`` from its client, once it has finished with it."""
    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/v1/sessions",
        "query_string": b"",
        "headers": [
            (b"host", b"localhost"),
            (b"authorization", f"Bearer {token}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", b"100"),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }

    async def exchange() -> list[dict]:
        client = ApplicationCommunicator(app, scope)
        for message in messages:
            await client.send_input(message)
        await client.wait(timeout=30)
        answer = []
        while not await client.receive_nothing():
            answer.append(await client.receive_output())
        return answer

    return asyncio.run(exchange())


def test_a_body_its_client_cut_short_is_not_acted_on(agent_token):
    """Half a body may still parse (here a session's title, short of the 100 bytes its
    client declared): handed on, it opened a session for a client no longer there."""
    app = Oversight(threads=1)
    whole = b'{"title": "Whole"}'.ljust(100)
    answer = sent(app, agent_token.plain, {"type": "http.request", "body": whole})
    assert answer[0]["status"] == 201  # The same request, whole, opens its session.
    cut_short = {"type": "http.request", "body": b'{"title": "Cut short"}', "more_body": True}
    answer = sent(app, agent_token.plain, cut_short, {"type": "http.disconnect"})
    assert answer == []
    assert list(Session.objects.values_list("title", flat=True)) == ["Whole"]
