"""Child: publishes one frame of device columns from LIBRARY (cupy or torch),
prints {"published": id}, drains, exits.
  x: float32 [0, 1, ..., ROWS-1] * 0.5     m: (ROWS, 3) int32, m[i, j] = 10 * i + j
The torch columns are views into larger tensors (caching-allocator offsets).
LIBRARY cupy-async-pool: the cupy columns allocated by CuPy's MemoryAsyncPool from
  gpuring.exportable_pool() (stream-ordered pool memory, published as cuda-pool).
LIBRARY torch-expandable: the torch columns from PyTorch's expandable segments
  (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, set by the test): VMM memory,
  published as cuda-vmm spans.
LIBRARY torch-expandable-big: one column "big", float32 0 .. ROWS-1 from expandable
  segments, large enough to span several of their 20 MiB chunks.
LIBRARY torch-async-pool: the torch columns from PyTorch's cudaMallocAsync backend
  (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync, set by the test), whose current
  pool is gpuring.exportable_pool().
LIBRARY recycled: ROWS frames, frame i a fresh int32 column of 1000 + 4096 * (i % 7)
  values all i, allocated with cudaMalloc (no CuPy pool) and freed once released, so
  later allocations reuse the memory of frames consumers have seen (many in flight).
LIBRARY recycled-pool: the same, each column a new allocation of gpuring.exportable_pool()
  (CuPy's MemoryAsyncPool), so later allocations reuse the addresses of earlier ones.
LIBRARY same-pool: ROWS frames of one array of gpuring.exportable_pool() memory, 1 << 20
  float32 from its 1024th on, frame i all i + 0.25, each published once the one before
  was released (the same allocation every frame, as a caching allocator hands back).
LIBRARY prepared, prepared-pool: ROWS frames of one PreparedFrame (Producer.prepare) of
  x: 4096 float32 from the 1024th of 5120 on, and m: a 4096 x 3 int32 matrix; before frame i
  both are filled (x with i + 0.25, m with i) behind a 20 ms stall, so each publish
  orders its frame after writes still running. Memory of CuPy's default pool
  (cuda-ipc), or with prepared-pool of gpuring.exportable_pool() (cuda-pool); with
  prepared-async from an asyncio loop (publish_async, drain_async); with prepared-vmm
  both are PyTorch tensors of expandable segments (cuda-vmm; the test sets
  PYTORCH_CUDA_ALLOC_CONF).
LIBRARY fresh-events: ROWS frames of one float32 column "x", frame i all i + 0.5, each
  written behind a stall kernel (so it carries an event) and with a new interprocess
  event of its own: this producer never reuses one (SPEC.md §9a says to pool them).
LIBRARY cudf-style: DeviceColumns the way cuDF holds them, ROWS rows:
  id: int32 i, null where i % 3 == 1 (LSB-first null mask)   name: utf8 "n{i}" (offsets + characters)"""
import json
import sys
from pathlib import Path

from gpuring import Producer

name, library, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])


def allocate_from_exportable_pool() -> None:
    """CuPy allocates from the device's current pool, made exportable (cuda-pool)."""
    import cupy
    import gpuring
    gpuring.exportable_pool(0)
    cupy.cuda.set_allocator(cupy.cuda.MemoryAsyncPool().malloc)


if library == "fresh-events":
    import cupy as xp
    from gpuring import cuda_driver
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from cuda_stall import load_stall_and_fill, stall
    cuda_driver.recycle_ipc_event = lambda ordinal, event: None  # a new event every frame
    load_stall_and_fill()
    x = xp.zeros(1 << 16, dtype=xp.float32)
    with Producer.open(name) as producer:
        for i in range(rows):
            stall(2)
            x.fill(i + 0.5)
            producer.publish({"x": x})
            if i == 0:
                print(json.dumps({"published": 1}), flush=True)
            producer.drain(timeout=60)
    sys.exit(0)
