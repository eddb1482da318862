"""A line plot of series by step as an SVG file, with no plotting library: the learning
tests write their reward by step beside their printed figures."""

from __future__ import annotations

from pathlib import Path

__all__ = ["write_line_plot"]

WIDTH, HEIGHT, MARGIN = 640, 360, 40
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")


def write_line_plot(path: Path, title: str, series: dict[str, list[float]], top: float = 1.0) -> Path:
    """Each of `series` (values from 0 to `top`, one per step) as a line, named in a legend."""
    steps = max(len(values) for values in series.values())
    x_scale = (WIDTH - 2 * MARGIN) / max(steps - 1, 1)

    def point(step: int, value: float) -> str:
        y = HEIGHT - MARGIN - (HEIGHT - 2 * MARGIN) * min(max(value / top, 0.0), 1.0)
        return f"{MARGIN + step * x_scale:.1f},{y:.1f}"

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{MARGIN}" y="20">{title}</text>',
        f'<polyline points="{MARGIN},{MARGIN} {MARGIN},{HEIGHT - MARGIN} {WIDTH - MARGIN},{HEIGHT - MARGIN}"'
        ' fill="none" stroke="black"/>',
        f'<text x="{MARGIN - 8}" y="{MARGIN + 4}" text-anchor="end">{top:g}</text>',
        f'<text x="{MARGIN - 8}" y="{HEIGHT - MARGIN + 4}" text-anchor="end">0</text>',
        f'<text x="{WIDTH - MARGIN}" y="{HEIGHT - MARGIN + 16}" text-anchor="end">step {steps}</text>',
    ]
    for index, (name, values) in enumerate(series.items()):
        colour = COLOURS[index % len(COLOURS)]
        points = " ".join(point(step, value) for step, value in enumerate(values))
        parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
        parts.append(
            f'<text x="{WIDTH - MARGIN - 150}" y="{MARGIN + 16 * index}" fill="{colour}">{name}</text>'
        )
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")
    return path
