"""Child: publishes one frame of device columns from LIBRARY (cupy or torch),
prints {"published": id}, drains, exits.
  x: float32 [0, 1, ..., ROWS-1] * 0.5     m: (ROWS, 3) int32, m[i, j] = 10 * i + j
The torch columns are views into larger tensors (caching-allocator offsets)."""
import json
import sys

from gpuring import Producer

name, library, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
if library == "cupy":
    import cupy as xp
    x = xp.arange(rows, dtype=xp.float32) * 0.5
    m = (xp.arange(rows, dtype=xp.int32)[:, None] * 10 + xp.arange(3, dtype=xp.int32)[None, :])
else:
    import torch
    pad = torch.zeros(1000, device="cuda")
    big = torch.arange(rows + 7, dtype=torch.float32, device="cuda") * 0.5
    x = big[7:] - 3.5  # starts 28 bytes into its block
    m = (torch.arange(rows, dtype=torch.int32, device="cuda")[:, None] * 10 + torch.arange(3, dtype=torch.int32, device="cuda")[None, :])
with Producer.open(name) as producer:
    frame_id = producer.publish({"x": x, "m": m})
    print(json.dumps({"published": frame_id}), flush=True)
    producer.drain(timeout=60)
