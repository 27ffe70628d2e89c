"""One end of a `npm run bench:remote` transfer (bench/remote.py starts it inside
a "host"): sends COUNT frames of SIZE bytes, PACE_US apart (0: as fast as it
can), or receives them and prints one JSON line: each frame's latency (send
stamp to arrival, CLOCK_MONOTONIC, which both hosts share) and the first and
last arrival times, leaving out the first WARM_UP frames.

    remote_child.py send gpuring[-device|-staged] RING COUNT SIZE PACE_US
    remote_child.py recv gpuring[-device|-staged] RING COUNT
    remote_child.py send ipc|flight|tcp HOST:PORT COUNT SIZE PACE_US
    remote_child.py recv ipc|flight|tcp PORT COUNT
"""
from __future__ import annotations

import json
import resource
import socket
import sys
import time

import numpy as np
import pyarrow as pa


WARM_UP = 5  # frames not counted: first connections, mappings, CUDA contexts
WARM_UP_PAUSE_S = 1.0  # after them, before the frames counted


def cpu_seconds() -> float:
    """This process's CPU time so far, user and system."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class TimedCpu:
    """The CPU a process spends on the timed frames: from the end of the
    warm-up (``start``) to ``stop``. A receiver's ``start`` also tells the
    bench ("timed" on stdout), which then samples the bridges' CPU."""
    def __init__(self) -> None:
        self.began = self.spent = 0.0

    def start(self, announce: bool = False) -> None:
        self.began = cpu_seconds()
        if announce:
            print("timed", flush=True)

    def stop(self) -> None:
        self.spent = cpu_seconds() - self.began


