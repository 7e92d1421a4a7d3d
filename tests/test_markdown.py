"""The request context's markdown: what it renders, that nothing of the agent's becomes
markup, and that text built to make the renderer backtrack costs linear time."""

import time

import pytest

from runs.views.markdown import render


def test_the_subset_renders():
    html = render("Pay **now**, see [it](https://example.com/42) and `ref`\n\n- one\n- two")

    assert "<strong>now</strong>" in html
    assert '<a href="https://example.com/42" rel="nofollow noopener noreferrer">' in html
    assert "<code>ref</code>" in html and "<ul><li>one</li><li>two</li></ul>" in html


@pytest.mark.parametrize(
    "hostile",
    [
        '[x](javascript:alert(1)) <script>alert(1)</script> <img src=x onerror="a()">',
        '[x](https://a.b/"onmouseover="alert(1)) &lt;b&gt;',
    ],
)
def test_nothing_of_the_agent_becomes_markup(hostile):
    html = render(hostile)

    assert "<script" not in html and "<img" not in html and 'href="javascript' not in html
    assert 'onmouseover="' not in html


@pytest.mark.parametrize("unit", ["[a", "**a ", "*a ", "__a ", "_a "])
def test_openers_without_closers_are_rendered_in_linear_time(unit):
    """A complexity check, not a timing one: 20,000 characters of openers took 1.4 s
    per page view when the renderer was quadratic, so 100,000 would take 35 s; linear,
    it takes under one (the bound leaves a wide margin for a loaded machine)."""
    text = unit * (100_000 // len(unit))

    started = time.perf_counter()
    render(text)

    assert time.perf_counter() - started < 10


def test_a_link_shows_the_host_it_goes_to_beside_its_words():
    html = render("Pay at [https://bank.example/pay](https://evil.example/steal) today")

    assert (
        '<a href="https://evil.example/steal" rel="nofollow noopener noreferrer">'
        'https://bank.example/pay</a> <span class="muted link-host">(evil.example)</span>'
    ) in html


def test_a_look_alike_host_shows_in_its_ascii_form():
    html = render("[the bank](https://b\u0430nk.example/pay)")  # A Cyrillic a.

    assert '<span class="muted link-host">(xn--bnk-6cd.example)</span>' in html


def test_a_link_written_as_its_own_address_shows_it_once():
    html = render("[https://a.example/x](https://a.example/x)")

    assert "link-host" not in html
