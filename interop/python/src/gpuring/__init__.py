"""gpuring for Python: hand Arrow columns, host or CUDA device memory, between
processes through a lock-free ring in POSIX shared memory. Speaks the same wire
format as the Node package and interop/include/gpuring.h.

    import gpuring, pyarrow as pa
    gpuring.Ring.create("prices").close()
    with gpuring.Producer.open("prices") as p:
        p.publish(pa.table({"id": [1, 2, 3]}))
        p.drain()

    with gpuring.Consumer.open("prices") as c, c.next(timeout=5) as frame:
        print(frame.to_arrow())
"""
from .codec import decode_frame, encode_frame
from .consumer import Consumer
from .device_columns import DeviceColumn
from .description import BufferDescriptor, ColumnDescriptor, FrameDescription, from_json, to_json
from .errors import ERROR_CODES, GpuringError
from .frame import Frame
from .pool_memory import exportable_pool
from .prepared_frame import PreparedFrame
from .producer import Producer
from .ring import Ring

__all__ = ["Ring", "Producer", "Consumer", "Frame", "PreparedFrame", "DeviceColumn", "GpuringError", "ERROR_CODES",
           "encode_frame", "decode_frame", "FrameDescription", "ColumnDescriptor", "BufferDescriptor", "to_json",
           "from_json", "exportable_pool"]
__version__ = "0.1.0"
