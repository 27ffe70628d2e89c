"""The bridge's messages (SPEC.md §14.1) against fixtures/bridge/messages.json:
golden bytes both ways, the derived values computed again from the spec's words
alone, and every malformed message refused with its code. No UCX needed."""
from __future__ import annotations

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
from gpuring.bridge.link import _ucxx_tag
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
    assert raw[:8] == b"GPRBRIDG" and struct.unpack_from("<HHBBH", raw, 8) == (1, 1, f["role"], f["ack_mode"], f["flags"])
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
    flagged = bytes(frame[:5]) + b"\x08" + bytes(frame[6:])
    assert _code(W.FrameHeader.unpack, flagged, 1 << 24) == "BRIDGE_PROTOCOL"  # flag 8: not a flag
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
