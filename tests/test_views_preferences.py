import re

import pytest
from django.test import Client

from runs.engine.notifications import _claim
from runs.forms import PreferencesForm
from runs.models import Preferences


def zones_shown(page: str) -> set[str]:
    """The time zone abbreviation of every time on the page (the hover title)."""
    return set(re.findall(r'<time datetime="[^"]+" title="[^"]+ (\w+)">', page))


@pytest.fixture
def as_reviewer(client, reviewer) -> Client:
    client.force_login(reviewer)
    return client


def test_anonymous_is_sent_to_login(client):
    response = client.get("/account/")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/account/"


def test_preferences_page_offers_the_time_zones(as_reviewer):
    response = as_reviewer.get("/account/")
    assert response.status_code == 200
    assert '<option value="Asia/Tokyo">Asia/Tokyo</option>' in response.text


def test_times_are_shown_in_the_chosen_time_zone(as_reviewer, reviewer, run):
    assert zones_shown(as_reviewer.get(f"/runs/{run.pk}/").text) == {"UTC"}

    response = as_reviewer.post("/account/", {"time_zone": "Asia/Tokyo"}, follow=True)

    assert response.redirect_chain == [("/account/", 302)]
    assert "Preferences saved." in response.text
    assert '<option value="Asia/Tokyo" selected>' in response.text
    assert Preferences.objects.get(user=reviewer).time_zone == "Asia/Tokyo"
    page = as_reviewer.get(f"/runs/{run.pk}/").text
    assert zones_shown(page) == {"JST"}
    assert re.search(r'<time datetime="[^"]+\+09:00"', page)


def test_time_zone_is_kept_for_the_next_sign_in(client, reviewer, run):
    client.force_login(reviewer)
    client.post("/account/", {"time_zone": "Asia/Tokyo"})
    client.logout()

    client.force_login(reviewer)

    assert zones_shown(client.get(f"/runs/{run.pk}/").text) == {"JST"}


def test_unknown_time_zone_is_refused(as_reviewer, reviewer):
    response = as_reviewer.post("/account/", {"time_zone": "Mars/Olympus_Mons"})

    assert "Preferences saved." not in response.text
    assert "Select a valid choice. Mars/Olympus_Mons is not one of the available" in response.text
    # The select points at its error with aria-describedby; the error must be there.
    assert 'aria-describedby="id_time_zone_error"' in response.text
    assert 'id="id_time_zone_error"' in response.text
    assert not Preferences.objects.filter(user=reviewer, time_zone="Mars/Olympus_Mons").exists()


def dangling(page: str) -> set[str]:
    """The ids that aria-describedby and aria-labelledby name but the page lacks."""
    ids = set(re.findall(r'\sid="([^"]+)"', page))
    named = re.findall(r'aria-(?:describedby|labelledby)="([^"]+)"', page)
    return {ref for refs in named for ref in refs.split()} - ids


def test_the_account_page_describes_its_checkbox_with_its_help_text(as_reviewer):
    page = as_reviewer.get("/account/").text
    assert dangling(page) == set()
    assert re.search(r'<span id="id_notify_pending_helptext">[^<]+</span>', page)


def test_saving_preferences_keeps_a_workers_claim_on_the_reviewers_email(reviewer):
    """The page reads the row, a worker claims the reviewer's next email meanwhile, then
    the page saves: the claim stands, so no second worker sends the same email."""
    form = PreferencesForm(
        {"time_zone": "Asia/Tokyo", "notify_pending": "on", "shortcuts": "on"},
        instance=Preferences.of(reviewer),
    )
    assert _claim(Preferences.of(reviewer), None) is not None  # A worker, meanwhile.
    assert form.is_valid()
    form.save()
    saved = Preferences.objects.get(user=reviewer)
    assert saved.time_zone == "Asia/Tokyo"
    assert saved.notify_claimed_until is not None
    assert _claim(saved, None) is None  # Another worker finds the email taken.
