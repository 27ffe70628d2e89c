"""Device columns across processes, on a machine with an NVIDIA GPU (skipped,
with the reason, elsewhere): CuPy and PyTorch producers to a Node consumer,
a Node producer to CuPy and PyTorch consumers, Python to Python."""
import gc
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import REPO, node_available, node_child, python_child
from gpuring import Consumer, GpuringError, Producer, Ring

cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
from cuda_stall import load_stall_and_fill, stall  # noqa: E402 (imports CuPy)


def _gpu_reason():
    try:
        from gpuring import cuda_driver
        return None if cuda_driver.device_count() > 0 else "no CUDA device"
    except GpuringError as e:
        return str(e)


pytestmark = pytest.mark.skipif(_gpu_reason() is not None, reason=f"needs an NVIDIA GPU: {_gpu_reason()}")
ROWS = 1000


def _expected():
    return [i * 0.5 for i in range(ROWS)], [[10 * i + j for j in range(3)] for i in range(ROWS)]


_ALLOC_CONF = {"torch-async-pool": {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"},
               "torch-expandable": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
               "torch-expandable-big": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
               "prepared-vmm": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}}
_KIND = {"cupy-async-pool": "cuda-pool", "torch-async-pool": "cuda-pool", "torch-expandable": "cuda-vmm"}


def _device_producer(ring_name, library, rows=ROWS):
    """A child process that published one device frame from ``library``."""
    if library.startswith("torch"):
        pytest.importorskip("torch")
    Ring.create(ring_name).close()
    child = python_child("device_produce", ring_name, library, str(rows), env=_ALLOC_CONF.get(library, {}))
    assert json.loads(child.stdout.readline())["published"] == 1
    return child


@pytest.mark.parametrize("library", ["cupy", "torch", "cupy-async-pool", "torch-async-pool", "torch-expandable"])
def test_python_device_producer_to_python_consumer(ring_name, library):
    child = _device_producer(ring_name, library)
    with Consumer.open(ring_name) as consumer:
        with consumer.next(timeout=30) as frame:
            assert frame.on_device
            kinds = {b.kind for b in frame.description.buffers()} - {"absent"}
            assert kinds == {_KIND.get(library, "cuda-ipc")}
            cols = frame.to_cupy()
            x, m = _expected()
            assert cols["x"].dtype == cupy.float32 and cols["x"].tolist() == x
            assert cols["m"].shape == (ROWS, 3) and cols["m"].tolist() == m
            del cols
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err


@pytest.mark.skipif(not node_available(), reason="the Node package is not built here")
@pytest.mark.parametrize("library", ["cupy", "torch", "cupy-async-pool", "torch-async-pool", "torch-expandable"])
def test_python_device_producer_to_node_consumer(ring_name, library):
    producer = _device_producer(ring_name, library)
    node = node_child("arrow-peer.ts", "columns", ring_name)
    out, err = node.communicate(timeout=60)
    assert node.returncode == 0, err
    cols = json.loads(out.strip().splitlines()[-1])["columns"]
    x, m = _expected()
    assert cols["x"] == x and cols["m"] == m
    _, err = producer.communicate(timeout=60)
    assert producer.returncode == 0, err


@pytest.mark.skipif(not node_available(), reason="the Node package is not built here")
def test_node_device_producer_to_cupy_and_torch_consumers(ring_name):
    pytest.importorskip("torch")
    Ring.create(ring_name).close()
    node = node_child("device-child.ts", "big", ring_name, str(4 * 1_000_000))
    with Consumer.open(ring_name) as consumer:
        with consumer.next(timeout=60) as frame:
            (name,) = frame.column_names
            values = frame.to_cupy()[name]
            assert values.dtype == cupy.float32 and values.size == 1_000_000
            assert bool((values == cupy.arange(1_000_000, dtype=cupy.float32)).all())
            tensor = frame.to_torch()[name]
            assert tensor.is_cuda and float(tensor[999_999]) == 999_999.0
            del values, tensor
        out, err = node.communicate(timeout=60)
    assert node.returncode == 0, err


@pytest.mark.skipif(not node_available(), reason="the Node package is not built here")
def test_node_pool_memory_to_cupy_each_allocation_imported_and_freed(ring_name):
    Ring.create(ring_name).close()
    node = node_child("device-child.ts", "pool", ring_name, "20")
    with Consumer.open(ring_name) as consumer:
        for i in range(20):
            with consumer.next(timeout=60) as frame:
                (name,) = frame.column_names
                assert frame.description.columns[0].buffers[1].kind == "cuda-pool"
                values = frame.to_cupy()[name]
                assert values.size == 1 << 18 and bool((values == i).all()), i
                del values
            gc.collect()
        assert consumer._pools is not None and not consumer._pools._imports, "every import freed at release"
        assert len(consumer._pools._pools) == 1, "the pool imported once"
        out, err = node.communicate(timeout=60)
    assert node.returncode == 0, err
    assert not consumer._pools._pools, "the imported pool destroyed at close"


