"""`npm run bench:remote`: frames across a link between two "hosts" (two network
namespaces with their own /dev/shm, as the bridge tests make them; root
needed) through gpuring bridges over UCX, against the same tables as Arrow IPC
over a TCP socket and through Arrow Flight, and the floor: the same bytes over
a TCP socket with no Arrow. All in one run. For the bridges it also reports
the CPU a linked bridge uses with nothing to move. UCX runs over TCP here (UCX_TLS=tcp):
the namespaces share no memory or RDMA device.

    python3 bench/remote.py [--json] [--quick] [--only latency|throughput] [--transports ...] [--device] [--hops]

With --device (a GPU needed) the frames are CuPy device arrays: bridged as
device frames (they land in host B's device memory) against host staging by
the application (copied to the host, bridged as host frames, copied to the
device on host B), with raw host bytes over TCP as the floor.

With --hops the bridges stamp each frame at each stage (bridge/hops.py), and a
table after the results gives each hop's p50 for every gpuring row: from the
producer's stamp until the forwarding bridge took the frame from its ring, sent
it, the receiving bridge read its header, published it, and the consumer had it.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "interop/python/tests"))
from two_hosts import TwoHosts, unavailable  # noqa: E402

CHILD = str(ROOT / "bench" / "remote_child.py")
PORT = 13500
TRANSPORTS = ("tcp", "ipc", "flight", "gpuring")
DEVICE_TRANSPORTS = ("tcp", "gpuring-staged", "gpuring-device")
LABELS = {"tcp": "TCP socket, raw host bytes (floor)", "ipc": "Arrow IPC over TCP", "flight": "Arrow Flight (gRPC)",
          "gpuring": "gpuring bridge (UCX over TCP)",
          "gpuring-staged": "host staging: to host, gpuring bridge, to device",
          "gpuring-device": "gpuring bridge, device frames"}


def env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT / "interop/python/src"), os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, PYTHONPATH=path, PYTHONUNBUFFERED="1", UCX_TLS="tcp")


def start(host, *args: str) -> subprocess.Popen[str]:
    p = host.run([sys.executable, *args], env=env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None
    line = p.stdout.readline().strip()
    if line != "ready":
        raise RuntimeError(f"{args}: {line} {p.stderr.read() if p.stderr else ''}")
    return p


HOPS = ("taken", "sent", "received", "published", "arrived")


def run_one(hosts: TwoHosts, transport: str, size: int, count: int, pace_us: int, secret: str, hops: bool) -> dict:
    port = str(PORT)
    run_one.runs += 1  # type: ignore[attr-defined]
    a, b = f"a{run_one.runs}", f"b{run_one.runs}"  # type: ignore[attr-defined]
    bridges: list[subprocess.Popen[str]] = []
    idle: dict[str, float] = {}
    hop_files: str | None = None
    if transport.startswith("gpuring"):
        recv = start(hosts.b, CHILD, "recv", transport, b, str(count))
        send = start(hosts.a, CHILD, "send", transport, a, str(count), str(size), str(pace_us))
        if hops:
            hop_files = f"/tmp/gpuring-bench-hops-{os.getpid()}-{run_one.runs}"  # type: ignore[attr-defined]
        bridges = start_bridges(hosts, a, b, port, secret, hop_files)
        idle = {"idle_cpu_pct": idle_cpu([p.pid for p in bridges])}
    else:
        recv = start(hosts.b, CHILD, "recv", transport, port, str(count))
        send = start(hosts.a, CHILD, "send", transport, f"{hosts.b.address}:{port}", str(count), str(size), str(pace_us))
    assert send.stdin is not None and recv.stdout is not None
    send.stdin.write("go\n")
    send.stdin.flush()
    recv.stdout.readline()  # "timed": the receiver's first timed frame arrived
    bridges_before = [cpu_seconds(b.pid) for b in bridges]
    out, err = recv.communicate(timeout=600)
    bridges_cpu = [cpu_seconds(b.pid) - before for b, before in zip(bridges, bridges_before)]
    sent = ""
    try:
        sent = send.communicate(timeout=60)[0]
    except subprocess.TimeoutExpired:
        err += "the sender did not finish within 60 s of the last arrival"
        send.kill()
        err += send.communicate()[1][-2000:]
    for b in bridges:
        b.terminate()
        err += b.communicate(timeout=30)[1][-2000:]
    if recv.returncode or send.returncode:
        raise RuntimeError(f"{transport}: {err}")
    result = {**json.loads(out.strip().splitlines()[-1]), **idle}
    frames = len(result["latency_us"])
    result["cpu_us"] = {"sender": json.loads(sent.strip().splitlines()[-1])["cpu_s"] * 1e6 / frames,
                        "bridges": [c * 1e6 / frames for c in bridges_cpu],
                        "receiver": result["cpu_s"] * 1e6 / frames}
    if hop_files:
        result["hops_us"] = hop_medians(hop_files, result["arrivals"])
    return result


def hop_medians(prefix: str, arrivals: dict[str, int]) -> dict[str, float]:
    """Each hop's p50 in µs, over the frames every stage saw (the bridges' stamps and the consumer's arrivals)."""
    at: dict[str, dict[str, int]] = {tag: {"arrived": ns} for tag, ns in arrivals.items()}
    for role in ("source", "sink"):
        with open(f"{prefix}.{role}") as f:
            for line in f:
                tag, stage, ns = line.split()
                at.get(tag, {})[stage] = int(ns)
        os.unlink(f"{prefix}.{role}")
    frames = [(int(tag), stages) for tag, stages in at.items() if len(stages) == len(HOPS)]
    medians, before = {}, "stamp"
    for stage in HOPS:
        medians[f"{before} → {stage}"] = round(statistics.median(
            (s[stage] - (tag if before == "stamp" else s[before])) / 1e3 for tag, s in frames), 1)
        before = stage
    return medians


