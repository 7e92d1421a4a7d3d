"""Assertions and shortcuts shared by the service tests."""

import os
import re
import runpy
from contextlib import contextmanager
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client

import oversight
from runs import artifact_store
from runs.engine.worker import Worker
from runs.models import Checkpoint, Decision, HumanRequest, Message, Operation, Run
from runs.services.decisions import decide


def blob(artifact) -> Path:
    """Where the local artifact store keeps ``artifact``'s bytes (an ``Artifact`` or a
    sha256): for tests that read, damage or remove them behind Oversight's back."""
    sha256 = getattr(artifact, "sha256", artifact)
    return Path(artifact_store.storage().path(artifact_store.name_of(sha256)))


def stored() -> tuple:
    """Everything a refused action must leave exactly as it was."""
    return (
        list(Run.objects.order_by("pk").values_list("pk", "status", "version", "outcome")),
        list(Operation.objects.order_by("pk").values_list("pk", "status", "version")),
        list(HumanRequest.objects.order_by("pk").values_list("pk", "status", "version")),
        Checkpoint.objects.count(),
        Decision.objects.count(),
        Message.objects.count(),
    )


@contextmanager
def refused(error: type[Exception]):
    """Expect ``error`` and that nothing at all was written."""
    before = stored()
    with pytest.raises(error):
        yield
    assert stored() == before


def steps_since(run: Run, version: int) -> list[tuple[str, str, str]]:
    """The checkpoints written after ``version``: (event, from, to) in order."""
    return list(
        Checkpoint.objects.filter(run=run, seq__gt=version)
        .order_by("seq")
        .values_list("event", "from_status", "to_status")
    )


def decide_on(op: Operation, reviewer, kind: str = Decision.Kind.APPROVE, **kwargs) -> Decision:
    """Decide as a reviewer would: on the arguments the operation has right now."""
    op.refresh_from_db()
    kwargs.setdefault("arguments_hash", op.arguments_hash)
    decision = decide(operation=op, reviewer=reviewer, kind=kind, **kwargs)
    op.refresh_from_db()
    return decision


def drained(op: Operation) -> Operation:
    """Let a worker do everything that is ready, then read ``op`` again."""
    Worker(name="w1").drain()
    op.refresh_from_db()
    return op


def invariants_hold() -> bool:
    out = StringIO()
    call_command("check_invariants", stdout=out, stderr=StringIO())
    return out.getvalue().strip() == "all invariants hold"


def project_settings(monkeypatch, **environ: str) -> dict:
    """oversight/settings.py run afresh in this environment (Django's settings untouched),
    with the mail and HTTP variables at their defaults unless given."""
    for name in list(os.environ):
        if name.startswith(("OVERSIGHT_EMAIL_", "OVERSIGHT_HTTP_")):
            monkeypatch.delenv(name)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(Path(oversight.__file__).parent / "settings.py"))


def sign_in(client, username: str, password: str, **extra):
    """Post the sign-in form as a browser does, through the sign-in throttle (the test
    client's ``login()`` skips the form and is refused by it); ``extra`` goes into the
    request, e.g. ``REMOTE_ADDR``. A success answers with a redirect."""
    return client.post("/accounts/login/", {"username": username, "password": password}, **extra)


def page_of(op: Operation) -> str:
    return f"/operations/{op.pk}/"


def post_decision(client: Client, op: Operation, kind: str = "approve", **fields):
    """Submit a decision form as the page renders it: bound to the arguments and the
    preview of the effect shown (for an edit, the preview of the edit, which the page
    shows before the edit is approved)."""
    op.refresh_from_db()
    if kind == Decision.Kind.EDIT:
        seen = previewed(client, op, fields.get("arguments", ""))
    else:
        seen = shown(client, op)
    data = {"kind": kind, "arguments_hash": op.arguments_hash, **seen, **fields}
    return client.post(f"/operations/{op.pk}/decide/", data)


def shown(client: Client, op: Operation) -> dict:
    """The hash of the preview the operation's page shows, as its forms carry it."""
    return _preview_hash_in(client.get(page_of(op)).text)


def previewed(client: Client, op: Operation, arguments: str) -> dict:
    """The hash of the preview of an edit, as the form that approves the edit carries
    it once the edit is previewed."""
    data = {"arguments_hash": op.arguments_hash, "arguments": arguments}
    return _preview_hash_in(client.post(f"{page_of(op)}edit/", data).text)


def _preview_hash_in(page: str) -> dict:
    form = re.search(r'name="preview_hash" value="([0-9a-f]*)"', page)
    return {"preview_hash": form[1] if form else ""}
