"""``duration``: seconds as people say them ("4 min 10 s"), for the numbers page, where
the charts (``runs.views.numbers``) write theirs with the same function."""

from django import template

from runs.numbers import plain_duration

register = template.Library()
register.filter("duration", plain_duration)