def start_bridges(hosts: TwoHosts, a: str, b: str, port: str, secret: str,
                  hop_files: str | None) -> list[subprocess.Popen[str]]:
    """A sink on host B into ring b, a source on host A from ring a; returns once
    they linked. With ``hop_files`` they stamp each frame's stages there."""
    launcher = os.environ["BRIDGE_LAUNCHER"].split() if "BRIDGE_LAUNCHER" in os.environ else ["-m", "gpuring", "bridge"]
    bridge = [sys.executable, *launcher, "--secret", secret, "--progress", "0", "--window", "128"]
    bridge_env = dict(env(), **({"GPURING_BRIDGE_HOPS": hop_files} if hop_files else {}))
    bridges = [hosts.b.run([*bridge, "--from", f"ucx://:{port}", "--listen", "--to", b], env=bridge_env, stderr=subprocess.PIPE),
               hosts.a.run([*bridge, "--from", a, "--to", f"ucx://{hosts.b.address}:{port}"], env=bridge_env,
                           stderr=subprocess.PIPE)]
    assert bridges[1].stderr is not None
    said = []
    while "linked" not in (line := bridges[1].stderr.readline()):
        said.append(line)
        if not line:
            for p in bridges:
                p.kill()
            raise RuntimeError("a bridge ended before linking: " + "".join(said)[-2000:] + bridges[0].communicate()[1][-2000:])
    return bridges


IDLE_S = 2.0


