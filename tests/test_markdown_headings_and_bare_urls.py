"""The agent's headings and bare addresses in a request's context: headings render a
level below the page's own (the context sits under an <h2>), bare http(s) addresses
become links like written ones, and neither lets anything of the agent's become
markup or a link anywhere but http(s)."""

import pytest

from runs.views.markdown import render
from tests.test_markdown import (
    test_openers_without_closers_are_rendered_in_linear_time as rendered_in_linear_time,
)

REL = 'rel="nofollow noopener noreferrer"'


@pytest.mark.parametrize(
    ("written", "shown"),
    [
        ("# Why", "<h3>Why</h3>"),
        ("## What **now**", "<h4>What <strong>now</strong></h4>"),
        ("### Closed ###", "<h5>Closed</h5>"),
        ("###### Deepest", "<h6>Deepest</h6>"),
        ("#### Deeper still", "<h6>Deeper still</h6>"),
    ],
)
def test_headings_render_below_the_pages_own(written, shown):
    assert render(written) == shown


def test_a_heading_ends_the_paragraph_before_it():
    assert (
        render("Some context\n## Options\nmore")
        == "<p>Some context</p>\n<h4>Options</h4>\n<p>more</p>"
    )


@pytest.mark.parametrize("text", ["#hashtag", "####### seven", "#"])
def test_what_is_not_a_heading_stays_text(text):
    assert render(text) == f"<p>{text}</p>"


def test_a_bare_address_is_a_link_without_the_sentence_around_it():
    html = render("See https://example.com/a_b?x=1&y=2. Or (https://example.org/p(1)).")

    assert html == (
        f'<p>See <a href="https://example.com/a_b?x=1&amp;y=2" {REL}>'
        "https://example.com/a_b?x=1&amp;y=2</a>. "
        f'Or (<a href="https://example.org/p(1)" {REL}>https://example.org/p(1)</a>).</p>'
    )


def test_a_written_link_is_not_linked_twice():
    assert render("[https://a.example](https://b.example)") == (
        f'<p><a href="https://b.example" {REL}>https://a.example</a>'
        ' <span class="muted link-host">(b.example)</span></p>'
    )


@pytest.mark.parametrize(
    "hostile",
    [
        "javascript:alert(1)",
        "see javascript:alert(document.cookie) and data:text/html;base64,PHNjcmlwdD4=",
        "JaVaScRiPt:alert(1)",
        "# javascript:alert(1)",
        "vbscript:msgbox(1) file:///etc/passwd ftp://example.com",
    ],
)
def test_only_http_addresses_become_links(hostile):
    assert "<a " not in render(hostile)


@pytest.mark.parametrize(
    "hostile",
    [
        'https://a.example/"onmouseover="alert(1)',
        "https://a.example/'onmouseover='alert(1)",
        "https://a.example/<script>alert(1)</script>",
        "# <img src=x onerror=alert(1)> https://a.example/<b>",
    ],
)
def test_a_bare_address_cannot_break_out_of_its_attribute(hostile):
    html = render(hostile)

    assert "<script" not in html and "<img" not in html and "<b>" not in html
    assert 'onmouseover="' not in html and "onmouseover='" not in html
    assert html.count('href="') == 1 and 'href="https://a.example/"' in html


@pytest.mark.parametrize("unit", ["https://", "https://a)", "https://a.", "# ", "#  x"])
def test_addresses_and_headings_render_in_linear_time(unit):
    """The check tests/test_markdown.py makes of the other openers."""
    rendered_in_linear_time(unit)
