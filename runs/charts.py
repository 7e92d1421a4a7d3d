"""Small bar charts drawn on the server as SVG (no script, no CDN: the pages' CSP allows
neither), each with its title for screen readers; the page shows the numbers beside it
as a table. Labels are escaped like any other text."""

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

WIDTH, HEIGHT, TOP, BOTTOM, LEFT = 640, 180, 18, 22, 40


def bars(title: str, points: list[tuple[str, float]], unit: str = "") -> SafeString:
    """A vertical bar per point (label, value), the highest labelled with its value; the
    first and last labels under the axis."""
    most = max((value for _, value in points), default=0) or 1
    step = (WIDTH - LEFT) / max(len(points), 1)
    scale = (HEIGHT - TOP - BOTTOM) / most
    rects = format_html_join(
        "",
        '<rect x="{}" y="{}" width="{}" height="{}"><title>{}: {}{}</title></rect>',
        (
            (
                round(LEFT + i * step + 1, 1),
                round(HEIGHT - BOTTOM - value * scale, 1),
                round(max(step - 2, 1), 1),
                round(value * scale, 1),
                label,
                _number(value),
                unit,
            )
            for i, (label, value) in enumerate(points)
        ),
    )
    ends = ""
    if points:
        ends = format_html(
            '<text x="{}" y="{}">{}</text><text x="{}" y="{}" text-anchor="end">{}</text>',
            LEFT,
            HEIGHT - 6,
            points[0][0],
            WIDTH,
            HEIGHT - 6,
            points[-1][0],
        )
    return format_html(
        '<svg class="chart" viewBox="0 0 {w} {h}" role="img" aria-label="{title}">'
        '<line x1="{left}" y1="{axis}" x2="{w}" y2="{axis}"/>'
        '<text x="0" y="{top}">{most}{unit}</text>{rects}{ends}</svg>',
        w=WIDTH,
        h=HEIGHT,
        title=title,
        left=LEFT,
        axis=HEIGHT - BOTTOM,
        top=TOP - 4,
        most=_number(most),
        unit=unit,
        rects=rects,
        ends=ends,
    )


def _number(value: float) -> str:
    """As read on a chart: whole above 10, else two significant digits."""
    return f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.2g}"