@pytest.mark.skipif(not node_available(), reason="the Node package is not built here")
def test_a_producers_idle_mapping_and_imported_pool_stay_while_it_lives_and_go_once_it_is_killed(ring_name):
    Ring.create(ring_name).close()
    node = node_child("device-child.ts", "leave", ring_name)  # a cuda-ipc frame, a cuda-pool frame, then idles
    with Consumer.open(ring_name) as consumer:
        for kind, value in (("cuda-ipc", 1), ("cuda-pool", 2)):
            with consumer.next(timeout=60) as frame:
                assert frame.description.columns[0].buffers[1].kind == kind
                values = frame.to_cupy()["x"]
                assert bool((values == value).all())
                del values
            gc.collect()
        assert json.loads(node.stdout.readline()) == {"drained": True}
        with pytest.raises(GpuringError):
            consumer.next(timeout=0.6)  # waits long enough to look for dead producers twice
        assert len(consumer._device.open) == 1, "a live producer's mapping stays open"
        assert len(consumer._pools._pools) == 1, "a live producer's pool stays imported"
        node.kill()
        node.wait()
        with pytest.raises(GpuringError):
            consumer.next(timeout=0.6)
        assert not consumer._device.open, "its mapping was closed while the consumer ran"
        assert not consumer._pools._pools, "its pool was destroyed while the consumer ran"


def test_non_contiguous_and_boolean_device_arrays_are_refused(ring_name):
    Ring.create(ring_name).close()
    with Producer.open(ring_name) as producer:
        for bad in (cupy.arange(10, dtype=cupy.float32)[::2], cupy.zeros(4, dtype=cupy.bool_)):
            with pytest.raises(GpuringError) as e:
                producer.publish({"bad": bad})
            assert e.value.code == "INVALID_ARGUMENT"


def test_memory_cuda_ipc_cannot_export_is_refused_naming_what_it_is(ring_name):
    Ring.create(ring_name).close()
    n = 1 << 16
    managed = cupy.ndarray((n,), cupy.float32, cupy.cuda.malloc_managed(n * 4))
    pooled = cupy.ndarray((n,), cupy.float32, cupy.cuda.MemoryAsyncPool().malloc(n * 4))
    with Producer.open(ring_name) as producer:
        for bad, what in ((managed, "managed"), (pooled, "stream-ordered pool")):
            with pytest.raises(GpuringError) as e:
                producer.publish({"bad": bad})
            assert e.value.code == "NOT_EXPORTABLE" and what in str(e.value), str(e.value)
            assert producer.in_flight == 0


def test_a_tensor_over_several_expandable_segment_chunks_maps_as_one_span(ring_name):
    rows = 30_000_000  # 120 MB: at least 6 of the 20 MiB chunks
    child = _device_producer(ring_name, "torch-expandable-big", rows)
    with Consumer.open(ring_name) as consumer:
        with consumer.next(timeout=60) as frame:
            (buf,) = [b for b in frame.description.buffers() if b.kind != "absent"]
            assert buf.kind == "cuda-vmm" and int.from_bytes(buf.handle[8:12], "little") >= 6
            big = frame.to_cupy()["big"]
            assert bool((big == cupy.arange(rows, dtype=cupy.float32)).all())
            del big
        gc.collect()
        assert consumer._vmm is not None and not consumer._vmm._spans, "the span was unmapped at release"
    _, err = child.communicate(timeout=60)
    assert child.returncode == 0, err


@pytest.mark.skipif(not node_available(), reason="the Node package is not built here")
def test_cudf_style_columns_with_null_mask_and_strings_to_node(ring_name):
    producer = _device_producer(ring_name, "cudf-style")
    node = node_child("arrow-peer.ts", "columns", ring_name)
    out, err = node.communicate(timeout=60)
    assert node.returncode == 0, err
    cols = json.loads(out.strip().splitlines()[-1])["columns"]
    assert cols["id"] == [None if i % 3 == 1 else i for i in range(ROWS)]
    assert cols["name"] == [f"n{i}" for i in range(ROWS)]
    _, err = producer.communicate(timeout=60)
    assert producer.returncode == 0, err


