"""L0's caches are pruned least recently used first, within a budget, sparing recent entries."""

import os

from build_scripts.cache_prune import RECENT_SECONDS, prune, touch

NOW = 1_000_000_000.0
HOUR = 3600


def entry(tmp_path, name, size, age, report=False):
    """An object of `size` bytes last used `age` seconds before NOW, with a report directory."""
    obj = tmp_path / f"{name}.o"
    obj.write_bytes(b"x" * size)
    os.utime(obj, (NOW - age, NOW - age))
    group = [obj]
    if report:
        (tmp_path / f"{name}.o.report").mkdir()
        (tmp_path / f"{name}.o.report" / "ptxas.txt").write_bytes(b"y" * size)
        group.append(tmp_path / f"{name}.o.report")
    return group


def test_the_least_recently_used_go_first_until_the_rest_fit(tmp_path):
    old, older, new = (entry(tmp_path, n, 100, age, report=True) for n, age in
                       (("old", 2 * HOUR), ("older", 3 * HOUR), ("new", HOUR)))
    removed = prune([old, older, new], max_bytes=250, now=NOW)  # 3 x 200 bytes: two must go
    assert removed == [older[0], old[0]]
    assert not any(p.exists() for p in older + old) and all(p.exists() for p in new)


def test_entries_used_lately_stay_whatever_the_budget(tmp_path):
    stale, busy = entry(tmp_path, "stale", 100, 2 * HOUR), entry(tmp_path, "busy", 100, RECENT_SECONDS / 2)
    assert prune([busy, stale], max_bytes=0, now=NOW) == [stale[0]]
    assert busy[0].exists()


def test_a_count_budget_and_a_touch(tmp_path):
    groups = [entry(tmp_path, f"e{i}", 10, (i + 1) * HOUR) for i in range(5)]  # e0 newest
    touch(groups[4][0])  # e4 used just now: it stays, the next oldest go
    removed = prune(groups, max_entries=3, now=os.stat(groups[4][0]).st_mtime)
    assert removed == [groups[3][0], groups[2][0]]
    assert prune(groups, max_entries=3, now=NOW) == []  # within the budget: nothing more

