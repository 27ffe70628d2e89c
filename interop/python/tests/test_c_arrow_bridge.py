"""pyarrow as referee for C: frames received by the C header's consumer and
exported through the Arrow C data interface (interop/c/arrow_bridge.c, built
here with the system C compiler) are accepted by pyarrow's importer and equal
the tables they were published from, for every type."""
import ctypes
import gc
import shutil
import subprocess

import pyarrow as pa
import pytest

from all_types import all_types_table
from conftest import REPO, break_utf8_offsets
from gpuring import Producer, Ring

CC = shutil.which("cc") or shutil.which("gcc")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler to build interop/c/arrow_bridge.c")


class ArrowSchema(ctypes.Structure):
    _fields_ = [("raw", ctypes.c_byte * 72)]


class ArrowArray(ctypes.Structure):
    _fields_ = [("raw", ctypes.c_byte * 80)]


@pytest.fixture(scope="module")
def bridge(tmp_path_factory):
    out = tmp_path_factory.mktemp("bridge") / "libgpuring_arrow_bridge.so"
    subprocess.run([CC, "-std=c11", "-O1", "-g", "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror",
                    "-I", str(REPO / "interop/include"), str(REPO / "interop/c/arrow_bridge.c"),
                    "-o", str(out), "-lpthread"], check=True)
    lib = ctypes.CDLL(str(out))
    lib.gpr_bridge_open.argtypes = [ctypes.c_char_p, ctypes.c_uint32, ctypes.POINTER(ctypes.c_void_p),
                                    ctypes.c_char_p, ctypes.c_size_t]
    lib.gpr_bridge_next.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.POINTER(ArrowSchema),
                                    ctypes.POINTER(ArrowArray), ctypes.c_char_p, ctypes.c_size_t]
    lib.gpr_bridge_close.argtypes = [ctypes.c_void_p]
    return lib


class BridgeConsumer:
    def __init__(self, lib, ring: str) -> None:
        self.lib, self.handle, self.error = lib, ctypes.c_void_p(), ctypes.create_string_buffer(256)
        assert lib.gpr_bridge_open(ring.encode(), 1000, ctypes.byref(self.handle), self.error, 256) == 0, self.error.value

    def next(self, timeout_ms: int = 5000) -> pa.RecordBatch:
        schema, array = ArrowSchema(), ArrowArray()
        rc = self.lib.gpr_bridge_next(self.handle, timeout_ms, ctypes.byref(schema), ctypes.byref(array), self.error, 256)
        if rc:
            raise RuntimeError(self.error.value.decode())
        return pa.RecordBatch._import_from_c(ctypes.addressof(array), ctypes.addressof(schema))

    def close(self) -> None:
        self.lib.gpr_bridge_close(self.handle)


def test_every_type_exported_from_c_equals_its_source(ring_name, bridge):
    ring = Ring.create(ring_name, slots=8)
    full = all_types_table(29)
    sources = [full, full.slice(3, 23), full.slice(0, 0)]
    with Producer.open(ring_name) as producer:
        for t in sources:
            producer.publish(t)
        consumer = BridgeConsumer(bridge, ring_name)
        try:
            for want in sources:
                got = consumer.next()
                want_batch = want.combine_chunks().to_batches()[0] if want.num_rows else pa.RecordBatch.from_pylist([], schema=want.schema)
                assert got.schema.equals(want.schema, check_metadata=True)
                for name in want.column_names:
                    assert got.column(name).equals(want_batch.column(name)), name
                got.validate()  # full validation would also reject the source: its date64 values are not whole days
        finally:
            consumer.close()
    ring.close()


def test_the_frame_stays_leased_until_pyarrow_releases_the_batch(ring_name, bridge):
    ring = Ring.create(ring_name, slots=4)
    with Producer.open(ring_name) as producer:
        producer.publish(pa.table({"x": pa.array(range(1000), pa.int64())}))
        consumer = BridgeConsumer(bridge, ring_name)
        batch = consumer.next()
        column = batch.column("x")
        del batch
        gc.collect()
        assert producer.reap() == 0 and producer.in_flight == 1, "an array still points into the frame"
        assert column.to_pylist()[-1] == 999
        del column
        gc.collect()
        producer.drain(timeout=5)
        assert producer.in_flight == 0
        consumer.close()
    ring.close()


def test_a_damaged_frame_is_refused_with_its_code_and_the_ring_moves_on(ring_name, bridge):
    ring = Ring.create(ring_name, slots=4)
    with Producer.open(ring_name) as producer:
        producer.publish(pa.table({"s": pa.array(["ab", "cd"])}))
        producer.publish(pa.table({"i": pa.array([7], pa.int32())}))
        break_utf8_offsets(ring_name, producer, ["ab", "cd"])
        consumer = BridgeConsumer(bridge, ring_name)
        with pytest.raises(RuntimeError, match="^FRAME_BOUNDS: column 's'"):
            consumer.next()
        assert consumer.next().column("i").to_pylist() == [7]
        consumer.close()
        producer.drain(timeout=5)
    ring.close()


def test_a_value_offset_inside_the_slice_is_checked_by_c_too(ring_name, bridge):
    """Offsets [0, 64 MiB, 4, 5]: the ends pass; reading value 0 crashed the C consumer before."""
    ring = Ring.create(ring_name, slots=4)
    with Producer.open(ring_name) as producer:
        producer.publish(pa.table({"s": pa.array(["ab", "cd", "e"])}))
        break_utf8_offsets(ring_name, producer, ["ab", "cd", "e"], index=1, to=64 << 20)
        consumer = BridgeConsumer(bridge, ring_name)
        with pytest.raises(RuntimeError, match="^FRAME_BOUNDS: column 's': value offset 1 is 67108864"):
            consumer.next()
        consumer.close()
        producer.drain(timeout=5)
    ring.close()
