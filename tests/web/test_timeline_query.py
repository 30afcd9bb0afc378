import pytest

from fanout.model import ids
from feed.timeline import DEFAULT_COUNT, InvalidParameter, TimelineQuery, parse_query


def test_defaults() -> None:
    assert parse_query("") == TimelineQuery(count=DEFAULT_COUNT)


def test_all_parameters() -> None:
    assert parse_query("count=10&max_id=99&since_id=5&min_seq=0") == TimelineQuery(10, 99, 5, 0)


@pytest.mark.parametrize(
    ("query", "name", "mentions"),
    [
        ("count=0", "count", "between 1 and 200"),
        ("count=201", "count", "between 1 and 200"),
        ("count=ten", "count", "whole number"),
        ("count=-1", "count", "whole number"),
        ("count=", "count", "whole number"),
        ("count=1&count=2", "count", "once"),
        (f"max_id={ids.MAX_ID + 1}", "max_id", "between"),
        ("max_id=0", "max_id", "between"),
        ("since_id=1.5", "since_id", "whole number"),
        ("min_seq=" + "9" * 30, "min_seq", "whole number"),
    ],
)
def test_bad_parameters_name_themselves(query: str, name: str, mentions: str) -> None:
    with pytest.raises(InvalidParameter) as info:
        parse_query(query)
    assert info.value.name == name and mentions in info.value.message