def cpu_seconds(pid: int) -> float:
    """The CPU a running process's threads have used, in ns from each one's
    schedstat: /proc/PID/stat counts clock ticks (10 ms), and a quick run's
    bridges may use less than one. A thread that ended takes its time with it;
    a bridge's threads live as long as it does."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(open(f"/proc/{pid}/task/{task}/schedstat").read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # ended meanwhile
    return total / 1e9


def idle_cpu(pids: list[int]) -> float:
    """The most CPU (% of one core) any of the linked bridges used over IDLE_S with no frame to move."""
    before = [cpu_seconds(p) for p in pids]
    time.sleep(IDLE_S)
    return round(max(100 * (cpu_seconds(p) - b) / IDLE_S for p, b in zip(pids, before)), 1)


run_one.runs = 0  # type: ignore[attr-defined]


def summarize(r: dict, size: int) -> dict:
    """Of the frames after the child's warm-up; a bridge's idle CPU where measured."""
    lat = sorted(r["latency_us"])
    count = len(lat)
    seconds = (r["last_ns"] - r["first_ns"]) / 1e9 or 1e-9
    return {"p50_us": round(statistics.median(lat), 1), "p99_us": round(lat[int(len(lat) * 0.99) - 1], 1),
            "frames_per_s": round((count - 1) / seconds), "mb_per_s": round((count - 1) * size / seconds / 1e6, 1),
            "idle_cpu_pct": r.get("idle_cpu_pct"), "hops_us": r.get("hops_us"),
            "cpu_us_per_frame": {k: [round(x, 1) for x in v] if isinstance(v, list) else round(v, 1)
                                 for k, v in r["cpu_us"].items()}}


CASES = [  # name, bytes per frame, frames, microseconds between frames (0: as fast as possible)
    ("latency, 1 KiB frames 1 ms apart", 1024, 300, 1000),
    ("throughput, 1 KiB frames", 1024, 3000, 0),
    ("throughput, 1 MiB frames", 1 << 20, 200, 0),
]
DEVICE_CASES = [
    ("latency, 64 KiB device frames 1 ms apart", 1 << 16, 300, 1000),
    ("throughput, 1 MiB device frames", 1 << 20, 300, 0),
    ("throughput, 16 MiB device frames", 1 << 24, 60, 0),
]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--json", action="store_true")
    p.add_argument("--quick", action="store_true", help="a tenth of the frames")
    p.add_argument("--only", choices=("latency", "throughput"), help="only the cases whose name begins so")
    p.add_argument("--transports", help="comma-separated, the floor (tcp) first")
    p.add_argument("--device", action="store_true", help="device frames (CuPy, a GPU): bridged as device memory "
                   "against host staging")
    p.add_argument("--hops", action="store_true", help="each bridged frame's hops, p50 (the bridges stamp every stage)")
    args = p.parse_args()
    transports = args.transports or ",".join(DEVICE_TRANSPORTS if args.device else TRANSPORTS)
    if why := unavailable():
        print(f"bench:remote needs two network namespaces: {why}", file=sys.stderr)
        return 2
    secret = "/tmp/gpuring-bench-remote.secret"
    with open(os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(os.urandom(24).hex())
    hosts = TwoHosts()
    rows = []
    try:
        for name, size, count, pace in [c for c in (DEVICE_CASES if args.device else CASES)
                                        if not args.only or c[0].startswith(args.only)]:
            count = max(count // 10, 20) if args.quick else count
            base = None
            for t in transports.split(","):
                print(f"{name}: {LABELS[t]}...", file=sys.stderr, flush=True)
                s = summarize(run_one(hosts, t, size, count, pace, secret, args.hops), size)
                base = base or s
                rows.append({"case": name, "transport": LABELS[t], **s,
                             "p50_vs_floor": round(s["p50_us"] / base["p50_us"], 2),
                             "throughput_vs_floor": round(s["frames_per_s"] / base["frames_per_s"], 2)})
                time.sleep(0.2)
    finally:
        hosts.close()
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        head = ["case", "transport", "p50 µs", "p99 µs", "frames/s", "MB/s", "p50 ÷ floor", "frames/s ÷ floor",
                "idle bridge CPU %", "CPU µs per frame: sender / bridges A, B / receiver"]
        print_table(head, [[r["case"], r["transport"], r["p50_us"], r["p99_us"], r["frames_per_s"], r["mb_per_s"],
                            r["p50_vs_floor"], r["throughput_vs_floor"], "" if r["idle_cpu_pct"] is None else r["idle_cpu_pct"],
                            cpu_split(r["cpu_us_per_frame"])]
                           for r in rows])
        hopped = [r for r in rows if r["hops_us"]]
        if hopped:
            print("\nhops of a bridged frame, p50 µs")
            print_table(["case", "transport", *hopped[0]["hops_us"]], [[r["case"], r["transport"], *r["hops_us"].values()]
                                                                       for r in hopped])
    return 0


def cpu_split(cpu: dict) -> str:
    return " / ".join(str(x) for x in (cpu["sender"], ", ".join(map(str, cpu["bridges"])) or "-", cpu["receiver"]))


def print_table(head: list[str], body: list[list]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    for line in [head, *body]:
        print("  ".join(str(x).ljust(w) for x, w in zip(line, widths)))


if __name__ == "__main__":
    sys.exit(main())
