"""``bench_read --lists``: readers of list timelines beside readers of home
timelines, in the same run: every other reader of each kind (single, merged)
reads a list of theirs (owner -L, docs/decisions.md D31) that holds what
their home timeline holds (its keys copied: the timeline, its pairs, its
pulled authors, its replies' keys), through ``GET /api/v1/lists/{id}/timeline``.
The same entries, so the figures differ only by the read path: the target
is list ÷ home within 1.1 (p99 at half load, and the endpoint's share of the
raw script's rate). load_tests/bench_read.py runs it, after its main report.
"""

from __future__ import annotations

import argparse
from typing import Any

from fanout.model import owners
from fanout.store import keys
from load_tests.bench_read import LABELS, add_kind, count_errors
from load_tests.harness import Report, ratio
from load_tests.read_report import NAMES, Run

#: list ÷ home, at most this for the p99 and at least its inverse for the ratio.
TARGET = 1.1
#: The keys of a timeline that a read looks at, copied to the list's.
_KEYS = (
    keys.timeline,
    keys.timeline_reposts,
    keys.pulls,
    keys.followees,
    keys.filters,
    keys.aside,
    keys.shown_replies,
)


def with_lists(
    store: Any, generation: int, kinds: dict[str, dict[str, list[int]]]
) -> dict[int, int]:
    """Split each kind of reader of ``kinds``, in place, into every other
    reader: ``single`` and ``single_list``, ``merged`` and ``merged_list``;
    give each list reader their first list, a copy of their home timeline.
    Returns reader -> list id."""
    listed: dict[int, int] = {}
    pipe = store.redis.pipeline(transaction=False)
    for groups in kinds.values():
        split: dict[str, list[int]] = {}
        for kind in ("single", "merged"):
            split[kind], split[f"{kind}_list"] = groups[kind][::2], groups[kind][1::2]
            for user in split[f"{kind}_list"]:
                list_ = listed[user] = owners.list_id(user, 1)
                owner = owners.list_owner(list_)
                for key in _KEYS:
                    pipe.copy(key(generation, user), key(generation, owner), replace=True)
        groups.clear()
        groups.update(split)
    pipe.execute()
    return listed


def report_lists(args: argparse.Namespace, results: dict[str, dict[str, Run]]) -> int:
    """Per kind of timeline and of reader, the list readers' figures as the
    main report gives the home ones', and list ÷ home."""
    both = len(results) > 1
    report = Report(
        "bench_read_lists",
        params=vars(args)
        | {
            "page": "50 tweets",
            "merged": "20 pulled authors' lists beside the timeline",
            "readers": "every other reader of each kind reads a list holding their home's entries",
        },
    )
    for name, runs in results.items():
        for kind in ("single", "merged"):
            home, lst = runs[kind], runs[f"{kind}_list"]
            suffix = f" ({NAMES[name]})" if both else ""
            prefix = ("" if name == "posts" else f"{name}_") + f"{kind}_list_"
            raw, peak, half = lst["raw"], lst["peak"], lst["half"]
            report.add(f"{LABELS[kind]}, read as a list{suffix}:", "")
            add_kind(report, raw, peak, half, prefix)
            p99 = ratio(half["p99"], home["half"]["p99"])
            share = ratio(
                ratio(peak["rps"], raw["rps"]), ratio(home["peak"]["rps"], home["raw"]["rps"])
            )
            report.add(
                "  p99 at half load, list ÷ home",
                round(p99, 2),
                f"{half['p99']:.2f} against {home['half']['p99']:.2f} ms; target <= {TARGET}",
                key=f"{prefix}p99_ratio",
            )
            report.add(
                "  endpoint ÷ script, list ÷ home",
                round(share, 2),
                f"{peak['rps']:,.0f}/{raw['rps']:,.0f} against "
                f"{home['peak']['rps']:,.0f}/{home['raw']['rps']:,.0f} req/s; "
                f"target >= {1 / TARGET:.2f}",
                key=f"{prefix}share_ratio",
            )
            report.check(f"{LABELS[kind]}{suffix}: list p99 <= {TARGET} x home", p99 <= TARGET)
            report.check(
                f"{LABELS[kind]}{suffix}: list endpoint ÷ script >= home's / {TARGET}",
                share >= 1 / TARGET,
            )
    errors = sum(
        count_errors({kind: run for kind, run in runs.items() if kind.endswith("_list")})
        for runs in results.values()
    )
    report.add("non-2xx responses (list readers)", int(errors))
    report.check("no errors", errors == 0)
    report.print()
    print(f"report: {report.save()}")
    return 0
