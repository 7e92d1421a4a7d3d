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
