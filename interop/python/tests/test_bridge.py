"""gpuring bridge across two "hosts" (two_hosts.py: network namespaces, each
with its own /dev/shm), over UCX's TCP transport: frames of every type arrive
intact and in order, nothing is lost or doubled when a bridge is killed, a full
far ring holds the source back, and a wrong secret is refused."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from gpuring import GpuringError

from conftest import HERE, REPO, node_available, python_env
from two_hosts import TwoHosts, unavailable

PORT = 13337
NODE_CLI = REPO / "bin" / "gpuring.js"


def _ucxx_missing() -> str | None:
    try:
        import ucxx  # noqa: F401
    except ImportError:
        return "UCXX is not installed (pip install './interop/python[remote]')"
    return None


pytestmark = pytest.mark.skipif(bool(unavailable() or _ucxx_missing()), reason=str(unavailable() or _ucxx_missing()))


def _env() -> dict[str, str]:
    env = python_env()
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env["PYTHONPATH"]])
    env["UCX_TLS"] = "tcp"  # the namespaces share no memory: UCX must not try shared-memory transports between them
    return env


@pytest.fixture
def hosts():
    h = TwoHosts()
    yield h
    h.close()


@pytest.fixture
def secret(tmp_path: Path) -> str:
    path = tmp_path / "secret"
    path.write_bytes(os.urandom(24).hex().encode())
    path.chmod(0o600)
    return str(path)


def _gpu_missing() -> str | None:
    try:
        import cupy  # noqa: F401
        from gpuring import cuda_driver
        return None if cuda_driver.device_count() > 0 else "no CUDA device"
    except ImportError:
        return "CuPy is not installed"
    except GpuringError as e:
        return str(e)


needs_gpu = pytest.mark.skipif(_gpu_missing() is not None, reason=f"needs an NVIDIA GPU: {_gpu_missing()}")


class Scenario:
    """Ring "a" on host A fed by a producer, ring "b" on host B read by a
    consumer, and the two bridges between them, each of which a test may kill
    and start again."""

    def __init__(self, hosts: TwoHosts, secret: str, count: int, kind: str = "ids", slots: int = 64,
                 ack: str = "published", consumer_delay: float = 0, node_reader: list[str] | None = None,
                 ipc: str = "", writer: list[str] | None = None, broadcast: bool = False, idle: float = 15,
                 far_broadcast: bool = False, reader: list[str] | None = None) -> None:
        """``node_reader``: a Node helper (test/helpers) and its arguments reads
        ring b instead of the Python consumer; ``ipc``: where the producer
        writes its tables as the referee; ``writer``: a child script and its
        arguments publishes into ring a (which the test created) instead.
        ``broadcast``: ring a delivers every frame to each subscriber, here
        ``local`` (a consumer on host A) and the source bridge, both subscribed
        before the producer starts. ``idle``: seconds the consumer on host B
        waits for a frame before it ends short of ``count``. ``far_broadcast``:
        ring b is a broadcast ring, its consumer subscribed before the sink starts.
        ``reader``: a command that reads ring b instead (``node_reader`` is one)."""
        self.hosts, self.secret, self.ack = hosts, secret, ack
        self.env = _env()
        self.local: subprocess.Popen[str] | None = None
        if broadcast:
            _create_ring(hosts.a, "a", 64, delivery="all")
            self.local = self._child(hosts.a, "bridge_consume", "a", str(count), kind, "64", "15")
        elif writer is None:
            self.producer = self._child(hosts.a, "bridge_produce", "a", str(count), kind, *([ipc] if ipc else []))
            assert self.producer.stdout is not None and self.producer.stdout.readline().strip() == "created"
        else:
            self.producer = self._child(hosts.a, *writer)
        if far_broadcast:
            _create_ring(hosts.b, "b", slots, delivery="all")
        if node_reader is not None:
            reader = ["node", "--import", "tsx", str(REPO / "test" / "helpers" / node_reader[0]), *node_reader[1:]]
        if reader is None:
            self.consumer = self._child(hosts.b, "bridge_consume", "b", str(count), kind, str(slots), str(idle),
                                        str(consumer_delay))
            assert self.consumer.stdout is not None and self.consumer.stdout.readline().strip() == "created"
        else:
            _create_ring(hosts.b, "b", slots)
            self.consumer = hosts.b.run(reader, cwd=str(REPO), env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if far_broadcast:
            _await_subscribers(hosts.b, "b", 1)
        self.sink = self.start_sink()
        self.source = self.start_source()
        if broadcast:
            _await_subscribers(hosts.a, "a", 2)
            self.producer = self._child(hosts.a, "bridge_produce", "a", str(count), kind)

    def _child(self, host, script: str, *args: str) -> subprocess.Popen[str]:
        return host.run([sys.executable, str(HERE / "children" / f"{script}.py"), *args], env=self.env,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def _bridge(self, host, *args: str, secret: str | None = None) -> subprocess.Popen[str]:
        return host.run([sys.executable, "-m", "gpuring", "bridge", "--secret", secret or self.secret, "--progress", "0",
                         *args], env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def start_sink(self) -> subprocess.Popen[str]:
        return self._bridge(self.hosts.b, "--from", f"ucx://:{PORT}", "--listen", "--to", "b")

    def start_source(self, secret: str | None = None) -> subprocess.Popen[str]:
        return self._bridge(self.hosts.a, "--from", "a", "--to", f"ucx://{self.hosts.b.address}:{PORT}",
                            "--ack", self.ack, secret=secret)

    def wait_for_frames(self, n: int) -> None:
        """Until the consumer on host B has taken ``n`` frames (a multiple of 500)."""
        assert self.consumer.stdout is not None
        while (line := self.consumer.stdout.readline()) and line.strip() != f"progress {n}":
            pass
        assert line, "the consumer ended before that many frames"

    def last_said(self) -> dict:
        """The consumer's last line (JSON), once it exited 0."""
        out, err = self.consumer.communicate(timeout=120)
        assert self.consumer.returncode == 0, err
        return json.loads(out.strip().splitlines()[-1])

    def local_said(self) -> dict:
        """What the subscriber on host A said at the end (JSON), once it exited 0."""
        assert self.local is not None
        out, err = self.local.communicate(timeout=120)
        assert self.local.returncode == 0, err
        return json.loads(out.strip().splitlines()[-1])

    def stop(self) -> dict[str, str]:
        """Ends every process; returns the bridges' reports (stderr) by role."""
        roles = [("source", self.source), ("sink", self.sink), ("producer", self.producer), ("consumer", self.consumer)]
        roles += [("local", self.local)] if self.local is not None else []
        for _, p in roles:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        said = {}
        for role, p in roles:
            try:
                said[role] = p.communicate(timeout=20)[1]
            except subprocess.TimeoutExpired:
                p.kill()
                said[role] = p.communicate()[1]
        return said