def _leased(ring_name: str) -> int:
    """Slots of the ring in state LEASED, read from the segment itself."""
    from gpuring import layout as L
    from gpuring.segment import Segment
    seg = Segment.open(ring_name)
    try:
        return sum(L.word_state(seg.mem.load64(seg.slot(i))) == L.LEASED for i in range(seg.slot_count))
    finally:
        seg.close()


def test_release_with_a_stream_holds_the_lease_until_the_stream_is_done(ring_name):
    child = _device_producer(ring_name, "cupy")
    stream = cupy.cuda.Stream(non_blocking=True)
    scratch = cupy.empty(1 << 30, dtype=cupy.uint8)
    with stream:  # compiles the kernels now: compiling later would stall the host past the work queued
        scratch[:8].fill(0)
        cupy.zeros(8, dtype=cupy.float32).sum()
    stream.synchronize()
    # Freeing device memory synchronizes the whole device: garbage of earlier tests,
    # collected in the middle of this one, would wait out the queued work.
    gc.collect()
    gc.disable()
    try:
        _release_with_a_stream(ring_name, child, stream, scratch)
    finally:
        gc.enable()
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err


def _release_with_a_stream(ring_name, child, stream, scratch):
    with Consumer.open(ring_name) as consumer:
        frame = consumer.next(timeout=30)
        cols = frame.to_cupy()
        with stream:
            for _ in range(100):  # about half a second of device time
                scratch.fill(1)
            total = cols["x"].sum()  # reads the frame, queued behind the fills
        assert not stream.done, "the reads are still queued"
        del cols
        with pytest.raises(GpuringError) as e:
            frame.release(stream="not a stream")
        assert e.value.code == "INVALID_ARGUMENT"
        frame.release(stream=stream)
        assert _leased(ring_name) == 1, "release(stream=...) returned with the lease held"
        assert child.poll() is None, "the producer is still waiting for its frame"
        stream.synchronize()
        for _ in range(200):
            if _leased(ring_name) == 0:
                break
            time.sleep(0.01)
        assert _leased(ring_name) == 0, "the lease ended once the stream was done"
        assert float(total) == sum(_expected()[0])


@pytest.mark.parametrize("memory", ["recycled", "recycled-pool"])
def test_a_consumer_keeps_up_with_a_producer_that_frees_and_reuses_device_memory(ring_name, memory):
    """Each frame's memory is freed once released and the next allocation reuses
    it. Idle cached mappings of freed memory make the driver refuse the new one
    (CUDA_ERROR_ALREADY_MAPPED) unless they are closed. Pool memory: the producer
    exports each new allocation afresh, though an earlier one had its address."""
    frames = 300
    Ring.create(ring_name, slots=64).close()
    child = python_child("device_produce", ring_name, memory, str(frames))
    assert json.loads(child.stdout.readline())["published"] == 1
    with Consumer.open(ring_name) as consumer:
        for i in range(frames):
            with consumer.next(timeout=30) as frame:
                x = frame.to_cupy()["x"]
                assert x.shape == (1000 + 4096 * (i % 7),) and bool((x == i).all()), f"frame {i}"
                del x
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err


def test_the_same_array_published_again_and_again_describes_its_memory_each_time(ring_name):
    """A producer that publishes one array frame after frame (what a caching
    allocator hands back) describes it from what it found out the first time,
    checked by the allocation's buffer id: each frame shows the array's values
    as they were when it was published, through the same IPC handle and offset.
    Events are reused once their frames are reclaimed: consumers keep the events
    they open, and one event a frame would grow them by one a frame."""
    Ring.create(ring_name).close()
    x = cupy.empty(1 << 20, dtype=cupy.float32)
    handles, events = set(), set()
    load_stall_and_fill()
    with Producer.open(ring_name) as producer, Consumer.open(ring_name) as consumer:
        for i in range(8):
            stall(20)
            x.fill(i + 0.25)  # behind the stall: every frame carries an event
            producer.publish({"x": x[1024:]})
            with consumer.next(timeout=5) as frame:
                data = frame.description.columns[0].buffers[1]
                handles.add((data.handle, data.offset))
                assert frame.description.sync_kind == 2, f"frame {i}"
                events.add(frame.description.sync_handle)
                assert data.length == x[1024:].nbytes
                got = frame.to_cupy()["x"]
                assert got.shape == (x.size - 1024,) and bool((got == i + 0.25).all()), f"frame {i}"
                del got
            producer.drain(timeout=5)
    assert len(handles) == 1
    assert len(events) <= 2, f"{len(events)} events for 8 frames, one in flight at a time"


