"""Two "hosts" on one machine, for bridge tests: each is a network namespace
with its own /dev/shm (a private tmpfs in its own mount namespace), joined by a
veth pair carrying 10.231.N.1 (host A) and 10.231.N.2 (host B). Rings on one
are invisible to the other, so frames cross only over the link. /sys is
mounted again inside, as ``ip netns exec`` does: UCX finds its network devices
there, and sysfs shows those of the namespace that mounted it. Needs root
(CI's machines are root), ip and nsenter; ``unavailable()`` says why not.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from typing import Any

SHM_SIZE = "512m"


def unavailable() -> str | None:
    """Why two hosts cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    missing = [t for t in ("ip", "nsenter", "unshare") if shutil.which(t) is None]
    return f"missing {', '.join(missing)}" if missing else None


class Host:
    """A namespace pair (network, mount) held open by a sleeping anchor process."""

    def __init__(self, name: str, address: str) -> None:
        self.name, self.address = name, address
        self._anchor = subprocess.Popen(
            ["unshare", "--net", "--mount", "--propagation", "private", "sh", "-c",
             f"mount -t tmpfs -o size={SHM_SIZE} none /dev/shm && mount -t sysfs none /sys && ip link set lo up "
             "&& echo up && exec sleep 1d"],
            stdout=subprocess.PIPE, text=True)
        assert self._anchor.stdout is not None and self._anchor.stdout.readline().strip() == "up", "namespace setup failed"
        self.pid = self._anchor.pid

    def command(self, argv: list[str], cwd: str = ".") -> list[str]:
        """``argv`` run inside the namespaces; ``cwd`` there (entering a mount namespace starts at /)."""
        return ["nsenter", "-t", str(self.pid), "-n", "-m", f"--wd={os.path.abspath(cwd)}", *argv]

    def run(self, argv: list[str], cwd: str = ".", **kw: Any) -> subprocess.Popen[str]:
        return subprocess.Popen(self.command(argv, cwd), text=True, **kw)

    def sh(self, command: str) -> None:
        subprocess.run(self.command(["sh", "-c", command]), check=True)

    def close(self) -> None:
        self._anchor.kill()
        self._anchor.wait()


class TwoHosts:
    def __init__(self) -> None:
        net = 1 + os.getpid() % 250
        self.a = Host("A", f"10.231.{net}.1")
        self.b = Host("B", f"10.231.{net}.2")
        va, vb = f"gpra{os.getpid() % 100000}", f"gprb{os.getpid() % 100000}"
        subprocess.run(["ip", "link", "add", va, "type", "veth", "peer", "name", vb], check=True)
        for host, dev in ((self.a, va), (self.b, vb)):
            subprocess.run(["ip", "link", "set", dev, "netns", str(host.pid)], check=True)
            host.sh(f"ip addr add {host.address}/30 dev {dev} && ip link set {dev} up")
        time.sleep(0.2)  # the link comes up

    def close(self) -> None:
        self.a.close()  # the veth pair goes with its namespaces
        self.b.close()