def test_every_type_crosses_in_order(hosts, secret):
    s = Scenario(hosts, secret, 60, "all-types")
    try:
        got = s.last_said()
        assert got["wrong"] == []
        assert got["tags"] == list(range(60))  # one source, one sink: publication order is kept
        assert s.producer.wait(timeout=30) == 0  # every frame was released on host A: acknowledged
    finally:
        s.stop()


@pytest.mark.skipif(not node_available(), reason="the Node package is not built here")
def test_a_node_consumer_on_the_far_host_reads_every_type(hosts, secret, tmp_path):
    ipc = str(tmp_path / "sent.arrow")
    s = Scenario(hosts, secret, 45, "all-types", node_reader=["arrow-peer.ts", "compare", "b", ipc, "45"], ipc=ipc)
    try:
        assert s.last_said() == {"frames": 45, "differences": [None] * 45}
        assert s.producer.wait(timeout=30) == 0
    finally:
        s.stop()


@pytest.fixture(scope="module")
def c_consumer(tmp_path_factory) -> str:
    """interop/c/consumer, built here with the system C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build interop/c/consumer.c")
    out = str(tmp_path_factory.mktemp("c") / "consumer")
    subprocess.run([cc, "-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{REPO / 'interop/include'}",
                    str(REPO / "interop/c/consumer.c"), "-o", out, "-lpthread", "-lrt", "-ldl"], check=True)
    return out


def test_a_c_consumer_on_the_far_host_reads_every_frame(hosts, secret, c_consumer):
    """interop/c/consumer on host B reads bridged frames as it reads local
    ones: every frame, in order, with its tag, rows and column checksum."""
    n = 40
    s = Scenario(hosts, secret, n, "ids", reader=[c_consumer, "b", str(n), "30000"])
    try:
        out, err = s.consumer.communicate(timeout=120)
        assert s.consumer.returncode == 0, err
        got = [json.loads(line) for line in out.splitlines()]
        assert [(r["tag"], r["rows"], r["columns"][0]["sum"]) for r in got] == [(i, 1, i) for i in range(n)]
        assert s.producer.wait(timeout=30) == 0
    finally:
        s.stop()


@needs_gpu
@pytest.mark.skipif(not node_available(), reason="the Node package is not built here")
def test_device_frames_land_in_the_far_hosts_device_memory(hosts, secret):
    """CuPy frames of seven sizes on host A; on host B a Node consumer finds
    every frame's buffer on the device (cuda-ipc, the sink's memory) holding its
    values, in order."""
    n = 40
    s = Scenario(hosts, secret, n, "device", node_reader=["device-child.ts", "read-all", "b", str(n)])
    try:
        assert s.last_said() == {"ok": n, "tags": list(range(n)), "kinds": ["absent", "cuda-ipc"]}
        assert s.producer.wait(timeout=30) == 0
    finally:
        s.stop()


@needs_gpu
@pytest.mark.skipif(not node_available(), reason="the Node package is not built here")
def test_cudf_style_device_columns_cross_to_node(hosts, secret):
    """The "Done when" of issue 15: a cuDF-style producer on host A (int32 with
    a null mask, utf8 with offsets, in device memory) feeds a Node consumer on host B."""
    rows = 1000
    _create_ring(hosts.a, "a")
    s = Scenario(hosts, secret, 1, node_reader=["arrow-peer.ts", "columns", "b"],
                 writer=["device_produce", "a", "cudf-style", str(rows)])
    try:
        cols = s.last_said()["columns"]
        assert cols["id"] == [None if i % 3 == 1 else i for i in range(rows)]
        assert cols["name"] == [f"n{i}" for i in range(rows)]
        assert s.producer.wait(timeout=30) == 0
    finally:
        s.stop()


def test_acks_after_release_on_the_far_host(hosts, secret):
    s = Scenario(hosts, secret, 40, "ids", ack="released")
    try:
        assert s.last_said()["tags"] == list(range(40))
        assert s.producer.wait(timeout=30) == 0
    finally:
        s.stop()


@pytest.mark.parametrize("kind", ["ids", pytest.param("device", marks=needs_gpu)])
def test_killed_source_bridge_loses_and_repeats_nothing(hosts, secret, kind):
    """kill -9 of the forwarding bridge, twice, mid-stream: its unacknowledged
    frames go back to ring a (they were CLAIMED), the restarted bridge sends
    them, and the sink drops those it had published already. Device frames
    too: they land in host B's device memory, each once, with its values."""
    n = 3000
    s = Scenario(hosts, secret, n, kind)
    try:
        for taken in (500, 1500):
            s.wait_for_frames(taken)
            s.source.kill()
            s.source.wait()
            s.source = s.start_source()
        got = s.last_said()
        assert Counter(got["tags"]) == Counter(range(n))
        assert got["wrong"] == []
    finally:
        s.stop()


