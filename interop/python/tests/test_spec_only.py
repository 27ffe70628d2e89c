"""The C programs written from SPEC.md alone (interop/spec-only, built here with
the system C compiler) against Python, each side in its own process: values
both ways, and a producer killed mid-publish whose published frames still
arrive while the slot it left half-written is skipped."""
import json
import shutil
import subprocess
import time

import pyarrow as pa
import pytest

from conftest import REPO, rewrite_entry
from gpuring import Consumer, GpuringError, Producer, Ring
from gpuring import layout as L

CC = shutil.which("cc") or shutil.which("gcc")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler to build interop/spec-only")


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    """Paths of the built spec_producer and spec_consumer; no include directory but their own."""
    out = tmp_path_factory.mktemp("spec-only")
    built = {}
    for name in ("spec_producer", "spec_consumer"):
        built[name] = str(out / name)
        subprocess.run([CC, "-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", str(REPO / "interop/spec-only" / f"{name}.c"),
                        "-o", built[name], "-lrt"], check=True)
    return built


def producer_rows(k: int, rows: int) -> dict:
    """The columns spec_producer writes in frame K of ROWS rows."""
    ids = [k * rows + r for r in range(rows)]
    return {"id": ids, "score": [None if i % 7 == 0 else i / 4 for i in ids], "name": [f"row-{i}" for i in ids]}


def test_spec_producer_to_python(ring_name, spec):
    Ring.create(ring_name).close()
    proc = subprocess.Popen([spec["spec_producer"], ring_name, "3", "400"], stdout=subprocess.PIPE, text=True)
    with Consumer.open(ring_name) as consumer:
        for k in range(3):
            with consumer.next(timeout=30) as frame:
                assert (frame.user_tag, frame.frame_id) == (k, k + 1)
                assert frame.to_arrow().to_pydict() == producer_rows(k, 400)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert json.loads(out) == {"published": 3}


def expected_report(batch: pa.RecordBatch, frame: int, tag: int) -> dict:
    """What spec_consumer prints for BATCH: per column its null count and a checksum."""
    columns = []
    for field, column in zip(batch.schema, batch.columns):
        c = {"name": field.name, "format": {"int32": "i", "double": "g", "string": "u"}[str(field.type)],
             "memory": "host", "nulls": column.null_count}
        if pa.types.is_string(field.type):
            c["chars"] = sum(len(v.encode()) for v in column.to_pylist() if v is not None)
        else:
            c["sum"] = sum(v for v in column.to_pylist() if v is not None)
        columns.append(c)
    return {"frame": frame, "tag": tag, "rows": batch.num_rows, "columns": columns}


def test_python_to_spec_consumer(ring_name, spec):
    Ring.create(ring_name).close()
    n = 257
    table = pa.table({
        "id": pa.array(range(n), pa.int32()),
        "score": pa.array([None if i % 3 == 0 else i * 0.5 for i in range(n)], pa.float64()),
        "name": pa.array([None if i % 4 == 0 else f"ñ-{i}" for i in range(n)], pa.string()),
    })
    batches = [table.to_batches()[0], table.slice(5, 200).combine_chunks().to_batches()[0]]
    proc = subprocess.Popen([spec["spec_consumer"], ring_name, "2", "30000"], stdout=subprocess.PIPE, text=True)
    with Producer.open(ring_name) as producer:
        for k, batch in enumerate(batches):
            producer.publish(batch, timeout=30, user_tag=k)
        producer.drain(timeout=30)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert [json.loads(line) for line in out.splitlines()] == [expected_report(b, k + 1, k) for k, b in enumerate(batches)]


def test_spec_producer_killed_mid_publish(ring_name, spec):
    Ring.create(ring_name).close()
    proc = subprocess.run([spec["spec_producer"], ring_name, "2", "100", "--die-writing"])
    assert proc.returncode == -9
    with Consumer.open(ring_name) as consumer:
        for k in range(2):
            with consumer.next(timeout=30) as frame:
                assert frame.to_arrow().to_pydict() == producer_rows(k, 100)
        with Producer.open(ring_name) as producer:
            producer.publish(pa.table({"x": pa.array([7], pa.int8())}), timeout=30, user_tag=7)
            with consumer.next(timeout=30) as frame:
                assert frame.user_tag == 7, "the slot the dead producer left WRITING is skipped"
            producer.drain(timeout=30)


def _next_without_sweeping(consumer, seconds: float = 20):
    """The next frame, polled for: a wait of 250 ms or more would sweep (§7)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return consumer.next(timeout=0)
        except GpuringError as e:
            if e.code != "TIMEOUT" or time.monotonic() > deadline:
                raise
        time.sleep(0.01)


def test_spec_producer_sweep_moves_on_frames_released_to_a_producer_that_lost_its_entry(ring_name, spec):
    """SPEC.md §7 step 3, from the text alone: the frames released to a producer
    whose generation was rewritten (ACTIVE under its live pid, so never DEAD)
    fill the ring; only the spec-only producer's own sweep can move them on
    (our consumer polls, and a poll never sweeps)."""
    table = pa.table({"x": pa.array([1, 2, 3], pa.int64())})
    with Ring.create(ring_name, slots=4), Consumer.open(ring_name) as consumer:
        lost = Producer.open(ring_name)
        for _ in range(4):
            lost.publish(table, timeout=0)
        for _ in range(4):
            consumer.next(timeout=5).release()
        rewrite_entry(ring_name, lost.index, 5 << 32, L.P_ACTIVE)
        # `lost` stays open and idle until the end: its close would not sweep, but nothing else here may.
        proc = subprocess.Popen([spec["spec_producer"], ring_name, "4", "10"], stdout=subprocess.PIPE, text=True)
        try:
            for k in range(4):
                with _next_without_sweeping(consumer) as frame:
                    assert frame.user_tag == k
            out, _ = proc.communicate(timeout=30)
        finally:
            proc.kill()
        assert proc.returncode == 0
        assert json.loads(out) == {"published": 4}
        lost.close()
