"""The plain enumerators of kiq.iteration: items, csv_rows and redis_scan; their cursors resume where they say,
and a cursor they did not make is refused with the value and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

import kiq.iteration
from kiq.iteration import CursorError, csv_rows, items, redis_scan


def test_items_yields_indexes_and_resumes_at_the_cursor() -> None:
    assert list(items(["a", "b", "c"])) == [("a", 0), ("b", 1), ("c", 2)]
    assert list(items(["a", "b", "c"], cursor=1)) == [("b", 1), ("c", 2)]
    assert list(items(range(10, 13), cursor=3)) == []


@pytest.mark.parametrize("cursor", ["3", -1, 1.5, True, [3], 9])
def test_items_refuses_a_cursor_it_did_not_make(cursor: object) -> None:
    with pytest.raises(CursorError) as raised:
        items([1, 2, 3], cursor=cursor)  # type: ignore[arg-type]
    message = str(raised.value)
    assert repr(cursor) in message and "cursor=None" in message and "kiq cancel" in message


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_csv_rows_cursors_are_byte_offsets_of_each_row(tmp_path: Path) -> None:
    data = b'id,name\r\n1,"multi\nline"\r\n2,b\n3,c'  # a quoted field spanning lines, no newline at the end
    path = write(tmp_path / "a.csv", data)
    rows = list(csv_rows(path, header=True))
    expected = [{"id": "1", "name": "multi\nline"}, {"id": "2", "name": "b"}, {"id": "3", "name": "c"}]
    assert [row for row, _ in rows] == expected
    offsets = [cursor for _, cursor in rows]
    assert offsets == [data.index(b"1,"), data.index(b"2,"), data.index(b"3,")]
    for index, offset in enumerate(offsets):  # every cursor resumes at its own row
        assert list(csv_rows(path, offset, header=True)) == rows[index:]
    assert next(csv_rows(path)) == (["id", "name"], 0)


def test_csv_rows_reads_a_partial_last_line_again_whole_once_completed(tmp_path: Path) -> None:
    path = write(tmp_path / "growing.csv", "1,é\n2,ha".encode())
    rows = list(csv_rows(path))
    assert rows[-1] == (["2", "ha"], 5)  # bytes, not characters: é is two
    path.write_bytes("1,é\n2,half done\n3,x\n".encode())  # the writer finished the line, and added one
    assert list(csv_rows(path, rows[-1][1])) == [(["2", "half done"], 5), (["3", "x"], 17)]


def test_csv_rows_refuses_a_cursor_that_starts_no_row(tmp_path: Path) -> None:
    path = write(tmp_path / "a.csv", b"id\n1\n22\n")
    with pytest.raises(CursorError, match=r"cursor 6: expected the offset of a line's start"):
        list(csv_rows(path, 6))
    with pytest.raises(CursorError, match=r"cursor 99: expected an offset within .*8 bytes"):
        list(csv_rows(path, 99))
    with pytest.raises(CursorError, match=r"cursor 1: expected an offset past the header row .*byte 3 on"):
        list(csv_rows(path, 1, header=True))
    with pytest.raises(CursorError, match=r"cursor 'x'.*byte offset"):
        csv_rows(path, "x")  # type: ignore[arg-type]


def test_redis_scan_walks_every_key_present_throughout_while_keys_come_and_go(r: redis.Redis) -> None:
    stable = {f"it:stable:{n}" for n in range(3000)}
    r.mset({key: 1 for key in stable} | {f"it:doomed:{n}": 1 for n in range(1000)})
    r.set("other", 1)
    seen: set[str] = set()
    cursors: list[int] = []
    for count, (key, cursor) in enumerate(redis_scan(r, match="it:*", count=200)):
        seen.add(key.decode() if isinstance(key, bytes) else key)
        cursors.append(cursor)
        if count == 500:  # keys deleted and added mid-walk: SCAN promises only the ones present throughout
            r.delete(*[f"it:doomed:{n}" for n in range(1000)])
            r.mset({f"it:new:{n}": 1 for n in range(2000)})
    assert stable <= seen and "other" not in seen
    assert cursors[0] == 0 and len(set(cursors)) > 5


def test_redis_scan_resumes_from_a_cursor_without_losing_keys(r: redis.Redis) -> None:
    keys = {f"k:{n}" for n in range(2000)}
    r.mset(dict.fromkeys(keys, 1))
    walk = redis_scan(r, match="k:*", count=100)
    first = [next(walk) for _ in range(700)]
    del walk  # the worker stopped here; the state holds the cursor of the next item
    _next_key, cursor = first[-1]
    resumed = list(redis_scan(r, match="k:*", cursor=cursor, count=100))
    done = {key for key, _ in first[:-1]} | {key for key, _ in resumed}
    assert {k.decode() if isinstance(k, bytes) else k for k in done} == keys
    with pytest.raises(CursorError, match=r"redis_scan: cannot resume from cursor '17'.*SCAN cursor"):
        redis_scan(r, cursor="17")  # type: ignore[arg-type]


def test_sql_enumerators_load_on_first_use() -> None:
    assert kiq.iteration.sql_rows.__module__ == "kiq.iteration.sql"
    with pytest.raises(AttributeError):
        kiq.iteration.no_such_enumerator  # noqa: B018
