#!/usr/bin/env python3
"""Writes the seed inputs of the `cuda_requests` fuzz target (see its doc
comment for the record format) into fuzz/seeds/cuda_requests/: a guest's
ordinary session (allocate, fill, load fairgpu's kernels, look one up,
launch it, copy the result back, free), so that mutations start from
sequences that reach module loading and kernel execution; a graph
launch of copies, memsets and event work after it; channels that
join one context, work in it, and leave it (the first to go held it);
and memory of the virtual-memory API one channel exports and another
imports and maps.

Run from the repository root: python3 fuzz/seeds/cuda_requests.py
"""
import re
import struct
from pathlib import Path

root = Path(__file__).resolve().parents[2]
opcodes = re.search(r"pub const ALL: \[Opcode; \d+\] = \[(.*?)\];",
                    (root / "protocol/src/opcode.rs").read_text(), re.S).group(1)
OPS = [m for m in re.findall(r"Opcode::(\w+)", opcodes)]
PTX = (root / "benches/kernels/fairgpu.ptx").read_bytes()
# SimGpu's first allocations in a fresh context (the target's launches
# still run if these are wrong: their accesses fail the bounds check).
BASE = 0x7000_0000_0000


def lit(v):
    return bytes([0]) + struct.pack("<Q", v)


def earlier(i):
    return bytes([2, i])


def record(ch, op, args, arena=b""):
    args = list(args) + [lit(0)] * (5 - len(args))
    return (bytes([ch, OPS.index(op)]) + b"".join(args)
            + struct.pack("<H", len(arena)) + arena)


def session(ch):
    name = b"fairgpu_axpy"
    header = struct.pack("<3I3III", 4, 1, 1, 256, 1, 1, 0, 24)
    params = struct.pack("<QQfI", BASE, BASE + 4096, 2.0, 1024)
    return b"".join([
        record(ch, "MemAlloc", [lit(4096)]),
        record(ch, "MemAlloc", [lit(4096)]),
        record(ch, "MemsetD32", [earlier(0), lit(0x3F800000), lit(1024), lit(0)]),
        record(ch, "ModuleStage", [lit(0), lit(len(PTX))], PTX),
        record(ch, "ModuleLoad", [lit(len(PTX))]),
        record(ch, "ModuleGetFunction", [earlier(0), lit(len(name))],
               name + bytes(64 - len(name))),
        record(ch, "LaunchKernel", [earlier(0), lit(0)], header + params),
        record(ch, "CtxSynchronize", []),
        record(ch, "MemcpyDtoH", [lit(BASE + 4096), lit(0)], bytes(256)),
        record(ch, "StreamCreate", [lit(0)]),
        record(ch, "EventCreate", [lit(0)]),
        record(ch, "EventRecord", [earlier(0), earlier(1)]),
        record(ch, "EventSynchronize", [earlier(0)]),
    ])


def step(op, args, data=b""):
    """One step of a GraphLaunch's arena (protocol::cuda::push_graph_step)."""
    code = int(re.search(rf"\b{op} = (0x[0-9a-f]+),",
                         (root / "protocol/src/opcode.rs").read_text()).group(1), 16)
    args = list(args) + [0] * (5 - len(args))
    return (struct.pack("<HHI", code, 0, len(data)) + struct.pack("<5Q", *args)
            + data + bytes(-len(data) % 8))


def graph_launch(ch):
    steps = b"".join([
        step("MemsetD32", [BASE, 0x01020304, 64, 0]),
        step("MemcpyHtoD", [BASE + 8, 0], bytes(range(40))),
        step("MemcpyDtoD", [BASE + 512, BASE, 256, 0]),
        step("MemsetD8", [BASE + 1000, 7, 24, 0]),
        step("EventRecord", [0, 0]),
    ])
    return session(ch) + b"".join([
        record(ch, "GraphLaunch", [lit(5)], steps),
        record(ch, "MemcpyDtoH", [lit(BASE), lit(0)], bytes(1024)),
    ])


out = root / "fuzz/seeds/cuda_requests"
out.mkdir(parents=True, exist_ok=True)
(out / "session").write_bytes(session(0))
(out / "two-channels-and-a-reset").write_bytes(session(0) + session(1) + bytes([0x80])
                                                + session(0))
(out / "graph-launch").write_bytes(graph_launch(0))
# Channel 0 shares its context; 1 and 2 join with the token (the last
# answer), use 0's memory, then 0 goes (the context moves), 1 goes, and 2
# still works in it before a new claim of channel 0 starts afresh.
(out / "shared-context").write_bytes(
    session(0)
    + record(0, "ContextShare", [])
    + record(1, "ContextJoin", [earlier(0)])
    + record(0, "ContextShare", [])
    + record(2, "ContextJoin", [earlier(0)])
    + record(1, "MemsetD8", [lit(BASE), lit(9), lit(64), lit(0)])
    + record(2, "MemcpyDtoH", [lit(BASE), lit(0)], bytes(64))
    + bytes([0x80])
    + record(2, "MemcpyDtoH", [lit(BASE), lit(0)], bytes(64))
    + bytes([0x81])
    + session(2)
    + session(0))
# Memory of the virtual-memory API that channel 0 exports and channel 1
# imports and maps; 0 goes while 1 has it mapped, then 1 writes it and
# goes too (every byte must come back).
G = 2 << 20
(out / "shared-vmem").write_bytes(
    record(0, "MemCreate", [lit(G)])
    + record(0, "MemExport", [earlier(0)])
    + record(1, "MemImport", [earlier(0)])
    + record(1, "MemAddressReserve", [lit(G), lit(0)])
    + record(1, "MemMap", [earlier(0), lit(G), lit(0), earlier(1)])
    + record(1, "MemSetAccess", [earlier(1), lit(G), lit(3)])
    + bytes([0x80])
    + record(1, "MemsetD8", [earlier(2), lit(5), lit(4096), lit(0)])
    + record(0, "MemImport", [earlier(4)])
    + bytes([0x81]))
print(f"wrote {len(list(out.iterdir()))} seeds to {out.relative_to(root)}")
