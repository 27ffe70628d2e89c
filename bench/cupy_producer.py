"""The Python side of `npm run bench:gpu`: a CuPy producer.
  latency NAME N BYTES   publishes one float32 CuPy column of BYTES N times, one at
                         a time, tagged with time.monotonic_ns() (the clock of Node's
                         process.hrtime), waiting for each release before the next
  rate NAME N BYTES      publishes N frames of that column as fast as the ring takes
                         them, then waits for every release
  latency-prepared, rate-prepared   the same, the column prepared once (Producer.prepare)
  made NAME N BYTES      every 2 ms (asleep), makes the frame (three in-place CuPy
                         kernels on the column) and publishes it prepared, tagged with
                         when making began, waiting for each release
  made-heads-up          the same, calling producer.heads_up() as making begins
Each publish describes the array afresh (export, event record), as a producer
of new arrays would; the allocation stays the same, as in a caching allocator.
A prepared frame is described and encoded once; each publish only records the
event when the stream is busy."""
import statistics
import sys
import time

import cupy as cp

from gpuring import Producer

mode, name, n, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
x = cp.arange(size // 4, dtype=cp.float32)
cp.cuda.Device().synchronize()


def make_and_publish(producer: Producer) -> None:
    """The made modes: each frame made in place (three kernels), then published prepared."""
    prepared = producer.prepare({"x": x})
    making, publishing = [], []
    for _ in range(n):
        time.sleep(0.002)
        began = time.monotonic_ns()
        if mode == "made-heads-up":
            producer.heads_up()
        for _ in range(3):
            cp.multiply(x, 1.0001, out=x)
        made = time.monotonic_ns()
        prepared.publish(user_tag=began)
        publishing.append((time.monotonic_ns() - made) / 1e3)
        making.append((made - began) / 1e3)
        producer.drain()
    print(f"{mode}: making p50 {statistics.median(making):.1f} µs, publish p50 {statistics.median(publishing):.1f} µs", file=sys.stderr)


def publish_ready(producer: Producer) -> None:
    """The latency and rate modes: the same column published N times."""
    publish = producer.prepare({"x": x}).publish if mode.endswith("-prepared") else (
        lambda user_tag: producer.publish({"x": x}, user_tag=user_tag))
    for _ in range(n):
        publish(user_tag=time.monotonic_ns())
        if mode.startswith("latency"):
            producer.drain()
    producer.drain()


with Producer.open(name) as producer:
    (make_and_publish if mode.startswith("made") else publish_ready)(producer)
