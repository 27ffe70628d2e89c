"""A Python service publishing market ticks into the ring 'ticks', one frame
every --interval seconds: symbol, price, volume and time of each instrument.
Prints each frame's values as a JSON line, so that a test can compare them
with what a browser shows.

    python3 producer.py [--frames N] [--interval 0.5] [--ring ticks]
"""
import argparse
import json
import math
import time

import gpuring
import pyarrow as pa

SYMBOLS = ["ACME", "GLOBEX", "INITECH", "UMBRELLA"]


def frame(i: int) -> pa.Table:
    prices = [round(100 + 10 * k + 5 * math.sin(i / 3 + k), 2) for k in range(len(SYMBOLS))]
    volumes = [(i * 37 + k * 101) % 1000 for k in range(len(SYMBOLS))]
    return pa.table({
        "symbol": SYMBOLS,
        "price": pa.array(prices, pa.float64()),
        "volume": pa.array(volumes, pa.int32()),
        "seq": pa.array([i] * len(SYMBOLS), pa.int32()),
    })


def main() -> None:
    args = argparse.ArgumentParser()
    args.add_argument("--frames", type=int, default=0, help="frames to publish (0: until interrupted)")
    args.add_argument("--interval", type=float, default=0.5, help="seconds between frames")
    args.add_argument("--ring", default="ticks", help="the ring to publish into")
    a = args.parse_args()
    gpuring.Ring.create(a.ring, slots=64, exist_ok=True).close()
    with gpuring.Producer.open(a.ring) as producer:
        i = 0
        while a.frames == 0 or i < a.frames:
            table = frame(i)
            producer.publish(table, user_tag=i)
            print(json.dumps(table.to_pydict()), flush=True)
            producer.reap()
            i += 1
            time.sleep(a.interval)
        producer.drain(timeout=30)


if __name__ == "__main__":
    main()
