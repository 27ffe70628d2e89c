"""A claim taken back before its hand-over (SPEC.md §5.2, Confirm): a sweeper
that judged a previous occupant of the consumer's entry dead, stalled between
its check and its CAS, finds the newer occupant's claim at the same position
and makes the frame READY again. The consumer must neither hand that frame over
(it would come twice) nor fail: it claims again. The sweeper is
interop/tests/take_back.c, built here, in a process of its own."""
import asyncio
import shutil
import subprocess
import threading

import pyarrow as pa
import pytest

from conftest import REPO
from gpuring import Consumer, Producer, Ring

CC = shutil.which("cc") or shutil.which("gcc")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler to build interop/tests/take_back.c")
ENOUGH_FRAMES, ENOUGH_TAKEN_BACK, MAX_FRAMES = 30, 5, 20000


@pytest.fixture(scope="module")
def take_back(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("take-back") / "take_back")
    subprocess.run([CC, "-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{REPO / 'interop/include'}",
                    str(REPO / "interop/tests/take_back.c"), "-o", out, "-lpthread", "-lrt", "-ldl"], check=True)
    return out


def _try_next(c: Consumer):
    while (f := c.try_next()) is None:
        pass
    return f


TAKES = {
    "next": lambda c: c.next(timeout=5),
    "try_next": _try_next,
    "next_async": lambda c: asyncio.run(c.next_async(timeout=5)),
}


@pytest.mark.parametrize("how", TAKES)
def test_a_claim_taken_back_before_the_hand_over_is_claimed_again(ring_name, take_back, how):
    Ring.create(ring_name, slots=4).close()
    with Producer.open(ring_name) as producer, Consumer.open(ring_name) as consumer:
        sweeper = subprocess.Popen([take_back, ring_name, "0", str(MAX_FRAMES)], stdout=subprocess.PIPE, text=True)
        try:
            assert sweeper.stdout.readline() == "ready\n"
            took = [0]

            def count() -> None:
                for line in sweeper.stdout:
                    took[0] += line.startswith("took")
            threading.Thread(target=count, daemon=True).start()
            k = 0
            while k < MAX_FRAMES and (k < ENOUGH_FRAMES or took[0] < ENOUGH_TAKEN_BACK):
                producer.publish(pa.table({"k": pa.array([k], pa.int32())}), user_tag=k)
                f = TAKES[how](consumer)
                assert (f.user_tag, f.to_arrow().column("k")[0].as_py()) == (k, k)
                f.release()
                assert consumer.try_next() is None, f"frame {k} came once"
                k += 1
            assert took[0] > 0, "the sweeper took claims back"
        finally:
            sweeper.kill()
            sweeper.wait()
