"""Device columns described and encoded once, published again and again.

A producer that publishes the same device arrays frame after frame (a model's
static output buffers, a CUDA graph's tensors, a set of preallocated columns)
describes and encodes them once, in ``Producer.prepare``. Each
``PreparedFrame.publish`` then only orders the frame after the work queued on
its streams (one event, recorded when a stream has work left) and publishes the
body: no array interface read, no export looked up, no body encoded.

Ownership: as for ``Producer.publish`` of device columns, the arrays stay the
caller's and are not copied: write to them only while no frame of them is in
flight, that is, after a frame's release (``drain``, or ``in_flight`` back to
what it was) and before the next publish, on the streams the frame is ordered
after. The prepared frame keeps the arrays alive (and, for VMM memory, the
exported chunks' descriptors); every frame in flight keeps the prepared frame.

Ordering: each publish orders its readers after the work queued, at the moment
of that publish, on the streams the arrays named
(``__cuda_array_interface__['stream']``), on the ``stream`` given to
``prepare`` or to ``publish``, or on the legacy default stream when none is
named (SPEC.md §9a).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from . import cuda_driver as cu
from .codec import encode_frame, with_sync
from .deadline import deadline_after
from .device_columns import DeviceLayout, KeepAlive, order_after
from .vmm_memory import SPANS

if TYPE_CHECKING:
    from .producer import Encoded, Producer


class PreparedFrame:
    """Device columns of ``Producer.prepare``, published with ``publish``."""

    def __init__(self, producer: Producer, layout: DeviceLayout) -> None:
        self._producer = producer
        self._layout = layout
        self._body = encode_frame(layout.description)  # without an event: each publish adds its own

    def publish(self, *, timeout: float | None = None, block: bool = True, user_tag: int = 0,
                stream: object = None) -> int:
        """Publishes the columns again, as ``Producer.publish`` would publish
        them (same waiting, ``timeout``, ``block`` and ``user_tag``); returns
        the frame id. ``stream``: one more stream to order the frame after."""
        self._producer._check_open()
        deadline = deadline_after(timeout)
        body, _, keep, d = self._ordered(stream)
        return self._producer._publish(body, [], keep, deadline, block, user_tag, d)

    async def publish_async(self, *, timeout: float | None = None, user_tag: int = 0, stream: object = None) -> int:
        """``publish`` for asyncio, as ``Producer.publish_async``: where the ring is
        full the event loop sleeps on the producer's doorbell until releases come."""
        self._producer._check_open()
        return await self._producer._publish_async(lambda: self._ordered(stream), user_tag, deadline_after(timeout))

    def _ordered(self, stream: object) -> Encoded:
        """The body ordered after the work queued now (see order_after), and what its frame keeps."""
        layout = self._layout
        streams = layout.streams if stream is None else sorted({*layout.streams, cu.stream_handle(stream)})
        d = layout.description
        events = order_after(d, streams, layout.ordinal)
        body = with_sync(self._body, d.sync_kind, d.sync_handle) if events else self._body
        return body, [], KeepAlive([self], layout.ordinal, events, []), d

    def __del__(self) -> None:
        for span in self._layout.spans:
            SPANS.release(span)
