"""A small, safe subset of Markdown for what agents write to reviewers (a request's
context): paragraphs, lists, fenced code, inline code, emphasis, and links to http(s)
addresses. Everything is escaped first; markup is only ever added around escaped text,
so no tag or attribute of the agent's survives, and a link can only point to http or
https (never ``javascript:``, ``data:``…). Anything else shows as the text it is."""

import re

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

FENCE = re.compile(r"^\s*```")
BULLET = re.compile(r"^\s*[-*+]\s+(.*)$")
NUMBERED = re.compile(r"^\s*\d{1,9}[.)]\s+(.*)$")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
# Spans are bounded (and a label holds no bracket) so that a line of openers with no
# closer costs linear time, not quadratic: the context is the agent's, and long.
# On escaped text: [label](http://…) with no space, quote or angle bracket in the address.
LINK = re.compile(r"\[([^\[\]\n]{1,300})\]\((https?://[^\s()<>\"']{1,2000})\)")
STRONG = re.compile(r"\*\*(?=\S)(.{1,300}?)(?<=\S)\*\*|__(?=\S)(.{1,300}?)(?<=\S)__")
EMPHASIS = re.compile(r"\*(?=\S)(.{1,300}?)(?<=\S)\*|\b_(?=\S)(.{1,300}?)(?<=\S)_\b")


def render(text: str) -> SafeString:
    """``text`` as HTML: blocks separated by blank lines, lists and fenced code."""
    html: list[str] = []
    lines = text.replace("\r\n", "\n").split("\n")
    index = 0
    while index < len(lines):
        line = lines[index]
        if not line.strip():
            index += 1
        elif FENCE.match(line):
            index = _code(lines, index + 1, html)
        elif BULLET.match(line) or NUMBERED.match(line):
            index = _list(lines, index, html)
        else:
            index = _paragraph(lines, index, html)
    return mark_safe("\n".join(html))  # Built from escaped text only.


def _code(lines: list[str], index: int, html: list[str]) -> int:
    body = []
    while index < len(lines) and not FENCE.match(lines[index]):
        body.append(lines[index])
        index += 1
    html.append(f'<pre class="code">{escape(chr(10).join(body))}</pre>')
    return index + 1  # Past the closing fence (or the end: an unclosed fence runs out).


def _list(lines: list[str], index: int, html: list[str]) -> int:
    pattern = BULLET if BULLET.match(lines[index]) else NUMBERED
    items = []
    while index < len(lines) and (match := pattern.match(lines[index])):
        items.append(f"<li>{_inline(match[1])}</li>")
        index += 1
    tag = "ul" if pattern is BULLET else "ol"
    html.append(f"<{tag}>{''.join(items)}</{tag}>")
    return index


def _paragraph(lines: list[str], index: int, html: list[str]) -> int:
    body = []
    while index < len(lines) and lines[index].strip():
        if body and (FENCE.match(lines[index]) or BULLET.match(lines[index])):
            break
        body.append(_inline(lines[index].strip()))
        index += 1
    html.append(f"<p>{'<br>'.join(body)}</p>")
    return index


def _inline(text: str) -> str:
    """One line: code spans stay literal; links and emphasis elsewhere, on escaped text."""
    parts = CODE_SPAN.split(text)
    out = []
    for number, part in enumerate(parts):
        if number % 2:
            out.append(f"<code>{escape(part)}</code>")
        else:
            out.append(_marked(escape(part)))
    return "".join(out)


def _marked(escaped: str) -> str:
    """Links, then emphasis outside their addresses."""
    parts = LINK.split(escaped)  # text, label, address, text, label, address, text…
    out = [_emphasised(parts[0])]
    for at in range(1, len(parts), 3):
        label, address, after = parts[at : at + 3]
        out.append(f'<a href="{address}" rel="nofollow noopener noreferrer">')
        out.append(f"{_emphasised(label)}</a>{_emphasised(after)}")
    return "".join(out)


def _emphasised(escaped: str) -> str:
    escaped = STRONG.sub(lambda m: f"<strong>{m[1] or m[2]}</strong>", escaped)
    return EMPHASIS.sub(lambda m: f"<em>{m[1] or m[2]}</em>", escaped)
