import json
from datetime import datetime
from html import escape

from django import template
from django.utils import timezone
from django.utils.dates import MONTHS_3
from django.utils.html import format_html
from django.utils.safestring import mark_safe
from django.utils.timesince import timesince, timeuntil

from runs.amounts import readable_amount

register = template.Library()
# For display only: the previews a decision keeps, and hashes, hold each amount as the
# ledger wrote it.
register.filter("amount", readable_amount)


@register.filter
def relative(when: datetime | None) -> str:
    """ "5 minutes ago" for the past, "in 5 minutes" for the future."""
    if when is None:
        return ""
    if when > timezone.now():
        return f"in {timeuntil(when)}"
    return f"{timesince(when)} ago"


@register.simple_tag
def when(moment: datetime | None) -> str:
    """A moment as people read it, "Dec 1, 14:05 (5 minutes ago)", in the viewer's time
    zone, with its exact time and zone as a tooltip and in ISO 8601 for machines. In
    plain Python rather than ``date`` filters and ``format_html``: the run page's
    timeline shows hundreds, and those took a fifth of a millisecond each. Nothing in
    it is anybody's text but the zone's name and Django's words, escaped all the same."""
    if not isinstance(moment, datetime) or timezone.is_naive(moment):
        return ""  # Nothing (or not a moment): nothing to show, as the filters showed.
    local = timezone.localtime(moment)
    exact = escape(f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()}")
    shown = f"{MONTHS_3[local.month].title()} {local.day}, {local:%H:%M}"
    return mark_safe(
        f'<time datetime="{local.isoformat()}" title="{exact}">{escape(shown)}</time>'
        f' <span class="muted">({escape(relative(moment))})</span>'
    )


@register.filter
def agent_name(session) -> str:
    """The agent of a session: the name of the token that opened it (the agent's label is
    its own free text, shown only beside it). A filter rather than an included template:
    the queue and the runs list show one a row."""
    token = session.token
    if token is None:
        return session.agent
    if session.agent == token.name:
        return token.name
    return format_html(
        '{} <span class="muted">(calls itself “{}”)</span>', token.name, session.agent
    )


@register.filter
def as_json(value) -> str:
    """Pretty JSON for people (stable key order); the template escapes it."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
