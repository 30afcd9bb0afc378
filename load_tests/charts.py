"""The charts the benchmarks draw (PNG, matplotlib): a benchmark's figures
beside the baseline measured in the same run, and distributions as CDFs.

Every benchmark takes ``--chart PATH`` (default: beside its JSON report in
load_tests/reports/); the charts in docs/ were drawn by the runs quoted there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display: files only

import matplotlib.pyplot as plt

Panel = Callable[[Any], None]


def draw(path: Path, title: str, *panels: Panel) -> Path:
    """One figure of ``panels`` side by side, saved at ``path``."""
    fig, axes = plt.subplots(1, len(panels), figsize=(6.4 * len(panels), 4.4), squeeze=False)
    for panel, ax in zip(panels, axes[0], strict=True):
        panel(ax)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title, fontsize=12)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def bars(groups: Mapping[str, Mapping[str, float]], ylabel: str, title: str) -> Panel:
    """Grouped bars: ``{group: {series: value}}``, each bar labelled with its value."""

    def panel(ax: Any) -> None:
        series = list(dict.fromkeys(s for values in groups.values() for s in values))
        width = 0.8 / max(1, len(series))
        for i, name in enumerate(series):
            xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
            ys = [values.get(name, 0.0) for values in groups.values()]
            drawn = ax.bar(xs, ys, width, label=name)
            ax.bar_label(drawn, labels=[_short(y) for y in ys], fontsize=8, padding=2)
        crowded = len(groups) > 4  # long labels side by side would overlap
        ax.set_xticks(
            range(len(groups)),
            list(groups),
            fontsize=9,
            rotation=30 if crowded else 0,
            ha="right" if crowded else "center",
        )
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.margins(y=0.15)
        if len(series) > 1:
            ax.legend(fontsize=8)

    return panel


def cdf(series: Mapping[str, Sequence[float]], xlabel: str, title: str) -> Panel:
    """Empirical CDFs, with each series' p50 and p99 in the legend."""

    def panel(ax: Any) -> None:
        for name, values in series.items():
            ordered = sorted(values)
            if not ordered:
                continue
            n = len(ordered)
            p50, p99 = ordered[(n - 1) // 2], ordered[min(n - 1, round(0.99 * (n - 1)))]
            ax.step(
                ordered,
                [(i + 1) / n for i in range(n)],
                where="post",
                label=f"{name} (p50 {p50:.2f}, p99 {p99:.2f}, n={n})",
            )
        ax.set_xlabel(xlabel)
        ax.set_ylabel("share of samples at or below")
        ax.set_ylim(0, 1.02)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8, loc="lower right")

    return panel


def _short(value: float) -> str:
    if abs(value) >= 10_000:
        return f"{value / 1000:,.0f}k"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}"
