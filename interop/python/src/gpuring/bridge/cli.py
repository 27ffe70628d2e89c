"""``gpuring bridge`` (``python -m gpuring bridge``, or ``gpuring-bridge``):
joins a local ring to a bridge on another machine over UCX.

    gpuring bridge --from RING --to ucx://HOST:PORT --secret FILE     # forward RING to a sink
    gpuring bridge --from ucx://:PORT --listen --to RING --secret FILE  # a sink: publish into RING

Exactly one of --from and --to is a ring, the other a ``ucx://`` address: a ring
in --from makes this end the source, in --to the sink. With --listen this end
waits for the other at PORT; otherwise it connects to HOST:PORT, and reconnects
when the link fails. It prints what it does to stderr (JSON lines with --json)
and ends on SIGINT or SIGTERM (exit 0), or on a refusal (exit 3).
"""
from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from urllib.parse import urlsplit

from ..errors import GpuringError
from .handshake import read_secret
from .runner import keep_connected, keep_listening, report_every
from .stats import stderr_stats

EXIT_REFUSED = 3


def _address(uri: str) -> tuple[str, int] | None:
    if not uri.startswith("ucx://"):
        return None
    try:
        port = urlsplit(uri).port  # ValueError for a port that is not a number from 0 to 65535
    except ValueError:
        port = None
    if port is None:
        raise GpuringError("INVALID_ARGUMENT", f"{uri}: a ucx:// address needs a port, a number up to 65535 (ucx://HOST:PORT)")
    return urlsplit(uri).hostname or "", port


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpuring bridge", description=__doc__.split("\n\n")[0] if __doc__ else None,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="source", required=True, help="a ring name, or ucx://HOST:PORT")
    p.add_argument("--to", dest="target", required=True, help="a ring name, or ucx://HOST:PORT")
    p.add_argument("--secret", required=True, help="file holding the shared secret (mode 600, at least 16 bytes)")
    p.add_argument("--listen", action="store_true", help="wait for the other end at the ucx:// port")
    p.add_argument("--ack", choices=("published", "released"), default="published",
                   help="source: release a frame here once published there (default) or once released there")
    p.add_argument("--window", type=int, default=64, help="sink: frames a source may have in flight (default 64)")
    p.add_argument("--max-frame-bytes", type=int, default=1 << 30, help="sink: the largest frame taken")
    p.add_argument("--device", default="auto",
                   help="sink: where device buffers land: a CUDA device ordinal, 'host' (they arrive as host "
                        "columns), or 'auto' (device 0 when a GPU is visible, else host; the default)")
    p.add_argument("--progress", type=float, default=10.0, help="seconds between progress lines (0: none)")
    p.add_argument("--json", action="store_true", help="JSON lines instead of text")
    return p


def _landing_device(choice: str) -> int | None:
    if choice == "host":
        return None
    if choice != "auto":
        if not choice.isdigit():
            raise GpuringError("INVALID_ARGUMENT", f"--device {choice}: a device ordinal, 'host' or 'auto'")
        return int(choice)
    from .. import cuda_driver as cu
    try:
        return 0 if cu.device_count() > 0 else None
    except GpuringError:
        return None  # no CUDA driver here


async def _run(args: argparse.Namespace) -> None:
    frm, to = _address(args.source), _address(args.target)
    if (frm is None) == (to is None):
        raise GpuringError("INVALID_ARGUMENT", "exactly one of --from and --to must be a ucx:// address")
    secret = read_secret(args.secret)
    host, port = frm or to  # type: ignore[misc]
    from .sink import BridgeSink
    from .source import BridgeSource
    bridge: BridgeSource | BridgeSink
    if frm is None:
        bridge = BridgeSource(args.source, secret, ack=args.ack, stats=stderr_stats(args.source, "source", args.json))
    else:
        bridge = BridgeSink(args.target, secret, window=args.window, max_frame_bytes=args.max_frame_bytes,
                            device=_landing_device(args.device),
                            stats=stderr_stats(args.target, "sink", args.json))
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopped.set)
    reporter = asyncio.ensure_future(report_every(bridge, args.progress, stopped)) if args.progress > 0 else None
    try:
        if args.listen:
            await keep_listening(bridge, port, stopped, one_at_a_time=frm is None)
        else:
            await keep_connected(bridge, host, port, stopped)
    finally:
        stopped.set()
        if reporter is not None:
            await reporter
        bridge.stats.event("stopped", **bridge.stats.summary())
        bridge.close()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # The thread that waits for frames must get the interpreter back quickly from the event loop, which
    # polls UCX: at Python's default 5 ms switch interval, the take hop of a lone frame was 0.97 ms
    # (median, bench:remote latency case, 2-core box); at 0.1 ms it was 0.60 ms.
    sys.setswitchinterval(0.0001)
    try:
        asyncio.run(_run(args))
    except GpuringError as e:
        print(f"gpuring bridge: {e}", file=sys.stderr)
        return EXIT_REFUSED if e.code in ("BRIDGE_REFUSED", "BRIDGE_PROTOCOL") else 2
    return 0