def test_a_broadcast_ring_crosses_whole_beside_a_local_subscriber(hosts, secret):
    """A broadcast ring as the source (SPEC.md §14.4): the bridge is one more
    subscriber; the consumer on host B and a subscriber on host A each get
    every frame, intact and in order, and every share is released (the
    producer drains: the bridge released its own once acknowledged)."""
    n = 300
    s = Scenario(hosts, secret, n, "all-types", broadcast=True)
    try:
        for got in (s.last_said(), s.local_said()):
            assert got["wrong"] == []
            assert got["tags"] == list(range(n))
        assert s.producer.wait(timeout=30) == 0
    finally:
        s.stop()


@pytest.mark.parametrize("ack", ["published", "released"])
def test_a_broadcast_ring_on_the_far_host_gets_every_frame(hosts, secret, ack):
    """The sink publishes into a broadcast ring (SPEC.md §5.4) as into a work
    queue: its subscriber gets every frame intact and in order, and each is
    acknowledged (once published, or once every subscriber released it), so
    the producer on host A drains."""
    n = 200
    s = Scenario(hosts, secret, n, "all-types", ack=ack, far_broadcast=True)
    try:
        got = s.last_said()
        assert got["wrong"] == []
        assert got["tags"] == list(range(n))
        assert s.producer.wait(timeout=30) == 0
    finally:
        s.stop()


