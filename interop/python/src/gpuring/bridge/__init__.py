"""Bridges: a ring on one machine joined to a ring on another over UCX
(SPEC.md §14). ``gpuring bridge`` (cli.py) runs one end; BridgeSource and
BridgeSink are the two ends for programs that embed them."""
from .sink import BridgeSink
from .source import BridgeSource

__all__ = ["BridgeSource", "BridgeSink"]
