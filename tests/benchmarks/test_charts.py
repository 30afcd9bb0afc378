"""The benchmarks' charts are real PNGs with what they were given."""

from pathlib import Path

from load_tests import charts


def test_a_chart_is_drawn_with_bars_and_distributions(tmp_path: Path) -> None:
    path = charts.draw(
        tmp_path / "sub" / "bench.png",
        "a run",
        charts.bars({"baseline": {"ops/s": 1000.0}, "measured": {"ops/s": 350.0}}, "ops/s", "t"),
        charts.cdf({"lag": [0.2, 0.4, 0.5, 1.3], "empty": []}, "seconds", "freshness"),
    )
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width > 2 * height  # two panels side by side


def test_bar_labels_are_short() -> None:
    assert [charts._short(v) for v in (123_456.0, 512.4, 0.456)] == ["123k", "512", "0.46"]