def test_killed_source_bridge_on_a_broadcast_ring_repeats_nothing_and_holds_nothing_up(hosts, secret):
    """kill -9 of the forwarding bridge on a broadcast ring, mid-stream: a
    broadcast claim is final, so frames it held may be lost to host B, but none
    arrives there twice or out of order, the restarted bridge forwards the
    frames published after it subscribed, the subscriber on host A misses
    nothing, and the producer drains (a sweep released the dead bridge's shares)."""
    n = 20000
    s = Scenario(hosts, secret, n, "ids", broadcast=True, idle=5)
    try:
        s.wait_for_frames(500)
        s.source.kill()
        s.source.wait()
        s.source = s.start_source()
        far = s.last_said()["tags"]
        assert far[:500] == list(range(500))  # on host B before the kill
        assert all(a < b for a, b in zip(far, far[1:]))  # in order, each once
        assert far[-1] == n - 1  # the restarted bridge forwards
        assert s.local_said() == {"tags": list(range(n)), "wrong": []}
        assert s.producer.wait(timeout=60) == 0
    finally:
        s.stop()


@pytest.mark.parametrize("ack", ["published", "released"])
def test_killed_sink_bridge_loses_nothing_and_repeats_at_most_the_frame_it_was_publishing(hosts, secret, ack):
    """kill -9 of the publishing bridge, twice: frames it published stay in
    ring b (host arenas outlive their producer), and the source sends its
    unacknowledged frames again to the restarted sink, which drops those its
    origin log names (SPEC.md §14.4). With "released" acks those are every
    frame still unread in ring b. Only a frame published in the instant before
    its origin was logged may come twice: one per death."""
    n, kills = 3000, 2
    s = Scenario(hosts, secret, n, ack=ack)
    try:
        for taken in (500, 1500)[:kills]:
            s.wait_for_frames(taken)
            s.sink.kill()
            s.sink.wait()
            s.sink = s.start_sink()
        got = s.last_said()
        counts = Counter(got["tags"])
        assert set(counts) == set(range(n))
        assert sum(c - 1 for c in counts.values()) <= kills, {t: c for t, c in counts.items() if c > 1}
        assert got["wrong"] == []
    finally:
        s.stop()


