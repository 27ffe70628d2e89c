"""Damaged segment images through the whole Python API (the C suite's
fuzz_segment, for the Python implementation): each golden image
(fixtures/segments) with random bytes changed in its segment and arena goes
through open, inspect, sweep, a consumer taking and reading every frame, and a
producer publishing one. Shared memory is untrusted input, so every call must
return, or raise GpuringError with its code; any other exception, a crash or a
hang (the watchdog) fails. GPURING_FUZZ_ITERATIONS and GPURING_FUZZ_SEED widen
or vary the run."""
from __future__ import annotations

import os
import random
import signal
import struct
from collections import Counter
from typing import Callable, TypeVar

import pyarrow as pa
import pytest

from gpuring import Consumer, GpuringError, Producer, Ring
from segment_image import IMAGES, RING, image_bytes, load, unload

ITERATIONS = int(os.environ.get("GPURING_FUZZ_ITERATIONS", "1500"))
SEED = int(os.environ.get("GPURING_FUZZ_SEED", "1"))
WATCHDOG_SECONDS = 20
ARENA_SPAN = 8192  # the arena's header and the frame bodies the images hold lie in its first pages
WORDS = (0, 1, 2**48 - 1, 2**53, 2**63, 2**64 - 1)

T = TypeVar("T")


class Hang(Exception):
    pass


def mutate(b: bytearray, rnd: random.Random, span: int) -> None:
    """In the first `span` bytes, 1-8 changes: a flipped bit, an edge byte, an edge or random 64-bit word, a random byte."""
    n = min(len(b), span)
    if n == 0:
        return
    for _ in range(rnd.randint(1, 8)):
        at, kind = rnd.randrange(n), rnd.random()
        if kind < 0.3:
            b[at] ^= 1 << rnd.randrange(8)
        elif kind < 0.5:
            b[at] = rnd.choice((0, 1, 0x7F, 0x80, 0xFF))
        elif kind < 0.8 and (at & ~7) + 8 <= n:
            struct.pack_into("<Q", b, at & ~7, rnd.choice(WORDS) if rnd.random() < 0.5 else rnd.getrandbits(64))
        else:
            b[at] = rnd.randrange(256)


def typed(tally: Counter, call: Callable[[], T]) -> T | None:
    """The call's result, or None where it raised GpuringError (counted by code)."""
    try:
        return call()
    except GpuringError as e:
        tally[e.code] += 1
        return None


def take_and_read(consumer: Consumer, tally: Counter) -> None:
    for _ in range(8):
        try:
            frame = consumer.try_next()
        except GpuringError as e:  # a damaged frame goes; the next may be whole
            tally[e.code] += 1
            continue
        if frame is None:
            return
        with frame:
            if typed(tally, frame.to_arrow) is not None:
                tally["frames read"] += 1


def exercise(tally: Counter, table: pa.Table) -> None:
    ring = typed(tally, lambda: Ring.open(RING, timeout=0.01))
    if ring is None:
        return
    tally["opened"] += 1
    with ring:
        typed(tally, ring.inspect)
        typed(tally, ring.sweep)
    consumer = typed(tally, lambda: Consumer.open(RING, timeout=0.01))
    if consumer is not None:
        with consumer:
            take_and_read(consumer, tally)
    producer = typed(tally, lambda: Producer.open(RING, timeout=0.01))
    if producer is not None:
        with producer:
            if typed(tally, lambda: producer.publish(table, block=False)) is not None:
                tally["published"] += 1


def test_damaged_segment_images_get_typed_errors_or_frames_that_read():
    rnd = random.Random(SEED)
    table = pa.table({"seq": pa.array([1, 2, 3], pa.int64())})
    tally: Counter = Counter()

    def watchdog(*_: object) -> None:
        raise Hang(f"a call on a damaged image took over {WATCHDOG_SECONDS} s")

    previous = signal.signal(signal.SIGALRM, watchdog)
    try:
        for i in range(ITERATIONS):
            image = rnd.choice(IMAGES)
            seg, arena = image_bytes(image)
            if rnd.random() < 0.9:
                mutate(seg, rnd, len(seg))
            if arena is not None and rnd.random() < 0.3:
                mutate(arena, rnd, ARENA_SPAN)
            for b in (seg, arena):
                if b is not None and rnd.random() < 0.05:  # a truncated (or, cut at its length, whole) object
                    del b[rnd.randrange(len(b) + 1):]
            unload()
            load(seg, arena)
            signal.alarm(WATCHDOG_SECONDS)
            try:
                exercise(tally, table)
            except Exception as e:
                pytest.fail(f"iteration {i} (seed {SEED}) of image {image}: {type(e).__name__}: {e}")
            finally:
                signal.alarm(0)
    finally:
        signal.signal(signal.SIGALRM, previous)
        unload()
    # Not vacuous: damaged images opened, and frames in them were read and published.
    assert tally["opened"] > ITERATIONS // 4 and tally["frames read"] > 0 and tally["published"] > 0, dict(tally)
