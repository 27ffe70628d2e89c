"""Writes fixtures/bridge/messages.json: golden bytes of every bridge message
(SPEC.md §14) with the fields that make them, and the derived values (AUTH,
stream_id, tags) a bridge written from the spec must compute alike.

    python3 scripts/bridge-fixtures.py [--out DIR] [--force]

Like scripts/fixtures.ts it refuses to change an existing file's bytes without
--force: changed bytes are a changed protocol, which needs a version decision.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "interop/python/src"))

from gpuring.bridge import wire as W  # noqa: E402
from gpuring.bridge.templates import SourceTemplates  # noqa: E402
from gpuring.codec import encode_frame  # noqa: E402
from gpuring.description import BufferDescriptor, ColumnDescriptor, FrameDescription  # noqa: E402
from gpuring.bridge.handshake import auth_proof  # noqa: E402
from gpuring.bridge.stream_id import stream_id_of  # noqa: E402

SECRET = b"correct horse battery staple 42"
STREAM_INPUT = {"boot_id": "0f3a9c7e-5b21-4d8e-9a6f-2c4b8d1e7f30", "name": "prices", "created_unix_ns": 1795500000123456789,
                "creator_pid": 4242}


def _hello(role: int, ack: int, window: int, max_bytes: int, ring: str, nonce_byte: int, inline_bytes: int = 0,
           flags: int = 0) -> W.Hello:
    stream = stream_id_of(STREAM_INPUT["boot_id"].encode(), ring, STREAM_INPUT["created_unix_ns"], STREAM_INPUT["creator_pid"])
    return W.Hello(role, ack, flags, bytes([nonce_byte]) * 32, stream, window, max_bytes, ring, inline_bytes)


def sample_body(rows: int, at: int) -> bytes:
    """A frame of one nullable int64 column "price" (validity, data) in arena "p1g1.a0" at ``at``."""
    validity, data = BufferDescriptor.host("p1g1.a0", at, (rows + 7) // 8), BufferDescriptor.host("p1g1.a0", at + 64, 8 * rows)
    return encode_frame(FrameDescription(rows, [ColumnDescriptor("price", "l", rows, [validity, data], null_count=rows // 3)]))


def templates() -> dict:
    first, later = sample_body(10, 0), sample_body(37, 4096)
    t = SourceTemplates()
    keep, patch = t.encode(first), t.encode(later)
    return {"about": "two frames of one shape: the first is sent whole and kept as template 1 (flag KEEP), the "
                     "second as a patch against it (flag PATCH)",
            "first_body": first.hex(), "later_body": later.hex(), "first": {"flags": keep[0], "template": keep[1]},
            "later": {"flags": patch[0], "template": patch[1], "patch": patch[2].hex()}}


def batch() -> dict:
    """One META message of two inline frames: the first kept as template 1 and flagged MORE, the second a patch."""
    t = SourceTemplates()
    frames = []
    for seq, (rows, at) in enumerate([(10, 0), (37, 4096)], start=11):
        flags, template, description = t.encode(sample_body(rows, at))
        buffers = [bytes((i + k) % 256 for k in range(n)) for i, n in enumerate([(rows + 7) // 8, 8 * rows])]  # validity, data
        header = W.FrameHeader(seq, len(description), 2, 2, 5, 1000 + seq, seq, sum(map(len, buffers)),
                               flags=flags | W.FRAME_INLINE, template=template)
        frames.append((header, description, buffers))
    frames[0][0].flags |= W.FRAME_MORE
    return {"about": "one META message carrying two inline frames (a batch): each frame's header, description "
                     "and buffers back to back; the first flagged MORE",
            "frames": [{"header": vars(h), "description": d.hex(), "buffers": [b.hex() for b in bs]} for h, d, bs in frames],
            "hex": b"".join(part for h, d, bs in frames for part in (h.pack(), d, *bs)).hex()}


def messages() -> dict:
    source = _hello(W.ROLE_SOURCE, W.ACK_PUBLISHED, 0, 0, "prices", 0x11)
    sink = _hello(W.ROLE_SINK, 0, 64, 1 << 30, "prices-far", 0x22, 65536, W.FLAG_DEVICE | W.FLAG_TEMPLATES | W.FLAG_BATCH)
    frame = W.FrameHeader(7, 312, 3, 2, 5, 1001, 0xDEADBEEF, 4160)
    inline = W.FrameHeader(9, 64, 2, 2, 5, 1002, 7, 96, flags=W.FRAME_INLINE | W.FRAME_PATCH, template=1)
    end = W.FrameHeader(8, 0, 0, 0, 0, 0, 0, 0, W.KIND_END)

    def hello_fields(h: W.Hello) -> dict:
        return {"role": h.role, "ack_mode": h.ack_mode, "flags": h.flags, "nonce": h.nonce.hex(), "stream_id": h.stream_id.hex(),
                "window": h.window, "max_frame_bytes": h.max_frame_bytes, "ring": h.ring, "inline_bytes": h.inline_bytes,
                "version": [h.major, h.minor]}

    return {
        "secret": SECRET.decode(),
        "stream_id": {**STREAM_INPUT, "id": stream_id_of(STREAM_INPUT["boot_id"].encode(), STREAM_INPUT["name"],
                                                          STREAM_INPUT["created_unix_ns"], STREAM_INPUT["creator_pid"]).hex()},
        "tags": {"hello": hex(W.TAG_HELLO), "meta": hex(W.TAG_META), "control": hex(W.TAG_CONTROL),
                 "body_seq7_buffer2": hex(W.body_tag(7, 2))},
        "hello_source": {"fields": hello_fields(source), "hex": source.pack().hex()},
        "hello_sink": {"fields": hello_fields(sink), "hex": sink.pack().hex()},
        "auth_source": {"about": "the source's AUTH: HMAC over label, source HELLO, sink HELLO",
                        "hex": auth_proof(SECRET, source.pack(), sink.pack()).hex()},
        "auth_sink": {"about": "the sink's AUTH: HMAC over label, sink HELLO, source HELLO",
                      "hex": auth_proof(SECRET, sink.pack(), source.pack()).hex()},
        "verdict_accepted": {"fields": {"status": 0, "reason": ""}, "hex": W.pack_verdict(0, "").hex()},
        "verdict_auth": {"fields": {"status": 3, "reason": "the peer does not know the shared secret"},
                         "hex": W.pack_verdict(3, "the peer does not know the shared secret").hex()},
        "frame_header": {"fields": vars(frame), "hex": frame.pack().hex()},
        "frame_header_inline": {"about": "an inline frame's header, its description a patch against template 1: its "
                                         "message goes on with the patch, then the buffers' bytes",
                                "fields": vars(inline), "hex": inline.pack().hex()},
        "templates": templates(),
        "batch": batch(),
        "end": {"fields": vars(end), "hex": end.pack().hex()},
        "free_data": {"fields": {"seqs": [7, 8, 9]}, "hex": W.pack_free_data([7, 8, 9]).hex()},
        "refused": {"fields": {"seq": 7, "code": "OUT_OF_MEMORY", "message": "frame 7 holds 4160 bytes; this sink takes at most 4096"},
                    "hex": W.pack_refused(7, "OUT_OF_MEMORY", "frame 7 holds 4160 bytes; this sink takes at most 4096").hex()},
    }


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "fixtures"))
    p.add_argument("--force", action="store_true")
    args = p.parse_args()
    path = Path(args.out) / "bridge" / "messages.json"
    text = json.dumps(messages(), indent=2) + "\n"
    if path.exists() and path.read_text() != text and not args.force:
        print(f"refusing to overwrite {path}: its bytes changed (a protocol change; --force after a version decision)",
              file=sys.stderr)
        return 1
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
