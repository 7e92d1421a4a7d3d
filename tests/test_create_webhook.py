"""``manage.py create_webhook``: adds a project's endpoint and prints its secret, the
only time it is shown; wrong fields are refused, naming each, and nothing is added."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from runs.models import WebhookEndpoint

URL = "https://bots.example.com/oversight"


def create(**options) -> str:
    out = StringIO()
    call_command("create_webhook", stdout=out, **options)
    return out.getvalue().strip()


def test_it_adds_the_endpoint_and_prints_its_secret_once(project):
    secret = create(project="acme", name="Teams bot", url=URL, events="operation.waiting, decided")

    endpoint = WebhookEndpoint.objects.get()
    assert (endpoint.project, endpoint.name, endpoint.url, endpoint.active) == (
        project,
        "Teams bot",
        URL,
        True,
    )
    assert endpoint.events == ["operation.waiting", "decided"]
    assert secret == endpoint.secret


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"url": "ftp://bots.example.com/x", "events": "decided"}, r"must be an http\(s\) URL"),
        ({"url": "https://me:pw@bots.example.com/", "events": "decided"}, "no user or password"),
        ({"url": URL, "events": "decided,approved"}, "events: one or more of operation.waiting"),
        ({"url": URL, "events": " , "}, "events: one or more of"),
    ],
)
def test_wrong_fields_are_refused_and_nothing_is_added(project, options, said):
    with pytest.raises(CommandError, match=said):
        create(project="acme", name="Teams bot", **options)
    assert not WebhookEndpoint.objects.exists()


def test_an_unknown_project_is_refused(db):
    with pytest.raises(CommandError, match="no project 'nope'"):
        create(project="nope", name="Teams bot", url=URL, events="decided")
