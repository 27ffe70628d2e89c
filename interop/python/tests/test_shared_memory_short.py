"""A producer whose /dev/shm runs short: it waits for its frames in flight to
come back, as it waits for a full ring, instead of failing while memory it
owns is about to be released; it fails (NO_SPACE) when nothing can come back.
Each case runs in a private /dev/shm of its own size (a mount namespace: root)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import HERE, python_env

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                                reason="a private /dev/shm needs root and unshare")


def in_small_shm(size: str, *args: str) -> dict:
    """Runs children/small_shm.py ARGS with /dev/shm a fresh tmpfs of ``size``."""
    script = f"mount -t tmpfs -o size={size} none /dev/shm && exec \"$0\" \"$@\""
    p = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                        sys.executable, str(HERE / "children" / "small_shm.py"), *args],
                       env=python_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_a_stream_larger_than_shared_memory_waits_for_releases():
    # 40 frames of 4 MiB through 48 MiB: the producer must reuse what the slow consumer released.
    out = in_small_shm("48m", "stream", "short-stream", "40", "4")
    assert out["published"] == 40
    assert out["seen"] == list(range(40))


def test_with_nothing_to_come_back_publishing_fails_with_no_space():
    out = in_small_shm("48m", "stuck", "short-stuck", "4")
    assert out["published"] >= 1
    assert out["at_once"] == "NO_SPACE"
    assert out["waited"].startswith("NO_SPACE: ") and "still unreleased at the timeout" in out["waited"]
    assert out["seconds"] >= 0.25


def test_an_arena_shrinks_to_fit_the_shared_memory_left():
    # A 64 MiB arena does not fit in the 12 MiB left; one of the frame's size does.
    assert in_small_shm("48m", "fallback", "short-fallback")["frame_id"] == 1


def test_creating_a_ring_that_is_there_with_exist_ok_opens_it_even_with_no_room_for_a_second_copy():
    out = in_small_shm("12m", "reopen", "short-reopen")
    assert out["free_bytes"] < out["total_bytes"]
    assert out["slots"] == 1 << 16
