"""A queue's last hour as a small inline SVG: rendered here, no JavaScript, nothing fetched.

One bar per minute, completed attempts at the bottom and failed ones
stacked on top, scaled to the busiest minute; a ``<title>`` (the tooltip,
and the text a screen reader reads) gives the totals. Only numbers and
translated text go into the markup, through ``format_html``.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _

#: Pixels per minute, and the chart's height.
BAR_WIDTH = 2
HEIGHT = 24
COMPLETED_COLOR = "#3a8f3a"
FAILED_COLOR = "#ba2121"


def throughput_svg(minutes: Sequence[tuple[int, int]]) -> SafeString:
    """``minutes``: ``(completed, failed)`` per minute, oldest first."""
    completed = sum(c for c, _ in minutes)
    failed = sum(f for _, f in minutes)
    label = _("Last %(minutes)d minutes: %(completed)s completed, %(failed)s failed") % {
        "minutes": len(minutes),
        "completed": f"{completed:,}",
        "failed": f"{failed:,}",
    }
    peak = max((c + f for c, f in minutes), default=0)
    bars: list[tuple[object, ...]] = []
    for i, (done, bad) in enumerate(minutes):
        if not peak or not done + bad:
            continue
        x = i * BAR_WIDTH
        # At least a pixel for any minute with an outcome, so one failure shows.
        done_h = max(1, round(done * HEIGHT / peak)) if done else 0
        bad_h = max(1, round(bad * HEIGHT / peak)) if bad else 0
        if done_h:
            bars.append((x, HEIGHT - done_h, done_h, COMPLETED_COLOR))
        if bad_h:
            bars.append((x, max(0, HEIGHT - done_h - bad_h), bad_h, FAILED_COLOR))
    width = max(1, len(minutes)) * BAR_WIDTH
    return format_html(
        '<svg class="durable-jobs-chart" xmlns="http://www.w3.org/2000/svg" width="{}" '
        'height="{}" viewBox="0 0 {} {}" role="img" aria-label="{}"><title>{}</title>'
        '<line x1="0" y1="{}" x2="{}" y2="{}" stroke="#999" stroke-width="0.5"/>{}</svg>',
        width,
        HEIGHT,
        width,
        HEIGHT,
        label,
        label,
        HEIGHT - 0.25,
        width,
        HEIGHT - 0.25,
        format_html_join(
            "",
            '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"/>',
            ((x, y, BAR_WIDTH - 0.5, h, color) for x, y, h, color in bars),
        ),
    )
