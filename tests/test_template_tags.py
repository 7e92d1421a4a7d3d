"""The template tags every page's times and JSON go through."""

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from django.template import engines
from django.utils import timezone

WHEN = engines["django"].from_string("{% load oversight %}{% when moment %}")


def test_a_moment_reads_in_the_viewers_time_zone_with_its_exact_time_and_iso_form():
    moment = datetime(2026, 3, 9, 23, 5, 7, 123456, tzinfo=UTC)
    with timezone.override(ZoneInfo("Asia/Tokyo")):
        shown = WHEN.render({"moment": moment})
    assert shown.startswith(
        '<time datetime="2026-03-10T08:05:07.123456+09:00" title="2026-03-10 08:05:07 JST">'
        "Mar 10, 08:05</time> "
    )
    assert shown.endswith(" ago)</span>")


def test_a_moment_to_come_says_so():
    shown = WHEN.render({"moment": timezone.now() + timedelta(hours=2, minutes=1)})
    assert shown.endswith('<span class="muted">(in 2\xa0hours)</span>')


def test_no_moment_shows_nothing():
    assert WHEN.render({"moment": None}) == ""


def test_what_is_not_a_moment_shows_nothing():
    """As the date filters did: a missing variable, a date, a naive time."""
    for value in ("", datetime(2026, 3, 9).date(), datetime(2026, 3, 9, 12, 0)):
        assert WHEN.render({"moment": value}) == ""
