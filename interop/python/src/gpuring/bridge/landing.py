"""Where a sink receives a frame (SPEC.md §14.3): host buffers in a span of its
producer's arenas; device buffers, on a sink with a GPU, staged in page-locked
memory and then copied into one device allocation of the sink, which the
frame's description names as ``cuda-ipc``. Without a GPU device buffers land in
the host span: the frame arrives as a host frame.
"""
from __future__ import annotations

from typing import Any

from .. import cuda_driver as cu
from ..description import DEVICE_KINDS, BufferDescriptor
from ..producer import HostSpace, Producer
from .device_space import DevicePool, DeviceSpace, PinnedPool, PinnedSpace


def align(n: int) -> int:
    return (n + 63) & ~63


class Landings:
    """A sink's memory for frames: its producer's arenas and, with ``device``
    (a CUDA ordinal), pools on that device. The pools are made at once: a
    CUDA context takes a few hundred milliseconds to start."""

    def __init__(self, producer: Producer, device: int | None) -> None:
        self._producer = producer
        self._devices = DevicePool(device) if device is not None else None
        self._staging = PinnedPool(device) if device is not None else None

    def lands_on_device(self, b: BufferDescriptor) -> bool:
        return self._devices is not None and b.kind in DEVICE_KINDS

    def take(self, device_bytes: int, host_bytes: int) -> Landing:
        landing = Landing(self._producer, self._devices, self._staging)
        try:
            if host_bytes or not device_bytes:
                landing.host = self._producer.host_space(host_bytes)
            if device_bytes and self._devices is not None and self._staging is not None:
                landing.staging = self._staging.take(device_bytes)
                landing.device = self._devices.take(device_bytes)
        except BaseException:
            landing.free()
            raise
        return landing


class Landing:
    """One frame's memory. Until published all of it is the sink's (``free``);
    once published the host span and the device allocation go with the
    frame, and the device allocation comes back when it is reclaimed (``free_device``)."""

    def __init__(self, producer: Producer, devices: DevicePool | None, staging: PinnedPool | None) -> None:
        self._producer, self._devices, self._staging_pool = producer, devices, staging
        self.host: HostSpace | None = None
        self.device: DeviceSpace | None = None
        self.staging: PinnedSpace | None = None

    def place(self, b: BufferDescriptor, device: bool, at: int) -> Any:
        """Points ``b`` at byte ``at`` of the device allocation or of the host
        span; returns the memory its bytes are received into."""
        target: Any
        if device:
            assert self.device is not None and self.staging is not None
            named, target = self.device.descriptor(at, b.length), self.staging.view(at, b.length)
        else:
            assert self.host is not None
            named = BufferDescriptor.host(self.host.arena, self.host.allocation.offset + at, b.length)
            target = self.host.view[at:at + b.length]
        b.kind, b.device_ordinal, b.device_uuid = named.kind, named.device_ordinal, named.device_uuid
        b.allocation_id, b.handle, b.offset = named.allocation_id, named.handle, named.offset
        return target

    def upload(self, nbytes: int) -> None:
        """Once received: the staged bytes into the device allocation (a
        synchronous copy: the frame is complete on the device when published)."""
        if self.staging is None or self.device is None or self._staging_pool is None:
            return
        with cu.primary_context(self.device.ordinal):
            cu.copy_to_device(self.device.ptr, self.staging.ptr, nbytes)
        self._staging_pool.give_back(self.staging)
        self.staging = None

    def free_device(self) -> None:
        if self.device is not None and self._devices is not None:
            self._devices.give_back(self.device)
        self.device = None

    def free(self) -> None:
        if self.host is not None:
            self._producer.free_space(self.host)
        self.host = None
        if self.staging is not None and self._staging_pool is not None:
            self._staging_pool.give_back(self.staging)
        self.staging = None
        self.free_device()
