"""A bridge's hop stamps (bridge/hops.py, for bench:remote --hops): kept in
memory, written at close only where GPURING_BRIDGE_HOPS asks for them."""
from __future__ import annotations

from gpuring.bridge.hops import ENV, Hops


def test_stamps_are_written_at_close_where_asked_for(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, str(tmp_path / "run"))
    hops = Hops("sink")
    hops.stamp(7, "received")
    hops.stamp(7, "published")
    assert not (tmp_path / "run.sink").exists()  # nothing written while it runs
    hops.write()
    lines = [line.split() for line in (tmp_path / "run.sink").read_text().splitlines()]
    assert [(tag, stage) for tag, stage, _ in lines] == [("7", "received"), ("7", "published")]
    assert int(lines[0][2]) <= int(lines[1][2])


def test_without_the_variable_nothing_is_kept(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    hops = Hops("source")
    hops.stamp(1, "taken")
    hops.write()
    assert list(tmp_path.iterdir()) == []
