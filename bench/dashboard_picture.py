"""Draw the CloudWatch dashboard's definition (its widget grid, titles and metrics) as a PNG for
the docs, from the body the SAM template and the CDK construct deploy
(:func:`aggregator.deploy.dashboard.dashboard_widgets`), for the rules given.

    python -m bench.dashboard_picture [-d definitions] [--out docs/assets/dashboard.png]

Prints ``dashboard: <widgets> widgets, <metrics> metrics -> <path>``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from aggregator.core.rules import load_rules
from aggregator.deploy.dashboard import dashboard_widgets

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 7
"""Metric lines drawn in one widget (its height); a longer list shows its first and last."""


def _label(metric: list[object]) -> str:
    namespace, name, *rest = metric
    dimensions = [str(d) for d in rest if not isinstance(d, dict)]
    options = [d for d in rest if isinstance(d, dict)]
    shown = dict(zip(dimensions[::2], dimensions[1::2], strict=False))
    extra = "".join(f" {v}" for k, v in shown.items() if k == "Rule")
    stat = f" ({options[0]['stat']})" if options else ""
    return f"{namespace} {name}{extra}{stat}"


def draw(definitions: Path, out: Path) -> tuple[int, int]:
    """Draw the widgets of the rules in ``definitions`` into ``out``; ``(widgets, metrics)``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    widgets = dashboard_widgets(load_rules(definitions))
    width = max(w["x"] + w["width"] for w in widgets)
    height = max(w["y"] + w["height"] for w in widgets)
    figure, axes = plt.subplots(figsize=(width * 0.9, height * 0.75))
    axes.set_xlim(0, width)
    axes.set_ylim(height, 0)
    axes.axis("off")
    metrics = 0
    for w in widgets:
        x, y, wide, high = w["x"], w["y"], w["width"], w["height"]
        axes.add_patch(
            FancyBboxPatch(
                (x + 0.15, y + 0.15),
                wide - 0.3,
                high - 0.3,
                boxstyle="round,pad=0.02",
                facecolor="#f7f9fb",
                edgecolor="#8a99a8",
            )
        )
        props = w["properties"]
        axes.text(x + 0.45, y + 0.75, props["title"], fontsize=11, weight="bold", va="center")
        axes.text(
            x + wide - 0.45,
            y + 0.75,
            f"{props['stat']}, {props['period']} s",
            fontsize=8,
            color="#5a6b7b",
            ha="right",
            va="center",
        )
        shown = props["metrics"]
        metrics += len(shown)
        lines = [_label(m) for m in shown]
        if len(lines) > MAX_LINES:  # a line per rule: the first few, then how many more
            lines = [*lines[: MAX_LINES - 2], f"... {len(lines) - MAX_LINES + 1} more", lines[-1]]
        for i, line in enumerate(lines):
            axes.text(x + 0.6, y + 1.5 + i * 0.62, "— " + line, fontsize=8.5, va="center")
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)
    plt.close(figure)
    return len(widgets), metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-d", "--definitions", type=Path, default=ROOT / "definitions")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "assets" / "dashboard.png")
    args = parser.parse_args()
    widgets, metrics = draw(args.definitions, args.out)
    print(f"dashboard: {widgets} widgets, {metrics} metrics -> {args.out}")


if __name__ == "__main__":
    main()
