"""bench_read's report: per kind of timeline (posts only; with ``--reposts``,
reposts and counts too) and of reader (one list; merged), the raw script
calls, the endpoint at full and at half load, and the timelines with reposts
over the posts-only ones (load_tests/bench_read.py runs it)."""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from load_tests import charts
from load_tests.bench_read import LABELS, add_kind, count_errors, half_load_panel
from load_tests.harness import Report, ratio

Run = dict[str, dict[str, float]]
NAMES = {"posts": "posts only", "reposts": "with reposts and counts"}


def median_run(runs: list[Run]) -> Run:
    """Each figure's median over ``runs`` (raw, peak, half)."""
    return {
        part: {k: statistics.median(r[part][k] for r in runs) for k in runs[0][part]}
        for part in runs[0]
    }


def report_reads(
    args: argparse.Namespace, results: dict[str, dict[str, Run]], meta: dict[str, Any]
) -> int:
    both = len(results) > 1
    report = Report(
        "bench_read",
        params=vars(args)
        | meta
        | {"page": "50 tweets", "merged": "20 pulled authors' lists beside the timeline"},
    )
    for name, runs in results.items():
        for kind, run in runs.items():
            raw, peak, half = run["raw"], run["peak"], run["half"]
            prefix = ("" if name == "posts" else f"{name}_") + (
                "" if kind == "single" else "merged_"
            )
            report.add(f"{LABELS[kind]}{f' ({NAMES[name]})' if both else ''}:", "")
            add_kind(report, raw, peak, half, prefix)
    posts = results["posts"]
    p99_ratio = ratio(posts["merged"]["half"]["p99"], posts["single"]["half"]["p99"])
    report.add("p99 at half load, merged / single list", round(p99_ratio, 2), key="p99_ratio")
    if both:
        report.add(f"with reposts and counts ({args.reposts:.0%} reposts) / posts only:", "")
        for kind in ("single", "merged"):
            new, old = results["reposts"][kind], posts[kind]
            share = ratio(
                ratio(new["peak"]["rps"], new["raw"]["rps"]),
                ratio(old["peak"]["rps"], old["raw"]["rps"]),
            )
            p99 = ratio(new["half"]["p99"], old["half"]["p99"])
            report.add(
                f"  {LABELS[kind]}: (endpoint / raw script)",
                round(share, 3),
                "target >= 0.9 (of the code before reposts)",
                key=f"reposts_{kind}_ratio_ratio",
            )
            report.add(
                f"  {LABELS[kind]}: p99 at half load",
                round(p99, 3),
                "target <= 1.2 (of the code before reposts)",
                key=f"reposts_{kind}_p99_ratio",
            )
            report.check(
                f"{LABELS[kind]}: reposts' endpoint/raw >= 0.9 x posts only's", share >= 0.9
            )
            report.check(
                f"{LABELS[kind]}: reposts' p99 at half load <= 1.2 x posts only's", p99 <= 1.2
            )
    errors = sum(count_errors(runs) for runs in results.values())
    report.add("non-2xx responses", int(errors))
    for name, runs in results.items():
        for kind, run in runs.items():
            report.check(
                f"{LABELS[kind]}{f' ({NAMES[name]})' if both else ''}: "
                "endpoint >= half of the raw script calls/s",
                run["peak"]["rps"] >= run["raw"]["rps"] / 2,
            )
    report.check(
        "single list: p99 < 10 ms at half of the peak", posts["single"]["half"]["p99"] < 10
    )
    report.check("merged: p99 at half load <= 2 x the single list's", p99_ratio <= 2)
    report.check("no errors", errors == 0)
    report.print()
    print(f"report: {report.save()}")
    flat = {
        (f"{LABELS[kind]} ({NAMES[name]})" if both else kind): run
        for name, runs in results.items()
        for kind, run in runs.items()
    }
    chart = charts.draw(
        args.chart or report.path("png"),
        "Home-timeline reads: the endpoint beside the Redis script it calls (same run)",
        charts.bars(
            {
                LABELS.get(key, key): {
                    "script alone (redis-benchmark)": run["raw"]["rps"],
                    "HTTP endpoint (wrk)": run["peak"]["rps"],
                }
                for key, run in flat.items()
            },
            "requests/s",
            "Throughput at full load",
        ),
        half_load_panel(flat),
    )
    print(f"chart: {chart}")
    return 0
