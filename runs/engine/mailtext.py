"""Text that others wrote, in Oversight's emails.

A header value is one short line of visible characters: a line break in a subject
either forges headers or makes Django refuse the email, and the alert is never
delivered. In a body, every value an agent (or a target it talked to) wrote is quoted:
a label in Oversight's words, then each of its lines behind "> ", so an agent cannot
add lines or links that read as Oversight's. The links Oversight builds itself stay
outside the quotes.
"""

import unicodedata

from django.conf import settings
from django.urls import reverse

QUOTE = "> "
QUOTED_NOTE = (
    'Lines starting with ">" are quoted as they were written (by an agent, or by a\n'
    "system it talked to): they are not Oversight's words, and their links are not\n"
    "Oversight's links."
)


def _visible(text: str) -> str:
    """``text`` without control, format or unassigned characters (escape sequences,
    bidirectional overrides, lone surrogates); white space of any kind becomes a space
    (line breaks are split off before)."""
    return "".join(
        " " if char.isspace() else char
        for char in text
        if char.isspace() or unicodedata.category(char)[0] != "C"
    )


def header_value(text: str, limit: int = 120) -> str:
    """``text`` as one line of at most ``limit`` visible characters, for a header."""
    line = " ".join(_visible(text).split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def quoted(label: str, text: str, limit: int = 4000) -> str:
    """``label`` (Oversight's words), then ``text``'s lines each behind "> ". Every line
    break mail readers honour (``str.splitlines``: CR, LF, form feed, U+2028…) starts a
    new quoted line; past ``limit`` characters the quote ends with "> […]"."""
    cut = text if len(text) <= limit else text[:limit]
    lines = [_visible(line).rstrip() for line in cut.splitlines()] or [""]
    if cut is not text:
        lines.append("[…]")
    return "\n".join([label, *(f"{QUOTE}{line}".rstrip() for line in lines)])


def link(name: str, *args) -> str:
    """An absolute link to one of Oversight's pages."""
    return settings.OVERSIGHT_BASE_URL.rstrip("/") + reverse(name, args=args)
