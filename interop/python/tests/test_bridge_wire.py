"""The bridge's messages (SPEC.md §14.1) against fixtures/bridge/messages.json:
golden bytes both ways, the derived values computed again from the spec's words
alone, and every malformed message refused with its code. No UCX needed."""
from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import struct
import subprocess
import sys

import pytest

from conftest import FIXTURES, REPO
from gpuring import GpuringError
from gpuring.bridge import wire as W
from gpuring.bridge.hops import Hops
from gpuring.bridge.link import _ucxx_tag
from gpuring.bridge.sink import _MetaStream
from gpuring.bridge.source import _Batch
from gpuring.bridge.templates import SinkTemplates, SourceTemplates
from gpuring.codec import decode_frame, encode_frame

GOLDEN = json.loads((FIXTURES / "bridge" / "messages.json").read_text())


def test_the_generator_reproduces_the_committed_fixture(tmp_path):
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "bridge-fixtures.py"), "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "bridge" / "messages.json").read_text() == (FIXTURES / "bridge" / "messages.json").read_text()


@pytest.mark.parametrize("name", ["hello_source", "hello_sink"])
def test_hello_bytes(name):
    f, raw = GOLDEN[name]["fields"], bytes.fromhex(GOLDEN[name]["hex"])
    h = W.Hello(f["role"], f["ack_mode"], f["flags"], bytes.fromhex(f["nonce"]), bytes.fromhex(f["stream_id"]),
                f["window"], f["max_frame_bytes"], f["ring"], f["inline_bytes"], *f["version"])
    assert h.pack() == raw and len(raw) == 128
    assert W.Hello.unpack(raw) == h
    assert raw[:8] == b"GPRBRIDG" and struct.unpack_from("<HHBBH", raw, 8) == (1, 2, f["role"], f["ack_mode"], f["flags"])
    assert struct.unpack_from("<I", raw, 68)[0] == f["inline_bytes"]  # after nonce and stream_id: window, then it


def test_auth_is_the_hmac_the_spec_describes():
    secret = GOLDEN["secret"].encode()
    source, sink = (bytes.fromhex(GOLDEN[n]["hex"]) for n in ("hello_source", "hello_sink"))
    label = b"gpuring-bridge-auth-v1"
    assert hmac.new(secret, label + source + sink, hashlib.sha256).hexdigest() == GOLDEN["auth_source"]["hex"]
    assert hmac.new(secret, label + sink + source, hashlib.sha256).hexdigest() == GOLDEN["auth_sink"]["hex"]


def test_stream_id_is_the_hash_the_spec_describes():
    s = GOLDEN["stream_id"]
    text = f"{s['boot_id']}/{s['name']}/{s['created_unix_ns']}/{s['creator_pid']}".encode()
    assert hashlib.sha256(text).digest()[:16].hex() == s["id"]
    assert GOLDEN["hello_source"]["fields"]["stream_id"] == s["id"]


def test_tags():
    t = GOLDEN["tags"]
    assert (W.TAG_HELLO, W.TAG_META, W.TAG_CONTROL) == (int(t["hello"], 16), int(t["meta"], 16), int(t["control"], 16))
    assert W.body_tag(7, 2) == int(t["body_seq7_buffer2"], 16) == 0x80 << 56 | 2 << 32 | 7


def test_tags_stay_apart_through_ucxx_hashing():
    """Python's hash() folds 0xE0 << 56 and body_tag(3, 0) together (both are 7
    modulo 2^61 - 1); the pair UCXX is given keeps them apart."""
    assert hash(W.TAG_META) == hash(W.body_tag(3, 0))
    assert hash(_ucxx_tag(W.TAG_META)) != hash(_ucxx_tag(W.body_tag(3, 0)))


def test_frame_header_end_and_control_bytes():
    for name in ("frame_header", "frame_header_inline", "end"):
        f, raw = GOLDEN[name]["fields"], bytes.fromhex(GOLDEN[name]["hex"])
        assert W.FrameHeader(**f).pack() == raw and len(raw) == 64
        assert vars(W.FrameHeader.unpack(raw, 1 << 24)) == f
        assert raw[5] == f["flags"]  # after the type and seq: DIPC's prefix
    assert W.pack_free_data([7, 8, 9]).hex() == GOLDEN["free_data"]["hex"]
    assert W.unpack_control(bytes.fromhex(GOLDEN["free_data"]["hex"])) == [7, 8, 9]
    r = GOLDEN["refused"]["fields"]
    assert W.pack_refused(r["seq"], r["code"], r["message"]).hex() == GOLDEN["refused"]["hex"]
    assert W.unpack_control(bytes.fromhex(GOLDEN["refused"]["hex"])) == W.Refusal(**r)
    for name in ("verdict_accepted", "verdict_auth"):
        v = GOLDEN[name]["fields"]
        assert W.pack_verdict(v["status"], v["reason"]).hex() == GOLDEN[name]["hex"]
        assert W.unpack_verdict(bytes.fromhex(GOLDEN[name]["hex"])) == (v["status"], v["reason"])


