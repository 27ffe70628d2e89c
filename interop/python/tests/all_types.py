"""A pyarrow table with one column of every type gpuring carries, with nulls."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

import numpy as np
import pyarrow as pa


def all_types_table(rows: int) -> pa.Table:
    idx = range(rows)

    def maybe(f):
        return [None if i % 5 == 2 else f(i) for i in idx]

    cols = {
        "int8": pa.array(maybe(lambda i: i % 250 - 125), pa.int8()),
        "int16": pa.array(maybe(lambda i: i * 31 - 3000), pa.int16()),
        "int32": pa.array(maybe(lambda i: i * 100_003 - 7), pa.int32()),
        "int64": pa.array(maybe(lambda i: i * -(2**40)), pa.int64()),
        "uint8": pa.array(maybe(lambda i: i % 256), pa.uint8()),
        "uint16": pa.array(maybe(lambda i: i * 7 % 65536), pa.uint16()),
        "uint32": pa.array(maybe(lambda i: i * 4_000_000), pa.uint32()),
        "uint64": pa.array(maybe(lambda i: 2**63 + i), pa.uint64()),
        "float16": pa.array(maybe(lambda i: np.float16(i / 4 - 2)), pa.float16()),
        "float32": pa.array(maybe(lambda i: i * 1.5), pa.float32()),
        "float64": pa.array(maybe(lambda i: i / 3), pa.float64()),
        "bool": pa.array(maybe(lambda i: i % 3 == 0), pa.bool_()),
        "date32": pa.array(maybe(lambda i: dt.date(2020, 1, 1) + dt.timedelta(days=i)), pa.date32()),
        "date64": pa.array(maybe(lambda i: 1_600_000_000_000 + i * 86_400_000), pa.date64()),
        "time32s": pa.array(maybe(lambda i: i), pa.time32("s")),
        "time32ms": pa.array(maybe(lambda i: i * 1000), pa.time32("ms")),
        "time64us": pa.array(maybe(lambda i: i * 1000), pa.time64("us")),
        "time64ns": pa.array(maybe(lambda i: i * 1_000_000), pa.time64("ns")),
        "timestamp_s": pa.array(maybe(lambda i: 1_700_000_000 + i), pa.timestamp("s")),
        "timestamp_ms_utc": pa.array(maybe(lambda i: 1_700_000_000_000 + i), pa.timestamp("ms", "UTC")),
        "timestamp_us_paris": pa.array(maybe(lambda i: 1_700_000_000_000 + 7 * i), pa.timestamp("us", "Europe/Paris")),
        "timestamp_ns": pa.array(maybe(lambda i: 1_700_000_000_000 + i), pa.timestamp("ns")),
        "duration_s": pa.array(maybe(lambda i: i), pa.duration("s")),
        "duration_ns": pa.array(maybe(lambda i: 7 * i), pa.duration("ns")),
        "decimal128": pa.array(maybe(lambda i: Decimal(i * 12345) / 10000), pa.decimal128(30, 4)),
        "utf8": pa.array(maybe(lambda i: f"value {i} " + "é" * (i % 4)), pa.string()),
        "large_utf8": pa.array(maybe(lambda i: "x" * (i % 9)), pa.large_string()),
        "binary": pa.array(maybe(lambda i: bytes((k * i) % 256 for k in range(i % 6))), pa.binary()),
        "large_binary": pa.array(maybe(lambda i: bytes(k + i for k in range(i % 3))), pa.large_binary()),
        "fixed_size_binary": pa.array(maybe(lambda i: bytes([i % 250, i % 250 + 1, i % 250 + 2, i % 250 + 3])), pa.binary(4)),
        "tensor": pa.array([[i, i + 0.5, i + 0.25] for i in idx], pa.list_(pa.field("v", pa.float32(), False), 3)),
        "list": pa.array(maybe(lambda i: [i * 10 + k for k in range(i % 4)]), pa.list_(pa.int32())),
        "large_list": pa.array(maybe(lambda i: list(range(i % 3))), pa.large_list(pa.int32())),
        "struct": pa.array(maybe(lambda i: {"a": i, "b": f"s{i}", "c": [i, i]}),
                           pa.struct([("a", pa.int32()), ("b", pa.string()), ("c", pa.list_(pa.int32()))])),
        "dictionary": pa.array(maybe(lambda i: ["red", "green", "blue"][i % 3])).dictionary_encode(),
    }
    schema = pa.schema([pa.field(k, v.type, metadata={"unit": "widgets"} if k == "int32" else None)
                        for k, v in cols.items()], metadata={"producer": "gpuring python tests"})
    return pa.Table.from_arrays(list(cols.values()), schema=schema)
