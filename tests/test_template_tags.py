"""The template tags every page's times, JSON and amounts go through."""

import copy
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from html import escape
from zoneinfo import ZoneInfo

import pytest
from django.template import engines
from django.template.loader import render_to_string
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


AMOUNT = engines["django"].from_string("{% load oversight %}{{ value|amount }}")


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("17000.00", "17,000.00"),
        ("-1250.50", "-1,250.50"),
        ("999.99", "999.99"),
        ("1234567", "1,234,567"),
        ("0.0000001", "0.0000001"),
        (Decimal("15750.00"), "15,750.00"),
    ],
)
def test_an_amount_reads_with_thousands_separators_its_digits_as_written(value, shown):
    assert AMOUNT.render({"value": value}) == shown


@pytest.mark.parametrize("value", ["n/a", "1E+3", "NaN", "12.", "١٢٣٤٥", "<b>1000</b>", None])
def test_what_is_not_an_amount_passes_through_escaped(value):
    assert AMOUNT.render({"value": value}) == escape(str(value))


def test_the_balances_preview_shows_amounts_with_separators_and_keeps_them_as_stored():
    """The preview a decision keeps is hashed as the ledger wrote it: only the page
    changes."""
    preview = {
        "kind": "balances",
        "rows": [
            {"account": "operating", "before": "17000.00", "after": "15750.00"},
            {"account": "acme", "before": "-250.00", "after": "1000.00"},
        ],
        "floor": "10000.00",
        "holds": True,
        "why": "",
    }
    kept = copy.deepcopy(preview)

    page = render_to_string("runs/partials/preview.html", {"preview": preview})

    cells = re.findall(r'<td class="number">([^<]*)</td>', page)
    assert cells == ["17,000.00", "15,750.00", "-250.00", "1,000.00"]
    assert "The source must hold more than 10,000.00." in page
    assert preview == kept