def test_the_same_pool_array_published_again_and_again_keeps_its_export(ring_name):
    """Pool memory published frame after frame (one allocation of a caching
    allocator): each frame names it by the same export data, pool and offset, and
    shows the values it had when published."""
    frames = 12
    Ring.create(ring_name).close()
    child = python_child("device_produce", ring_name, "same-pool", str(frames))
    exports = set()
    with Consumer.open(ring_name) as consumer:
        for i in range(frames):
            with consumer.next(timeout=30) as frame:
                data = frame.description.columns[0].buffers[1]
                assert data.kind == "cuda-pool", f"frame {i}"
                exports.add((data.handle, data.pool_id, data.allocation_id, data.offset, data.length))
                got = frame.to_cupy()["x"]
                assert got.shape == ((1 << 20) - 1024,) and bool((got == i + 0.25).all()), f"frame {i}"
                del got
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert len(exports) == 1, exports


@pytest.mark.parametrize("memory", ["prepared", "prepared-pool", "prepared-async", "prepared-vmm"])
def test_a_prepared_frame_published_again_carries_each_publishs_values_and_event(ring_name, memory):
    """Producer.prepare describes and encodes the arrays once; each publish orders
    its frame after the writes still running then (an event), so every frame shows
    the values written before its own publish, through the same export."""
    frames = 10
    if memory == "prepared-vmm":
        pytest.importorskip("torch")
    Ring.create(ring_name).close()
    child = python_child("device_produce", ring_name, memory, str(frames), env=_ALLOC_CONF.get(memory, {}))
    exports, events = set(), set()
    kind = {"prepared-pool": "cuda-pool", "prepared-vmm": "cuda-vmm"}.get(memory, "cuda-ipc")
    with Consumer.open(ring_name) as consumer:
        for i in range(frames):
            with consumer.next(timeout=30) as frame:
                d = frame.description
                assert frame.user_tag == i and d.sync_kind == 2, f"frame {i}"
                events.add(d.sync_handle)
                x_buffer = d.columns[0].buffers[1]
                assert x_buffer.kind == kind, f"frame {i}"
                exports.add((x_buffer.handle, x_buffer.offset, x_buffer.length))
                got = frame.to_cupy()
                assert got["x"].shape == (4096,) and bool((got["x"] == i + 0.25).all()), f"frame {i}"
                assert got["m"].shape == (4096, 3) and bool((got["m"] == i).all()), f"frame {i}"
                del got
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert len(exports) == 1, exports
    assert len(events) <= 2, f"{len(events)} events for {frames} frames, one in flight at a time"


def test_a_producer_making_a_new_event_per_frame_is_read_in_order_through_a_bounded_set_of_opened_events(ring_name):
    """A producer that makes a new interprocess event for every frame (SPEC.md
    §9a says to pool them; a program written without gpuring may not): each
    frame is read after its own event, and the consumer keeps at most
    _OPENED_EVENTS_MAX of them open, where one a frame would grow it for good."""
    frames = 300
    Ring.create(ring_name).close()
    child = python_child("device_produce", ring_name, "fresh-events", str(frames))
    assert json.loads(child.stdout.readline())["published"] == 1
    handles = set()
    with Consumer.open(ring_name) as consumer:
        for i in range(frames):
            with consumer.next(timeout=30) as frame:
                assert frame.description.sync_kind == 2, f"frame {i}"
                handles.add(frame.description.sync_handle)
                got = frame.to_cupy()["x"]
                assert bool((got == i + 0.5).all()), f"frame {i}"
                del got
    _, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert len(handles) == frames, "the child made a new event for every frame"
    from gpuring import cuda_driver
    assert 0 < len(cuda_driver._opened_events[0]) <= cuda_driver._OPENED_EVENTS_MAX


def test_device_frames_published_and_read_in_one_process(ring_name):
    """CUDA refuses to open an IPC handle in the process that made it (memory and
    events alike): a consumer in the producer's process uses the producer's own
    memory and waits on its own event. Each frame a new allocation, written by a
    kernel still queued when it is published; then one whose stream is idle,
    which needs no event."""
    Ring.create(ring_name).close()
    load_stall_and_fill()
    with Producer.open(ring_name) as producer, Consumer.open(ring_name) as consumer:
        for i in range(5):
            x = cupy.empty(1 << 22, dtype=cupy.float32)
            if i < 4:
                stall(50)
            x.fill(i + 0.5)  # queued on the default stream behind the stall: the frame carries an event after it
            if i == 4:
                cupy.cuda.Device().synchronize()
            producer.publish({"x": x})
            with consumer.next(timeout=5) as frame:
                assert frame.description.sync_kind == (2 if i < 4 else 0), f"frame {i}"
                got = frame.to_cupy()["x"]
                assert got.shape == x.shape and bool((got == i + 0.5).all()), f"frame {i}"
                del got
            producer.drain(timeout=5)
            del x
