"""Small bar charts drawn on the server as SVG (no script, no CDN: the pages' CSP allows
neither), each with its title for screen readers; the page shows the numbers beside it
as a table. Labels are escaped like any other text.

The SVG has no viewBox: a viewBox scales all it holds to the page's width, text
included, and a chart 640 units wide printed its labels at 8 px on a desktop and 6 on a
phone. Bars are placed in percentages of the width and pixels of a fixed height, so they
stretch while the text keeps the size the stylesheet gives it."""

from collections.abc import Callable

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

HEIGHT, TOP, BOTTOM = 180, 26, 28  # px: the chart, the room above the bars and below
GAP = 0.15  # of each bar's share of the width, left empty between bars


def bars(title: str, points: list[tuple[str, float]], shown: Callable = str) -> SafeString:
    """A vertical bar per point (label, value), the highest value written above them
    (``shown`` writes a value: a count as it is, a duration in words; nothing when all
    are 0, rather than a highest value no point has); the first and last labels under
    the axis."""
    most = max((value for _, value in points), default=0)
    step = 100 / max(len(points), 1)
    scale = (HEIGHT - TOP - BOTTOM) / (most or 1)
    rects = format_html_join(
        "",
        '<rect x="{}%" y="{}" width="{}%" height="{}"><title>{}: {}</title></rect>',
        (
            (
                round((i + GAP / 2) * step, 2),
                round(HEIGHT - BOTTOM - value * scale, 1),
                round((1 - GAP) * step, 2),
                round(value * scale, 1),
                label,
                shown(value),
            )
            for i, (label, value) in enumerate(points)
        ),
    )
    return format_html(
        '<svg class="chart" width="100%" height="{h}" role="img" aria-label="{title}">'
        '<line x1="0" y1="{axis}" x2="100%" y2="{axis}"/>'
        "{most}{rects}{ends}</svg>",
        h=HEIGHT,
        title=title,
        axis=HEIGHT - BOTTOM,
        most=format_html('<text x="0" y="{}">{}</text>', TOP - 9, shown(most)) if most else "",
        rects=rects,
        ends=_ends(points),
    )


def _ends(points: list[tuple[str, float]]) -> SafeString:
    """The first label at the left under the axis and the last at the right (one
    label for a single point, not the same twice)."""
    ends = [(points[0][0], "0", "start")] if points else []
    if len(points) > 1:
        ends.append((points[-1][0], "100%", "end"))
    return format_html_join(
        "",
        '<text x="{}" y="{}" text-anchor="{}">{}</text>',
        ((x, HEIGHT - 8, anchor, label) for label, x, anchor in ends),
    )