def _code(fn, *args) -> str:
    with pytest.raises(GpuringError) as e:
        fn(*args)
    return e.value.code


def test_malformed_messages_are_refused_with_their_code():
    hello = bytes.fromhex(GOLDEN["hello_source"]["hex"])
    frame = bytearray.fromhex(GOLDEN["frame_header"]["hex"])
    free = bytearray.fromhex(GOLDEN["free_data"]["hex"])
    assert _code(W.Hello.unpack, hello[:-1]) == "BRIDGE_PROTOCOL"
    assert _code(W.Hello.unpack, b"HTTP/1.1" + hello[8:]) == "BRIDGE_REFUSED"
    assert _code(W.Hello.unpack, hello[:12] + b"\x07" + hello[13:]) == "BRIDGE_PROTOCOL"  # role 7
    assert _code(W.FrameHeader.unpack, bytes(frame[:63]), 1 << 24) == "BRIDGE_PROTOCOL"
    assert _code(W.FrameHeader.unpack, b"\x55" + bytes(frame[1:]), 1 << 24) == "BRIDGE_PROTOCOL"
    assert _code(W.FrameHeader.unpack, bytes(frame), 100) == "BRIDGE_PROTOCOL"  # description above the limit
    zero = bytes(frame[:8]) + bytes(4) + bytes(frame[12:])
    assert _code(W.FrameHeader.unpack, zero, 1 << 24) == "BRIDGE_PROTOCOL"  # an empty description
    flagged = bytes(frame[:5]) + b"\x10" + bytes(frame[6:])
    assert _code(W.FrameHeader.unpack, flagged, 1 << 24) == "BRIDGE_PROTOCOL"  # flag 16: not a flag
    assert _code(W.FrameHeader.unpack, flagged[:5] + b"\x08" + flagged[6:], 1 << 24) == "BRIDGE_PROTOCOL"  # MORE, not INLINE
    assert _code(W.FrameHeader.unpack, flagged[:5] + b"\x06" + flagged[6:], 1 << 24) == "BRIDGE_PROTOCOL"  # KEEP and PATCH
    assert _code(W.FrameHeader.unpack, flagged[:5] + b"\x04" + flagged[6:], 1 << 24) == "BRIDGE_PROTOCOL"  # PATCH, template 0
    assert _code(W.unpack_control, bytes(free[:-8])) == "BRIDGE_PROTOCOL"
    assert _code(W.unpack_control, b"\x99" + bytes(free[1:])) == "BRIDGE_PROTOCOL"
    assert _code(W.unpack_control, bytes(free[:4]) + (65).to_bytes(4, "little") + bytes(free[8:])) == "BRIDGE_PROTOCOL"
    assert _code(W.unpack_verdict, struct.pack("<II248s", 9, 0, b"")) == "BRIDGE_PROTOCOL"
    assert _code(W.unpack_verdict, struct.pack("<II248s", 0, 249, b"")) == "BRIDGE_PROTOCOL"


def test_templates_send_the_schema_once_and_rebuild_the_body():
    """The golden pair: the later body travels as a 48-byte patch, and the sink
    rebuilds from template and patch a body that decodes to the later frame's
    numbers and the template's names, types and kinds."""
    t = GOLDEN["templates"]
    first, later, patch = (bytes.fromhex(h) for h in (t["first_body"], t["later_body"], t["later"]["patch"]))
    source = SourceTemplates()
    assert source.encode(first) == (W.FRAME_KEEP, 1, first) and (t["first"]["flags"], t["first"]["template"]) == (W.FRAME_KEEP, 1)
    assert source.encode(later) == (W.FRAME_PATCH, 1, patch) and len(patch) == 8 + 24 + 2 * 8
    sink = SinkTemplates()
    sink.keep(1, first)
    rebuilt, want = decode_frame(sink.body(1, patch)), decode_frame(later)
    assert (rebuilt.row_count, rebuilt.columns[0].name, rebuilt.columns[0].format) == (37, "price", "l")
    assert [(c.length, c.null_count, c.offset) for c in rebuilt.columns] == [(c.length, c.null_count, c.offset) for c in want.columns]
    assert [(b.kind, b.length) for b in rebuilt.buffers()] == [(b.kind, b.length) for b in want.buffers()]
    other = decode_frame(first)
    other.columns[0].name = "volume"
    assert source.encode(encode_frame(other))[:2] == (W.FRAME_KEEP, 2)  # another shape, another template
    assert _code(sink.body, 2, patch) == "BRIDGE_PROTOCOL"  # never kept
    assert _code(sink.body, 1, patch[:-8]) == "BRIDGE_PROTOCOL"  # not this template's patch length
    assert _code(sink.keep, 17, first) == "BRIDGE_PROTOCOL"  # past MAX_TEMPLATES


