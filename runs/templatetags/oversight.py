import json
from datetime import datetime

from django import template
from django.utils import timezone
from django.utils.timesince import timesince, timeuntil

register = template.Library()


@register.filter
def relative(when: datetime | None) -> str:
    """ "5 minutes ago" for the past, "in 5 minutes" for the future."""
    if when is None:
        return ""
    if when > timezone.now():
        return f"in {timeuntil(when)}"
    return f"{timesince(when)} ago"


@register.filter
def as_json(value) -> str:
    """Pretty JSON for people (stable key order); the template escapes it."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