if library.startswith("prepared"):
    import cupy as xp
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from cuda_stall import load_stall_and_fill, stall
    if library == "prepared-pool":
        allocate_from_exportable_pool()
    load_stall_and_fill()
    if library == "prepared-vmm":
        import torch
        x = torch.empty(5120, dtype=torch.float32, device="cuda")
        m = torch.empty((4096, 3), dtype=torch.int32, device="cuda")
        fill = torch.Tensor.fill_
    else:
        x = xp.empty(5120, dtype=xp.float32)
        m = xp.empty((4096, 3), dtype=xp.int32)
        fill = type(x).fill
    fill(x, -1.0)  # loads the fills now (not 0: that may be a memset): a first launch waits for the device to idle
    fill(m, -1)
    xp.cuda.Device().synchronize()

    def write(i: int) -> None:
        stall(20)
        fill(x, i + 0.25)
        fill(m, i)

    async def publish_all_async(producer, prepared) -> None:
        for i in range(rows):
            write(i)
            await prepared.publish_async(user_tag=i)
            await producer.drain_async(timeout=60)

    with Producer.open(name) as producer:
        prepared = producer.prepare({"x": x[1024:], "m": m})
        if library == "prepared-async":
            import asyncio
            asyncio.run(publish_all_async(producer, prepared))
        else:
            for i in range(rows):
                write(i)
                prepared.publish(user_tag=i)
                producer.drain(timeout=60)
    sys.exit(0)
if library == "same-pool":
    import cupy as xp
    allocate_from_exportable_pool()
    x = xp.empty(1 << 20, dtype=xp.float32)
    with Producer.open(name) as producer:
        for i in range(rows):
            x.fill(i + 0.25)
            xp.cuda.Device().synchronize()
            producer.publish({"x": x[1024:]})
            producer.drain(timeout=60)
    sys.exit(0)
if library in ("recycled", "recycled-pool"):
    import cupy as xp
    if library == "recycled-pool":
        allocate_from_exportable_pool()
    else:
        xp.cuda.set_allocator(None)
    with Producer.open(name) as producer:
        for i in range(rows):
            producer.publish({"x": xp.full(1000 + 4096 * (i % 7), i, dtype=xp.int32)})
            if i == 0:
                print(json.dumps({"published": 1}), flush=True)
        producer.drain(timeout=60)
    sys.exit(0)
if library in ("cupy", "cupy-async-pool"):
    import cupy as xp
    if library == "cupy-async-pool":
        allocate_from_exportable_pool()
    x = xp.arange(rows, dtype=xp.float32) * 0.5
    m = (xp.arange(rows, dtype=xp.int32)[:, None] * 10 + xp.arange(3, dtype=xp.int32)[None, :])
elif library == "cudf-style":
    import cupy as xp
    from gpuring import DeviceColumn
    valid = [i % 3 != 1 for i in range(rows)]
    mask = xp.asarray([sum(1 << b for b in range(8) if i + b < rows and valid[i + b]) for i in range(0, rows, 8)],
                      dtype=xp.uint8)
    names = [f"n{i}".encode() for i in range(rows)]
    offsets = [0]
    for n in names:
        offsets.append(offsets[-1] + len(n))
    columns = {
        "id": DeviceColumn("i", rows, data=xp.arange(rows, dtype=xp.int32), mask=mask, null_count=valid.count(False)),
        "name": DeviceColumn("u", rows, data=xp.asarray(list(b"".join(names)), dtype=xp.uint8),
                             offsets=xp.asarray(offsets, dtype=xp.int32)),
    }
elif library == "torch-expandable-big":
    import torch
    columns = {"big": torch.arange(rows, dtype=torch.float32, device="cuda")}
else:
    import torch
    if library == "torch-async-pool":
        import gpuring
        gpuring.exportable_pool(0)
    pad = torch.zeros(1000, device="cuda")
    big = torch.arange(rows + 7, dtype=torch.float32, device="cuda") * 0.5
    x = big[7:] - 3.5  # starts 28 bytes into its block
    m = (torch.arange(rows, dtype=torch.int32, device="cuda")[:, None] * 10 + torch.arange(3, dtype=torch.int32, device="cuda")[None, :])
with Producer.open(name) as producer:
    frame_id = producer.publish(columns if library in ("cudf-style", "torch-expandable-big") else {"x": x, "m": m})
    print(json.dumps({"published": frame_id}), flush=True)
    producer.drain(timeout=60)