def test_full_far_ring_holds_the_source_back(hosts, secret):
    """Ring b has 4 slots and its consumer reads only after 12 s: the sink stops
    publishing, the source stops at its window (64, all of ring a's slots), ring
    a fills and its producer waits, and inspect on host A shows the forwarding
    bridge with those frames in flight. Then every frame arrives, none dropped.
    The window is looked for until 10 s have passed: on a loaded 2-core machine
    the chain of processes took more than 2.5 s to fill it."""
    n = 400
    s = Scenario(hosts, secret, n, "ids", slots=4, consumer_delay=12)
    try:
        deadline = time.monotonic() + 10
        while True:
            info = _inspect(hosts.a, "a")
            if info["slotStates"]["CLAIMED"] == 64 or time.monotonic() > deadline:
                break
            time.sleep(0.25)
        bridge = [p for p in info["participants"] if "bridge" in p["roles"]]
        assert [p["roles"] for p in bridge] == [["consumer", "bridge"]]
        assert info["slotStates"]["CLAIMED"] == 64  # the window: sent, not acknowledged, held for a resend
        if node_available() and shutil.which("node"):  # the Node CLI shows bridges too
            shown = subprocess.run(hosts.a.command(["node", str(NODE_CLI), "inspect", "a"]), capture_output=True,
                                   text=True, timeout=60)
            assert re.search(r"bridge: participant \d+ \(pid \d+\) forwards this ring to another machine: 64 frames "
                             r"in flight", shown.stdout), shown.stdout + shown.stderr
        got = s.last_said()
        assert got["tags"] == list(range(n))
    finally:
        s.stop()


def test_shared_memory_short_on_both_hosts_holds_back_and_loses_nothing(hosts, secret):
    """48 frames of 16 MiB through /dev/shm of 512 MiB on each host, and ring b's
    consumer starts reading only after 3 s: the producer on A and the sink on B
    run out of shared memory with frames of their own in flight and wait for
    them to come back, as for a full ring. Every frame arrives intact, in order,
    and no link fails meanwhile."""
    n = 48
    s = Scenario(hosts, secret, n, "big", consumer_delay=3)
    try:
        got = s.last_said()
        assert got["tags"] == list(range(n)) and got["wrong"] == []
    finally:
        said = s.stop()
    for role in ("source", "sink"):
        assert "link failed" not in said[role] and "NO_SPACE" not in said[role], said[role]


def _create_ring(host, ring: str, slots: int = 64, delivery: str = "each") -> None:
    code = f"import gpuring; gpuring.Ring.create({ring!r}, slots={slots}, delivery={delivery!r}).close()"
    out = subprocess.run(host.command([sys.executable, "-c", code]), env=_env(), capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr


def _await_subscribers(host, ring: str, count: int, seconds: float = 60) -> None:
    """Until ``count`` participants of broadcast ring ``ring`` subscribed."""
    deadline = time.monotonic() + seconds
    while sum("subscriber" in p for p in _inspect(host, ring)["participants"]) < count:
        assert time.monotonic() < deadline, f"fewer than {count} subscribers of {ring} after {seconds} s"
        time.sleep(0.1)


def _inspect(host, ring: str) -> dict:
    code = f"import json, gpuring; r = gpuring.Ring.open({ring!r}); print(json.dumps(r.inspect()))"
    out = subprocess.run(host.command([sys.executable, "-c", code]), env=_env(), capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_wrong_secret_is_refused(hosts, secret, tmp_path):
    other = tmp_path / "other"
    other.write_bytes(b"not the same secret at all")
    other.chmod(0o600)
    s = Scenario(hosts, secret, 1)
    try:
        s.source.kill()
        s.source.wait()
        wrong = s.start_source(secret=str(other))
        _, err = wrong.communicate(timeout=30)
        assert wrong.returncode == 3
        assert "BRIDGE_REFUSED" in err and "shared secret" in err
    finally:
        s.stop()


def test_ucx_missing_says_how_to_install(secret):
    code = ("import sys; sys.modules['ucxx'] = None\n"
            "from gpuring.bridge.link import ucxx\n"
            "try:\n    ucxx()\nexcept Exception as e:\n    print(e.code, e)")
    out = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=60).stdout
    assert out.startswith("UCX_UNAVAILABLE") and "pip install 'gpuring[remote]'" in out


@pytest.mark.parametrize("address", ["ucx://h:notaport", "ucx://h:70000", "ucx://h"])
def test_a_bad_address_is_refused_with_invalid_argument(secret, address):
    run = subprocess.run([sys.executable, "-m", "gpuring", "bridge", "--from", "r", "--to", address, "--secret", secret],
                         env=_env(), capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.startswith("gpuring bridge: INVALID_ARGUMENT:") and "needs a port" in run.stderr
