"""The Python codec's verdicts on many frame bodies, for the three-language
differential run (test/body-fuzz.test.ts). Same streams as
`body_roundtrip --batch` in C: stdin holds u32 length + body records; stdout gets,
for each, u32 length + verdict ("OK" or the error code), then u32 length +
canonical re-encoding (empty unless OK). Each body also goes through one
BodyShapes (a consumer's kept shapes, primed by every valid body of the stream):
a verdict that differs from decode_frame's is reported as a MISMATCH."""
import struct
import sys

from gpuring import GpuringError, decode_frame, encode_frame
from gpuring.body_shapes import BodyShapes

SHAPES = BodyShapes()


def verdict(body: bytes) -> tuple[str, bytes]:
    plain, kept = verdict_of(decode_frame, body), verdict_of(lambda b: SHAPES.decode(b)[0], body)
    return plain if plain == kept else (f"MISMATCH decode_frame {plain[0]}, BodyShapes {kept[0]}", b"")


def verdict_of(decode, body: bytes) -> tuple[str, bytes]:
    try:
        return "OK", encode_frame(decode(body))
    except GpuringError as e:
        return e.code, b""
    except Exception as e:  # noqa: BLE001 - any other exception is a codec bug to report
        return f"CRASH {type(e).__name__}: {e}", b""


def main() -> None:
    data = sys.stdin.buffer.read()
    out = []
    at = 0
    while at + 4 <= len(data):
        (n,) = struct.unpack_from("<I", data, at)
        code, canonical = verdict(data[at + 4:at + 4 + n])
        out += [struct.pack("<I", len(code)), code.encode(), struct.pack("<I", len(canonical)), canonical]
        at += 4 + n
    sys.stdout.buffer.write(b"".join(out))


if __name__ == "__main__":
    main()
