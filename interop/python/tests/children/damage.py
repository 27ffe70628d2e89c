"""Python participant of test/segment-damage.test.ts, as test/helpers/damage-child.ts
is the Node one: publishes or takes small frames for SECONDS while another
process writes random bytes into the ring, reopening after 50 failures in a row
or at once on DETACHED. Prints a JSON line of its counts every 250 ms and exits
2 at the first error that is not a GpuringError.
  damage.py producer|consumer|async producer|async consumer NAME SECONDS
The async roles wait in an asyncio loop, asleep on their doorbell sockets (SPEC.md §6.1)."""
import asyncio
import json
import sys
import time
import traceback

import pyarrow as pa

from gpuring import Consumer, GpuringError, Producer

role, name, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
end = time.monotonic() + seconds
counts: dict = {"ok": 0, "codes": {}}


def report() -> None:
    print(json.dumps(counts), flush=True)


def frame(n: int) -> pa.Table:
    """1 to 7 rows: an int column and a string column with nulls, as the Node child's."""
    rows = 1 + n % 7
    return pa.table({"i": pa.array(range(n, n + rows), pa.float64()),
                     "s": pa.array([None if k % 3 == 0 else f"s{k}" for k in range(rows)], pa.utf8())})


loop = asyncio.new_event_loop()


def publish(p: Producer, n: int) -> None:
    if role.startswith("async"):
        loop.run_until_complete(p.publish_async(frame(n), timeout=0.2))
    else:
        p.publish(frame(n), timeout=0.2)


def take(c: Consumer, _n: int) -> None:
    f = loop.run_until_complete(c.next_async(timeout=0.2)) if role.startswith("async") else c.next(timeout=0.2)
    try:
        table = f.to_arrow()  # gpuring's part: typed errors only
        try:
            table.to_pylist()
        except UnicodeDecodeError:  # string bytes overwritten: values are the producer's (SPEC.md §10a), not checked
            counts["codes"]["NOT_UTF8"] = counts["codes"].get("NOT_UTF8", 0) + 1
    finally:
        f.release()


def run() -> None:
    opener, step = (lambda: Producer.open(name), publish) if role.endswith("producer") else (lambda: Consumer.open(name), take)
    p = None
    failures, n, last = 0, 0, 0.0
    while time.monotonic() < end:
        if time.monotonic() - last > 0.25:
            report()
            last = time.monotonic()
        try:
            if p is None:
                p = opener()
            step(p, n)
            counts["ok"] += 1
            failures = 0
        except GpuringError as e:
            counts["codes"][e.code] = counts["codes"].get(e.code, 0) + 1
            failures += 1
            if p is not None and (failures >= 50 or e.code == "DETACHED"):
                try:
                    p.close()
                except GpuringError as e2:
                    counts["codes"][e2.code] = counts["codes"].get(e2.code, 0) + 1
                p, failures = None, 0
        n += 1
    if p is not None:
        p.close()


try:
    run()
except Exception:  # noqa: BLE001 -- what the test looks for: anything untyped
    counts["untyped"] = traceback.format_exc()
    report()
    sys.exit(2)
report()
