"""The keys a warm-up searched without a win (cache/searched.py): kept across processes, one
line each, unreadable lines skipped."""

from __future__ import annotations

from kernelpro_backend.cache.searched import SearchedKeys


def test_a_searched_key_is_known_to_a_later_reader_once(tmp_path):
    path = tmp_path / "searched.jsonl"
    SearchedKeys(path).add("a" * 64, "softmax", 35.0)
    later = SearchedKeys(path)
    assert "a" * 64 in later and "b" * 64 not in later
    later.add("a" * 64, "softmax", 35.0)  # already there: not written twice
    assert len(path.read_text().splitlines()) == 1


def test_an_unreadable_line_is_skipped(tmp_path, caplog):
    path = tmp_path / "searched.jsonl"
    path.write_text('{"digest": "' + "c" * 64 + '"}\nnot json\n')
    keys = SearchedKeys(path)
    assert "c" * 64 in keys
    assert "skipping unreadable line 2" in caplog.text