class _MessagesLink:
    """Stands in for a Link in the unit tests of batches: what is posted is
    kept; each receive is filled with the next of ``incoming``."""

    def __init__(self, incoming: list[bytes] = ()) -> None:
        self.posted: list[tuple[bytes, int]] = []
        self.incoming, self.receives = list(incoming), 0

    def post(self, data: bytes, tag: int) -> asyncio.Future[None]:
        self.posted.append((bytes(data), tag))
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    def recv_into(self, buffer: bytearray, tag: int) -> asyncio.Future[None]:
        assert tag == W.TAG_META
        self.receives += 1
        future = asyncio.get_running_loop().create_future()
        if self.incoming:
            message = self.incoming.pop(0)
            buffer[:len(message)] = message
            future.set_result(None)
        return future


def _batch_frames() -> list[tuple[W.FrameHeader, bytes, list[bytes]]]:
    return [(W.FrameHeader(**f["header"]), bytes.fromhex(f["description"]), [bytes.fromhex(b) for b in f["buffers"]])
            for f in GOLDEN["batch"]["frames"]]


def test_a_source_sends_inline_frames_ready_together_as_one_message():
    async def run() -> list[tuple[bytes, int]]:
        link = _MessagesLink()
        batch = _Batch(link, 1 << 16, 32, lambda _: None, Hops("source"))  # type: ignore[arg-type]
        for header, description, buffers in _batch_frames():
            header.flags &= ~W.FRAME_MORE  # the batch sets it on all but the last
            batch.add(header, [description, *buffers], W.FRAME.size + len(description) + header.total_bytes)
        assert link.posted == []  # nothing goes until the batch is flushed
        batch.flush()
        return link.posted
    assert asyncio.run(run()) == [(bytes.fromhex(GOLDEN["batch"]["hex"]), W.TAG_META)]


def test_a_batch_goes_out_when_the_next_frame_would_pass_the_sinks_limit():
    async def run() -> list[int]:
        link = _MessagesLink()
        frames = _batch_frames()
        sizes = [W.FRAME.size + len(d) + h.total_bytes for h, d, _ in frames]
        batch = _Batch(link, sizes[0] + sizes[1] - 1, 32, lambda _: None, Hops("source"))  # type: ignore[arg-type]
        for (header, description, buffers), size in zip(frames, sizes):
            batch.add(header, [description, *buffers], size)
        batch.flush()
        return [len(message) for message, _ in link.posted]
    assert asyncio.run(run()) == [W.FRAME.size + len(d) + h.total_bytes for h, d, _ in _batch_frames()]


def test_a_sink_reads_a_batch_frame_by_frame_then_receives_again():
    async def run() -> None:
        link = _MessagesLink([bytes.fromhex(GOLDEN["batch"]["hex"])])
        meta = _MetaStream(link)  # type: ignore[arg-type]
        for want, description, buffers in _batch_frames():
            header, inline = await meta.header()
            assert vars(header) == vars(want)
            assert inline is not None and bytes(inline) == description + b"".join(buffers)
            # Frames flagged MORE come from the message at hand; the last one posts the next receive.
            assert link.receives == (1 if header.flags & W.FRAME_MORE else 2)
        meta.close()
    asyncio.run(run())


def test_a_frame_after_more_that_is_not_inline_is_refused():
    first, *_ = _batch_frames()
    header, description, buffers = first
    lone = W.FrameHeader(**GOLDEN["frame_header"]["fields"])  # not inline
    message = header.pack() + description + b"".join(buffers) + lone.pack()

    async def run() -> None:
        meta = _MetaStream(_MessagesLink([message]))  # type: ignore[arg-type]
        await meta.header()
        await meta.header()
    assert _code(asyncio.run, run()) == "BRIDGE_PROTOCOL"
