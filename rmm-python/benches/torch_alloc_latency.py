"""Allocation latency through PyTorch: `torch.empty` of random sizes (512 B to 64 MiB), kept in
a window of 64 live tensors, under PyTorch's caching allocator or rmm_core's pool / expandable
pool; prints one JSON line with the mean nanoseconds of one allocation plus one free.

    python torch_alloc_latency.py {torch|pool|expandable} [operations]
"""

import json
import sys
import time

import torch
from torch_allocator_choice import use_allocator

allocator = sys.argv[1]
operations = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000
use_allocator(allocator, initial_pool_size=1 << 30)

sizes = (2 ** torch.empty(operations).uniform_(9, 26, generator=torch.Generator().manual_seed(0))).long().tolist()
window = [None] * 64


def run():
    for i, n in enumerate(sizes):
        window[i & 63] = torch.empty(n, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()


run()
start = time.perf_counter()
run()
elapsed = time.perf_counter() - start
print(json.dumps({"allocator": allocator, "operations": operations, "ns_per_alloc_free": elapsed / operations * 1e9}))
