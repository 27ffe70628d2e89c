"""The bridge handshake (SPEC.md §14.2): HELLO both ways, then each side proves
it knows the shared secret (HMAC-SHA256 over both HELLOs, so a recorded answer
is useless on another connection), then the sink's VERDICT."""
from __future__ import annotations

import hashlib
import hmac
import os
import stat

from ..errors import GpuringError
from . import wire as W
from .link import Link

AUTH_LABEL = b"gpuring-bridge-auth-v1"
MIN_SECRET_BYTES = 16


def read_secret(path: str) -> bytes:
    """The shared secret: the file's bytes (at least 16), readable by its owner only."""
    try:
        st = os.stat(path)
        with open(path, "rb") as f:
            secret = f.read().strip()
    except OSError as e:
        raise GpuringError("INVALID_ARGUMENT", f"cannot read the secret file {path}: {e.strerror}", e.errno) from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise GpuringError("INVALID_ARGUMENT", f"the secret file {path} is open to others (mode {st.st_mode & 0o777:o}); "
                           f"Fix: chmod 600 {path}")
    if len(secret) < MIN_SECRET_BYTES:
        raise GpuringError("INVALID_ARGUMENT", f"the secret in {path} has {len(secret)} bytes; at least "
                           f"{MIN_SECRET_BYTES} are needed (for example: head -c 32 /dev/urandom | base64 > {path})")
    return secret


def auth_proof(secret: bytes, first: bytes, second: bytes) -> bytes:
    """AUTH: what the end that sent HELLO ``first`` answers to the HELLO ``second``."""
    return hmac.new(secret, AUTH_LABEL + first + second, hashlib.sha256).digest()


def _judge(mine: W.Hello, theirs: W.Hello, proof_ok: bool) -> tuple[int, str]:
    if theirs.major != W.VERSION_MAJOR:
        return W.VERDICT_VERSION, f"bridge protocol {theirs.major}.{theirs.minor} against {W.VERSION_MAJOR}.{W.VERSION_MINOR}"
    if theirs.role == mine.role:
        return W.VERDICT_ROLE, f"both ends are {W.ROLES[mine.role]}s: one end forwards a ring, the other publishes into one"
    if not proof_ok:
        return W.VERDICT_AUTH, "the peer does not know the shared secret"
    if theirs.role == W.ROLE_SOURCE and theirs.ack_mode not in W.ACK_MODES.values():
        return W.VERDICT_REFUSED, f"unknown ack mode {theirs.ack_mode}"
    return W.VERDICT_ACCEPTED, ""


async def handshake(link: Link, mine: W.Hello, secret: bytes) -> W.Hello:
    """Runs the handshake; returns the peer's HELLO, or raises BRIDGE_REFUSED
    (either side refusing) or BRIDGE_PROTOCOL."""
    own = mine.pack()
    await link.send(own, W.TAG_HELLO)
    raw = await link.recv(W.HELLO.size, W.TAG_HELLO)
    theirs = W.Hello.unpack(raw)
    await link.send(auth_proof(secret, own, raw), W.TAG_HELLO)
    proof = await link.recv(W.AUTH_BYTES, W.TAG_HELLO)
    status, reason = _judge(mine, theirs, hmac.compare_digest(proof, auth_proof(secret, raw, own)))
    if mine.role == W.ROLE_SINK:
        await link.send(W.pack_verdict(status, reason), W.TAG_CONTROL)
    elif status == W.VERDICT_ACCEPTED:  # the source hears the sink's verdict too
        status, reason = W.unpack_verdict(await link.recv(W.VERDICT.size, W.TAG_CONTROL))
        reason = f"the sink refused: {reason}" if status != W.VERDICT_ACCEPTED else reason
    if status != W.VERDICT_ACCEPTED:
        raise GpuringError("BRIDGE_REFUSED", f"bridge to {link.peer} refused ({W.VERDICTS[status]}): {reason}")
    return theirs
