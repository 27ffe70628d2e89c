"""Child: a consumer waiting for a frame in an asyncio loop; says "asleep" once
its doorbell bit is set, then waits to be killed."""
import asyncio
import sys

from gpuring import Consumer, Ring


async def main(consumer: Consumer, ring: Ring) -> None:
    waiting = asyncio.ensure_future(consumer.next_async())
    while not next(p for p in ring.inspect()["participants"] if p["index"] == consumer.index)["asleep"]:
        await asyncio.sleep(0.001)
    print("asleep", flush=True)
    await waiting

name = sys.argv[1]
asyncio.run(main(Consumer.open(name), Ring.open(name)))
