"""A small, safe subset of Markdown for what agents write to reviewers (a request's
context): paragraphs, headings, lists, fenced code, inline code, emphasis, links to
http(s) addresses and bare http(s) addresses. Everything is escaped first; markup is
only ever added around escaped text, so no tag or attribute of the agent's survives,
and a link can only point to http or https (never ``javascript:``, ``data:``…); a
link whose words are not its address shows the host it goes to beside it. Anything else
shows as the text it is.

The agent's headings sit below the page's own: the context is shown under an ``<h2>``,
so ``#`` becomes ``<h3>`` and so on down to ``<h6>``, and the agent cannot make a
heading that outranks the page's."""

import re
from contextlib import suppress
from html import unescape
from urllib.parse import urlsplit

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

FENCE = re.compile(r"^\s*```")
BULLET = re.compile(r"^\s*[-*+]\s+(.*)$")
NUMBERED = re.compile(r"^\s*\d{1,9}[.)]\s+(.*)$")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(\S.*)$")
# The page's own headings go down to <h2> above the context: the agent's start below.
TOP_HEADING = 3
CODE_SPAN = re.compile(r"`([^`\n]+)`")
# Spans are bounded (and a label holds no bracket) so that a line of openers with no
# closer costs linear time, not quadratic: the context is the agent's, and long.
# On escaped text: [label](http://…) with no space, quote or angle bracket in the address.
LINK = re.compile(r"\[([^\[\]\n]{1,300})\]\((https?://[^\s()<>\"']{1,2000})\)")
# A bare address, on escaped text: it runs to a space or to an escaped character that
# cannot be in one (<, >, " and ' are entities by now; only &amp; stands for itself).
BARE_URL = re.compile(r"\bhttps?://(?:[^\s&]|&amp;){1,2000}")
# Punctuation that ends a sentence more often than an address (as GitHub reads them).
TRAILING = ".,:;!?*_~"
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
        elif match := HEADING.match(line):
            html.append(_heading(match))
            index += 1
        elif BULLET.match(line) or NUMBERED.match(line):
            index = _list(lines, index, html)
        else:
            index = _paragraph(lines, index, html)
    return mark_safe("\n".join(html))  # Built from escaped text only.


def _heading(match: re.Match) -> str:
    """``## Title ##`` as a heading a level below the page's (its closing hashes are
    optional, and dropped)."""
    level = min(len(match[1]) + TOP_HEADING - 1, 6)
    text = match[2].rstrip()
    if (unclosed := text.rstrip("#")) != text and unclosed[-1:].isspace():
        text = unclosed.rstrip()
    return f"<h{level}>{_inline(text)}</h{level}>"


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
        line = lines[index]
        if body and (FENCE.match(line) or BULLET.match(line) or HEADING.match(line)):
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
    """Links, then bare addresses and emphasis outside them."""
    parts = LINK.split(escaped)  # text, label, address, text, label, address, text…
    out = [_autolinked(parts[0])]
    for at in range(1, len(parts), 3):
        label, address, after = parts[at : at + 3]
        link = _link(address, _emphasised(label))
        if label != address:  # The words may name one address and the link go to another.
            link += f' <span class="muted link-host">({_host(address)})</span>'
        out.append(f"{link}{_autolinked(after)}")
    return "".join(out)


def _host(escaped_address: str) -> str:
    """The host a link goes to, as the browser will reach it: a name written in other
    scripts shows in its ASCII form (``xn--…``), so that a look-alike of a known name
    does not read as that name."""
    host = urlsplit(unescape(escaped_address)).hostname or ""
    with suppress(UnicodeError):  # Not a name IDNA can encode: shown as written, escaped.
        host = host.encode("idna").decode("ascii")
    return escape(host)


def _autolinked(escaped: str) -> str:
    """Bare addresses as links to themselves, emphasis elsewhere (never inside an
    address, where a ``_`` is part of it)."""
    out, done = [], 0
    for match in BARE_URL.finditer(escaped):
        end = _address_end(match[0])
        if match[0][:end].endswith("//"):
            continue  # Nothing after the scheme but punctuation: a mention, not a link.
        out.append(_emphasised(escaped[done : match.start()]))
        out.append(_link(match[0][:end], match[0][:end]))
        done = match.start() + end
    out.append(_emphasised(escaped[done:]))
    return "".join(out)


def _address_end(address: str) -> int:
    """Where ``address`` ends without the punctuation that ends the sentence around it,
    nor a closing parenthesis it does not open ("(see https://a.example/x)"). One
    step per character dropped: the agent's text may hold long runs of them."""
    unopened = address.count(")") - address.count("(")
    end = len(address)
    while end:
        last = address[end - 1]
        if last == ")" and unopened > 0:
            unopened -= 1
        elif last not in TRAILING or address.endswith("&amp;", 0, end):
            return end
        end -= 1
    return end


def _link(address: str, label: str) -> str:
    return f'<a href="{address}" rel="nofollow noopener noreferrer">{label}</a>'


def _emphasised(escaped: str) -> str:
    escaped = STRONG.sub(lambda m: f"<strong>{m[1] or m[2]}</strong>", escaped)
    return EMPHASIS.sub(lambda m: f"<em>{m[1] or m[2]}</em>", escaped)
