"""Child of the kill -9 torture run (test/torture.test.ts), killed at any moment.
  torture.py produce NAME ID LOG   says "ready", publishes frames ID:0, ID:1, ... (tag ID << 32 | seq) forever,
                                   appending seq to LOG after each publish returned
  torture.py consume NAME LOG      says "ready", takes frames forever; checks each one's columns against its
                                   tag and appends the tag (or "BAD tag") to LOG before releasing it
  torture.py produce-async NAME ID LOG, torture.py consume-async NAME LOG
                                   the same in an asyncio loop (publish_async, next_async): asleep on
                                   doorbell sockets (SPEC.md §6.1) instead of the futex
On a broadcast ring consumers subscribe with the on_slow policy GPURING_TORTURE_ON_SLOW names
(default "block"), and log "MISSED n" where next says n frames were dropped for them
(FRAMES_MISSED, EVICTED). With GPURING_TORTURE_START=oldest they also take the frames still in
the ring when they join.
The frame: producer int32, seq int32, check utf8 "producer:seq:(seq * 2654435761) mod 2^32",
the same as the Node children publish."""
import asyncio
import os
import sys
import time

import pyarrow as pa

from gpuring import Consumer, Frame, GpuringError, Producer


def check_text(producer: int, seq: int) -> str:
    return f"{producer}:{seq}:{(seq * 2654435761) & 0xFFFFFFFF}"


def frame(ident: int, seq: int) -> pa.Table:
    return pa.table({"producer": pa.array([ident], pa.int32()), "seq": pa.array([seq], pa.int32()),
                     "check": [check_text(ident, seq)]})


ON_SLOW = os.environ.get("GPURING_TORTURE_ON_SLOW", "block")
START = os.environ.get("GPURING_TORTURE_START", "newest")


def log_missed(log: int, e: GpuringError) -> None:
    """Appends "MISSED n" for frames dropped for this subscriber; any other error is the run's failure."""
    global missed
    if e.code not in ("FRAMES_MISSED", "EVICTED"):
        raise e
    missed += e.missed
    os.write(log, f"MISSED {e.missed}\n".encode())


OPENED = time.monotonic()
taken = 0
missed = 0


def share_of(consumer: Consumer) -> str:
    """On a broadcast ring, the frame the consumer holds as its slot says now: the slot's
    position and state, whether the frame still carries the consumer's bit, the cursor."""
    seg = consumer._seg
    if not seg.broadcast or len(consumer._held) != 1:
        return "-"
    pos = next(iter(consumer._held))
    w = seg.mem.load64(seg.slot(pos))
    bit = seg.mem.load64(seg.slot(pos) + 8) >> consumer.index & 1
    return (f"pos {pos}: slot {w >> 16}/{(w >> 13) & 7} bit {bit} cursor "
            f"{seg.mem.load64(seg.participant(consumer.index, 'cursor')):#x}")


def log_frame(log: int, frame: Frame, consumer: Consumer) -> None:
    """Appends the frame's tag, or "BAD tag" and what the frame held where its columns
    do not match it (a later frame of its producer there: its memory was reused under
    this lease), how many frames this process took before it and when, how many it was
    told it missed, and its share as taken and as it stands after the read; then
    releases it."""
    global taken
    taken += 1
    at_take = share_of(consumer)
    row = frame.to_arrow().to_pylist()[0]
    tag = frame.user_tag
    ok = (row["producer"] << 32 | row["seq"]) == tag and row["check"] == check_text(row["producer"], row["seq"])
    held = (f" (frame {frame.frame_id}: it held {row['producer']}:{row['seq']} {row['check']!r}; this process's frame"
            f" {taken}, {time.monotonic() - OPENED:.3f} s after it started, {missed} missed before, entry"
            f" {consumer.index}, start {START}; taken: {at_take}; after: {share_of(consumer)})")
    os.write(log, f"{tag}\n".encode() if ok else f"BAD {tag}{held}\n".encode())
    frame.release()


def produce(name: str, ident: int, log: int) -> None:
    with Producer.open(name, timeout=10) as producer:
        print("ready", flush=True)
        seq = 0
        while True:
            producer.publish(frame(ident, seq), user_tag=(ident << 32) | seq, timeout=120)
            os.write(log, f"{seq}\n".encode())
            seq += 1


def consume(name: str, log: int) -> None:
    with Consumer.open(name, timeout=10, on_slow=ON_SLOW, start=START) as consumer:
        print("ready", flush=True)
        while True:
            try:
                log_frame(log, consumer.next(timeout=None), consumer)
            except GpuringError as e:
                log_missed(log, e)


async def produce_async(name: str, ident: int, log: int) -> None:
    with Producer.open(name, timeout=10) as producer:
        print("ready", flush=True)
        seq = 0
        while True:
            await producer.publish_async(frame(ident, seq), user_tag=(ident << 32) | seq, timeout=120)
            os.write(log, f"{seq}\n".encode())
            seq += 1


async def consume_async(name: str, log: int) -> None:
    with Consumer.open(name, timeout=10, on_slow=ON_SLOW, start=START) as consumer:
        print("ready", flush=True)
        while True:
            try:
                log_frame(log, await consumer.next_async(timeout=None), consumer)
            except GpuringError as e:
                log_missed(log, e)


def main() -> None:
    role, name = sys.argv[1], sys.argv[2]
    log = os.open(sys.argv[-1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    if role == "produce":
        produce(name, int(sys.argv[3]), log)
    elif role == "consume":
        consume(name, log)
    elif role == "produce-async":
        asyncio.run(produce_async(name, int(sys.argv[3]), log))
    else:
        asyncio.run(consume_async(name, log))


if __name__ == "__main__":
    main()
