"""The seeder's network generation (pure: no database, no services)."""

from __future__ import annotations

from collections import Counter

import pytest

from load_tests.seed import Network, Progress, chunks, generate, username

USERS = 2000


@pytest.fixture(scope="module")
def net() -> Network:
    return generate(USERS, seed=7, tweets_per_user=5, follows_per_user=30)


def test_the_same_seed_gives_the_same_network(net: Network) -> None:
    again = generate(USERS, seed=7, tweets_per_user=5, follows_per_user=30)
    assert again == net


def test_another_seed_gives_another_network(net: Network) -> None:
    other = generate(USERS, seed=8, tweets_per_user=5, follows_per_user=30)
    assert other.follows != net.follows
    assert other.tweets != net.tweets


def test_more_tweets_leave_the_follow_graph_alone(net: Network) -> None:
    assert generate(USERS, seed=7, tweets_per_user=6, follows_per_user=30).follows == net.follows


def test_usernames_are_unique_valid_and_named_by_seed(net: Network) -> None:
    assert len(net.usernames) == USERS
    assert len({u.lower() for u in net.usernames}) == USERS
    assert net.usernames[0] == username(7, 1) == "seed7_1"
    assert all(u.replace("_", "").isalnum() and len(u) <= 30 for u in net.usernames)


def test_follows_have_no_self_follows_and_no_duplicates(net: Network) -> None:
    assert all(follower != followee for follower, followee in net.follows)
    assert len(set(net.follows)) == len(net.follows)
    assert all(1 <= u <= USERS for pair in net.follows for u in pair)


def test_a_few_accounts_hold_a_large_share_of_follows(net: Network) -> None:
    counts = sorted(net.follower_counts(), reverse=True)
    assert sum(counts) == len(net.follows)
    top_percent = sum(counts[: USERS // 100])
    # Uniform choice would give the top 1% of accounts a little over 1% of follows.
    assert top_percent / len(net.follows) > 0.10
    assert counts[0] > 0.4 * USERS  # the most followed account reaches a large share of users
    median = counts[USERS // 2]
    assert counts[0] > 20 * median


def test_every_user_follows_someone_and_degrees_spread(net: Network) -> None:
    following = Counter(follower for follower, _ in net.follows)
    assert len(following) == USERS
    assert max(following.values()) > 3 * (len(net.follows) / USERS)


def test_tweets_have_realistic_lengths_within_limits(net: Network) -> None:
    assert len(net.tweets) == USERS * 5
    lengths = sorted(len(text) for _, text in net.tweets)
    assert all(1 <= n <= 280 for n in lengths)
    assert all(text.strip() == text and text for _, text in net.tweets)
    assert 30 <= lengths[len(lengths) // 2] <= 100  # most tweets are short
    assert lengths[-1] > 200  # and some are long


def test_a_few_users_write_most_tweets(net: Network) -> None:
    per_author = sorted(Counter(a for a, _ in net.tweets).values(), reverse=True)
    assert sum(per_author[: USERS // 10]) / len(net.tweets) > 0.5
    assert all(1 <= a <= USERS for a, _ in net.tweets)


def test_rows_counts_users_follows_and_tweets(net: Network) -> None:
    assert net.rows == USERS + len(net.follows) + len(net.tweets)


def test_tiny_networks_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        generate(1, seed=1)


def test_chunks_cover_everything_in_order() -> None:
    assert [list(c) for c in chunks(list(range(7)), 3)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(chunks([], 3)) == []


def test_progress_prints_percent_rate_and_time_left(capsys: pytest.CaptureFixture[str]) -> None:
    progress = Progress(total=400, every=0.0)
    progress.add(100, "users")
    progress.add(300, "tweets")
    first, last = capsys.readouterr().out.splitlines()
    assert "100/400 rows" in first and " 25.0%" in first and "ETA" in first
    assert "400/400 rows" in last and "100.0%" in last and last.endswith("ETA 0s")