def frame(size: int) -> pa.Table:
    values = np.zeros(max(size // 8, 1), np.int64)
    values[0] = time.monotonic_ns()  # the stamp: what the receiver subtracts from its clock
    return pa.table({"v": values})


def pauses(count: int, pace_us: int, cpu: TimedCpu):
    """Before each frame: the pace, and a pause after the warm-up frames (then ``cpu`` starts)."""
    for i in range(count):
        if i == WARM_UP:
            time.sleep(WARM_UP_PAUSE_S)
            cpu.start()
        if pace_us:
            time.sleep(pace_us / 1e6)
        yield i


def paced(count: int, size: int, pace_us: int, cpu: TimedCpu):
    for _ in pauses(count, pace_us, cpu):
        yield frame(size)


def arrived(arrivals: list[int], cpu: TimedCpu) -> None:
    """Stamps an arrival; the first timed one starts ``cpu``."""
    arrivals.append(time.monotonic_ns())
    if len(arrivals) == WARM_UP + 1:
        cpu.start(announce=True)


def report(stamps: list[int], arrivals: list[int], cpu: TimedCpu) -> None:
    print(json.dumps({"latency_us": [(a - s) / 1e3 for s, a in zip(stamps[WARM_UP:], arrivals[WARM_UP:])],
                      "first_ns": arrivals[WARM_UP], "last_ns": arrivals[-1], "cpu_s": cpu.spent,
                      "arrivals": dict(zip(map(str, stamps[WARM_UP:]), arrivals[WARM_UP:]))}), flush=True)


def report_sender(cpu: TimedCpu) -> None:
    print(json.dumps({"cpu_s": cpu.spent}), flush=True)


def gpuring_send(ring: str, count: int, size: int, pace_us: int, mode: str = "host") -> None:
    """mode host: pyarrow tables; device: one CuPy array of SIZE bytes, published
    as it is; staged: that array copied to the host, published as a table."""
    import gpuring
    gpuring.Ring.create(ring, slots=256).close()
    print("ready", flush=True)
    if mode != "host":
        import cupy
        x = cupy.zeros(max(size // 8, 1), cupy.int64)
    cpu = TimedCpu()
    with gpuring.Producer.open(ring) as p:
        sys.stdin.readline()  # the bridges are up
        for _ in pauses(count, pace_us, cpu):
            stamp = time.monotonic_ns()
            data = frame(size) if mode == "host" else {"v": x} if mode == "device" else pa.table({"v": x.get()})
            p.publish(data, user_tag=stamp)
        p.drain(timeout=300)
        cpu.stop()
    report_sender(cpu)


def gpuring_recv(ring: str, count: int, mode: str = "host") -> None:
    """A frame has arrived once readable where the sender's data was: host
    frames as Arrow, device frames mapped as CuPy, staged frames copied to the device."""
    import gpuring
    gpuring.Ring.create(ring, slots=256).close()
    stamps, arrivals, cpu = [], [], TimedCpu()
    if mode != "host":
        import cupy
        cupy.zeros(1)  # the CUDA context, before the first frame
    with gpuring.Consumer.open(ring) as c:
        print("ready", flush=True)
        for _ in range(count):
            with c.next(timeout=120) as f:
                if mode == "host":
                    f.to_arrow()
                elif mode == "device":
                    f.to_cupy()
                else:
                    cupy.asarray(f.to_arrow().column(0).to_numpy())
                    cupy.cuda.runtime.deviceSynchronize()
                arrived(arrivals, cpu)
                stamps.append(f.user_tag)
        cpu.stop()
    report(stamps, arrivals, cpu)


def ipc_send(address: str, count: int, size: int, pace_us: int) -> None:
    host, port = address.rsplit(":", 1)
    print("ready", flush=True)
    sys.stdin.readline()
    cpu = TimedCpu()
    with socket.create_connection((host, int(port))) as s, s.makefile("wb") as sink:
        writer = None
        for t in paced(count, size, pace_us, cpu):
            writer = writer or pa.ipc.new_stream(sink, t.schema)
            writer.write_table(t)
            sink.flush()
        assert writer is not None
        writer.close()
        cpu.stop()
    report_sender(cpu)


def ipc_recv(port: str, count: int) -> None:
    server = socket.create_server(("", int(port)))
    print("ready", flush=True)
    conn, _ = server.accept()
    stamps, arrivals, cpu = [], [], TimedCpu()
    with conn, conn.makefile("rb") as source:
        for batch in pa.ipc.open_stream(source):
            arrived(arrivals, cpu)
            stamps.append(batch.column(0)[0].as_py())
    cpu.stop()
    assert len(stamps) == count
    report(stamps, arrivals, cpu)


def tcp_send(address: str, count: int, size: int, pace_us: int) -> None:
    """The floor: the same bytes with an 8-byte length before each, no Arrow at all."""
    host, port = address.rsplit(":", 1)
    print("ready", flush=True)
    sys.stdin.readline()
    cpu = TimedCpu()
    with socket.create_connection((host, int(port))) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        body = np.zeros(max(size // 8, 1), np.int64)
        length = body.nbytes.to_bytes(8, "little")
        for _ in pauses(count, pace_us, cpu):
            body[0] = time.monotonic_ns()
            s.sendall(length)
            s.sendall(body.data)
        cpu.stop()
    report_sender(cpu)


def _exactly(conn: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = conn.recv_into(view[got:])
        if not k:
            raise EOFError
        got += k
    return buf


def tcp_recv(port: str, count: int) -> None:
    server = socket.create_server(("", int(port)))
    print("ready", flush=True)
    conn, _ = server.accept()
    stamps, arrivals, cpu = [], [], TimedCpu()
    with conn:
        for _ in range(count):
            body = _exactly(conn, int.from_bytes(_exactly(conn, 8), "little"))
            arrived(arrivals, cpu)
            stamps.append(int.from_bytes(body[:8], "little", signed=True))
    cpu.stop()
    report(stamps, arrivals, cpu)


def flight_send(address: str, count: int, size: int, pace_us: int) -> None:
    import pyarrow.flight as fl
    print("ready", flush=True)
    sys.stdin.readline()
    client = fl.connect(f"grpc+tcp://{address}")
    writer, cpu = None, TimedCpu()
    for t in paced(count, size, pace_us, cpu):
        if writer is None:
            writer, _ = client.do_put(fl.FlightDescriptor.for_path("bench"), t.schema)
        writer.write_table(t)
    assert writer is not None
    writer.close()
    cpu.stop()
    report_sender(cpu)


def flight_recv(port: str, count: int) -> None:
    import pyarrow.flight as fl
    stamps: list[int] = []
    arrivals: list[int] = []
    cpu = TimedCpu()

    class Server(fl.FlightServerBase):  # type: ignore[misc]
        def do_put(self, context, descriptor, reader, writer):  # noqa: ANN001
            for chunk in reader:
                arrived(arrivals, cpu)
                stamps.append(chunk.data.column(0)[0].as_py())

    server = Server(f"grpc+tcp://0.0.0.0:{port}")
    print("ready", flush=True)
    while len(arrivals) < count:
        time.sleep(0.01)
    cpu.stop()
    server.shutdown()
    report(stamps, arrivals, cpu)


def main() -> None:
    role, transport, where, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    gpuring_mode = transport.partition("-")[2] or "host"  # gpuring, gpuring-device, gpuring-staged
    if role == "send":
        size, pace = int(sys.argv[5]), int(sys.argv[6])
        if transport.startswith("gpuring"):
            gpuring_send(where, count, size, pace, gpuring_mode)
        else:
            {"ipc": ipc_send, "flight": flight_send, "tcp": tcp_send}[transport](where, count, size, pace)
    elif transport.startswith("gpuring"):
        gpuring_recv(where, count, gpuring_mode)
    else:
        {"ipc": ipc_recv, "flight": flight_recv, "tcp": tcp_recv}[transport](where, count)


if __name__ == "__main__":
    main()
