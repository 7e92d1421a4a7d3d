"""The Django admin on the demo data: every page opens for a superuser, history and
state-machine rows cannot be added or edited there, and staff only get in."""

from io import StringIO

import pytest
from axes.models import AccessAttempt, AccessFailureLog, AccessLog
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.urls import reverse

from runs.actors import Actor
from runs.models import (
    AdminCheckpoint,
    Alert,
    AlertDelivery,
    Artifact,
    Checkpoint,
    CheckpointArtifact,
    Decision,
    Message,
    Operation,
    ProviderIdentity,
    Run,
    Session,
)
from runs.services.admin_record import record_admin_act

REGISTERED = [pytest.param(model, id=model._meta.label) for model in admin.site._registry]
READ_ONLY = [
    AdminCheckpoint,
    Checkpoint,
    CheckpointArtifact,
    Run,
    Operation,
    Decision,
    Message,
    Session,
    Artifact,
    Alert,
    AlertDelivery,
]


@pytest.fixture
def demo(db, settings, tmp_path, monkeypatch):
    settings.OVERSIGHT_ARTIFACT_ROOT = tmp_path
    monkeypatch.setenv("OVERSIGHT_DEMO_PASSWORD", "demo-password-for-tests")
    call_command("seed_demo", stdout=StringIO())
    # The demo has no alert; the alert pages need one, with a delivery.
    run = Run.objects.get(goal__startswith="Migrate")
    alert = Alert.objects.create(project=run.project, run=run, summary="Webhook failed")
    AlertDelivery.objects.create(alert=alert, channel="email", target="ops@example.com")
    # Nor has it a failed sign-in (the throttle's pages list them), nor the logs the
    # throttle keeps none of here but whose pages exist.
    AccessAttempt.objects.create(
        username="nobody", ip_address="127.0.0.1", failures_since_start=1, get_data="", post_data=""
    )
    AccessLog.objects.create(username="nobody", ip_address="127.0.0.1")
    AccessFailureLog.objects.create(username="nobody", ip_address="127.0.0.1")
    # Nor anyone who signed in through a single sign-on provider.
    someone = get_user_model().objects.order_by("pk").first()
    ProviderIdentity.objects.create(user=someone, issuer="https://id.example.com", subject="1")
    # Nor an act on the installation (a configuration applied, workers paused).
    record_admin_act("config.applied", Actor.of_user(someone), detail={"sha256": "0" * 64})
    return alert


@pytest.fixture
def superuser_client(demo, client):
    client.force_login(get_user_model().objects.get(username="admin", is_superuser=True))
    return client


def admin_url(model, view: str, *args) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)


def row_values(model, pk) -> dict:
    return model._default_manager.filter(pk=pk).values().get()


@pytest.mark.parametrize("model", REGISTERED)
def test_every_admin_page_opens_for_a_superuser(superuser_client, model):
    obj = model._default_manager.order_by("pk").first()
    assert obj is not None, f"the demo data has no {model._meta.verbose_name}"
    assert superuser_client.get(admin_url(model, "changelist")).status_code == 200
    assert superuser_client.get(admin_url(model, "change", obj.pk)).status_code == 200


@pytest.mark.parametrize("model", READ_ONLY, ids=lambda model: model.__name__)
def test_history_cannot_be_added_or_edited_in_the_admin(superuser_client, model):
    obj = model._default_manager.order_by("pk").first()
    before = row_values(model, obj.pk)
    assert superuser_client.get(admin_url(model, "add")).status_code == 403
    tampered = {field: "tampered" for field, value in before.items() if isinstance(value, str)}
    response = superuser_client.post(admin_url(model, "change", obj.pk), tampered)
    assert response.status_code == 403
    assert row_values(model, obj.pk) == before


def test_alert_page_lists_its_deliveries(superuser_client, demo):
    response = superuser_client.get(admin_url(Alert, "change", demo.pk))
    assert response.status_code == 200
    assert b"ops@example.com" in response.content


def test_a_reviewer_without_staff_status_is_sent_to_the_admin_login(demo, client):
    client.force_login(get_user_model().objects.get(username="reviewer", is_staff=False))
    response = client.get("/admin/")
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))
