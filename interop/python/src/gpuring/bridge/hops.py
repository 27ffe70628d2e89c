"""When each frame passed each stage of a bridge, for ``bench:remote --hops``.

With GPURING_BRIDGE_HOPS=PREFIX in its environment, a bridge keeps a line
``user_tag stage monotonic_ns`` per frame and stage and writes them to
``PREFIX.ROLE`` when it closes (kept in memory until then: a write per stage
would be part of what it times). Unset, each stage costs one comparison.
CLOCK_MONOTONIC is one clock for every process of a machine, network
namespaces included, so the benchmark joins these with its producer's stamps.
"""
from __future__ import annotations

import os
import time

ENV = "GPURING_BRIDGE_HOPS"


class Hops:
    def __init__(self, role: str) -> None:
        prefix = os.environ.get(ENV)
        self._path = f"{prefix}.{role}" if prefix else None
        self._lines: list[tuple[int, str, int]] = []

    def stamp(self, user_tag: int, stage: str) -> None:
        if self._path is not None:
            self._lines.append((user_tag, stage, time.monotonic_ns()))

    def write(self) -> None:
        if self._path is not None and self._lines:
            with open(self._path, "a") as f:
                f.writelines(f"{tag} {stage} {ns}\n" for tag, stage, ns in self._lines)
            self._lines.clear()
