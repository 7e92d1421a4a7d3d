"""Quiet hours (#36): no email about waiting work reaches a reviewer in the hours they
chose, on their own clock; what waited is in their first email after."""

import zoneinfo
from datetime import date, datetime, time, timedelta

import pytest
from django.test import Client

from runs.clock import db_now
from runs.engine.notifications import notify_reviewers
from runs.models import Preferences
from tests.test_notifications import inbox, listed
from tests.test_views_preferences import dangling

MADRID = zoneinfo.ZoneInfo("Europe/Madrid")
TOKYO = zoneinfo.ZoneInfo("Asia/Tokyo")


def quiet(user, zone: zoneinfo.ZoneInfo, start: str, end: str) -> None:
    Preferences.objects.create(
        user=user,
        time_zone=zone.key,
        quiet_from=time.fromisoformat(start),
        quiet_until=time.fromisoformat(end),
    )


def day_ahead(zone: zoneinfo.ZoneInfo) -> date:
    """A day in ``zone`` after the database's clock: a ``now`` in the past would find
    each email's batch window still open."""
    return (db_now() + timedelta(days=2)).astimezone(zone).date()


def at(day: date, clock: str, zone: zoneinfo.ZoneInfo, days: int = 0) -> datetime:
    """``clock`` on the wall in ``zone``, ``days`` after ``day``."""
    return datetime.combine(day + timedelta(days=days), time.fromisoformat(clock), zone)


def test_no_email_in_quiet_hours_across_midnight_then_one_listing_what_waited(
    propose, reviewer, reviewer2
):
    quiet(reviewer, MADRID, "22:00", "07:00")
    day = day_ahead(MADRID)
    op = propose("call-1")

    assert notify_reviewers(now=at(day, "23:30", MADRID)) == 1  # reviewer2, who set none.
    assert notify_reviewers(now=at(day, "06:59", MADRID, days=1)) == 0
    assert inbox(reviewer) == []

    assert notify_reviewers(now=at(day, "07:05", MADRID, days=1)) == 1
    (email,) = inbox(reviewer)
    assert listed(email) == [op.pk]


def test_quiet_hours_within_a_day(propose, reviewer):
    quiet(reviewer, TOKYO, "12:00", "14:00")
    day = day_ahead(TOKYO)
    before = propose("call-1")
    assert notify_reviewers(now=at(day, "11:30", TOKYO)) == 1  # Not quiet yet.
    during = propose("call-2")

    assert notify_reviewers(now=at(day, "13:00", TOKYO)) == 0
    assert notify_reviewers(now=at(day, "14:00", TOKYO)) == 1  # The end is not quiet.

    first, second = inbox(reviewer)
    assert (listed(first), listed(second)) == ([before.pk], [during.pk])


def test_after_each_quiet_night_the_email_lists_only_what_is_new(propose, reviewer):
    quiet(reviewer, MADRID, "22:00", "07:00")
    day = day_ahead(MADRID)
    first = propose("call-1")
    notify_reviewers(now=at(day, "23:30", MADRID))
    notify_reviewers(now=at(day, "07:05", MADRID, days=1))
    second = propose("call-2")

    assert notify_reviewers(now=at(day, "23:30", MADRID, days=1)) == 0
    assert notify_reviewers(now=at(day, "07:05", MADRID, days=2)) == 1

    morning, next_morning = inbox(reviewer)
    assert (listed(morning), listed(next_morning)) == ([first.pk], [second.pk])


@pytest.fixture
def as_reviewer(client, reviewer) -> Client:
    client.force_login(reviewer)
    return client


def save(client: Client, start: str, end: str):
    fields = {"time_zone": "Europe/Madrid", "notify_pending": "on"}
    return client.post("/account/", {**fields, "quiet_from": start, "quiet_until": end})


def test_the_account_page_sets_quiet_hours(as_reviewer, reviewer):
    response = save(as_reviewer, "22:00", "07:00")

    assert response.status_code == 302
    preferences = Preferences.objects.get(user=reviewer)
    assert (preferences.quiet_from, preferences.quiet_until) == (time(22), time(7))
    page = as_reviewer.get("/account/").text
    assert '<label for="id_quiet_from">Quiet hours from</label>' in page
    assert 'type="time" name="quiet_from" value="22:00"' in page
    assert 'type="time" name="quiet_until" value="07:00"' in page
    assert "Alerts to admins still come at any hour." in page
    assert dangling(page) == set()


@pytest.mark.parametrize(
    ("start", "end", "field", "error"),
    [
        ("22:00", "", "quiet_until", "Give both times, or neither."),
        ("", "07:00", "quiet_from", "Give both times, or neither."),
        ("22:00", "22:00", "quiet_until", "Quiet hours must start and end at different times."),
    ],
)
def test_half_or_empty_quiet_hours_are_refused(as_reviewer, reviewer, start, end, field, error):
    response = save(as_reviewer, start, end)

    assert response.status_code == 400
    assert f'<p class="error field-error" id="id_{field}_error" role="alert">{error}</p>' in (
        response.text
    )
    assert f'aria-describedby="id_{field}_helptext id_{field}_error"' in response.text
    assert dangling(response.text) == set()
    assert not Preferences.objects.filter(user=reviewer, quiet_from__isnull=False).exists()
