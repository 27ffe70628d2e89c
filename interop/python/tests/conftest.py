"""Shared test helpers: the repository root, fresh ring names, child processes."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from gpuring.segment import Segment

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "fixtures"
HERE = Path(__file__).resolve().parent


@pytest.fixture
def ring_name():
    """A fresh segment name, removed (with any arenas) after the test."""
    name = f"py-{uuid.uuid4().hex[:12]}"
    yield name
    for f in os.listdir("/dev/shm"):
        if f == f"gpuring.{name}" or f.startswith(f"gpuring.{name}."):
            os.unlink(f"/dev/shm/{f}")


def python_env() -> dict:
    """The environment of a child interpreter that imports this checkout's gpuring."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "interop/python/src"), os.environ.get("PYTHONPATH", "")]),
                PYTHONUNBUFFERED="1")


def python_child(script: str, *args: str, env: dict[str, str] | None = None, **kw) -> subprocess.Popen:
    """Starts tests/children/SCRIPT.py in its own interpreter, with ``env`` added to its environment."""
    return subprocess.Popen([sys.executable, str(HERE / "children" / f"{script}.py"), *args],
                            env={**python_env(), **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def node_child(script: str, *args: str) -> subprocess.Popen:
    """Starts a TypeScript helper of the Node suite (needs `npm install` at the root)."""
    return subprocess.Popen(["node", "--import", "tsx", str(REPO / "test" / "helpers" / script), *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def node_available() -> bool:
    return (REPO / "node_modules" / "tsx").exists() and any((REPO / "build").glob("**/gpuring.node"))


def break_utf8_offsets(ring: str, producer, values: list[str], index: int | None = None, to: int = 99) -> None:
    """Sets value offset ``index`` (default: the last) of the published utf8 column
    holding ``values`` (written as 0, len(v0), ...) to ``to``, in shared memory."""
    ends, at = [0], 0
    for v in values:
        at += len(v.encode())
        ends.append(at)
    pattern = b"".join(e.to_bytes(4, "little") for e in ends)
    path = f"/dev/shm/gpuring.{ring}.p{producer.index}g{producer.generation}.a0"
    with open(path, "r+b") as f:
        found = f.read().find(pattern)
        assert found > 0, "the offsets are not in the arena"
        f.seek(found + 4 * (len(values) if index is None else index))
        f.write(to.to_bytes(4, "little"))


def publish_and_read_back(producer, consumer, batch):
    """Publishes ``batch`` and asserts that the frame the consumer takes reads
    back equal (schema with metadata, every column); returns that frame, released."""
    producer.publish(batch, timeout=10)
    with consumer.next(timeout=10) as frame:
        got = frame.to_arrow()
        assert got.schema.equals(batch.schema, check_metadata=True)
        for name in batch.schema.names:
            assert got.column(name).equals(batch.column(name).combine_chunks()), name
    del got  # the arrays hold the lease
    return frame


def rewrite_entry(name: str, index: int, add: int, state: int) -> None:
    """Another process changes entry ``index``'s state word: (w + add) with ``state``."""
    pid = os.fork()
    if pid == 0:
        seg = Segment.open(name)
        w = seg.participant_word(index)
        seg.mem.store64(seg.participant(index), ((w + add) & ~7 & (2**64 - 1)) | state)
        os._exit(0)
    os.waitpid(pid, 0)
