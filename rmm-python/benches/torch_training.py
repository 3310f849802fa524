"""A PyTorch training loop under each allocator: PyTorch's caching allocator, or rmm_core's pool
or expandable pool through `rmm_core.allocators.torch`. One allocator per process (PyTorch can
switch only before its first allocation); prints one JSON line.

    python torch_training.py {torch|pool|expandable} [steps]

The model is a transformer encoder (8 layers, width 1024, about 100 M parameters) fed
batches whose sequence length changes from step to step among 8 lengths (128 to 1024), so the
allocation sizes change too (what stresses a caching
allocator) while every shape's kernels are planned in the warm-up (two steps of each length).
Step time: the median of `steps` steps after the warm-up, each ended by a synchronize.
Peak reserved: torch.cuda.max_memory_reserved() for PyTorch's allocator, the pool's size
(pools never shrink here) for rmm_core's."""

import json
import statistics
import sys
import time

import torch
from torch_allocator_choice import use_allocator

allocator = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 200
pool = use_allocator(allocator, initial_pool_size=0)

torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(d_model=1024, nhead=16, dim_feedforward=4096, batch_first=True)
model = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, num_layers=8), torch.nn.Linear(1024, 1000)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
buckets = list(range(128, 1025, 128))
warmup = buckets * 2
lengths = warmup + [buckets[i] for i in torch.randint(0, len(buckets), (steps,)).tolist()]
times = []
for i, length in enumerate(lengths):
    x = torch.randn(32, length, 1024, device="cuda")
    y = torch.randint(0, 1000, (32, length), device="cuda")
    torch.cuda.synchronize()
    start = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
    loss.backward()
    opt.step()
    torch.cuda.synchronize()
    if i >= len(warmup):
        times.append(time.perf_counter() - start)
reserved = torch.cuda.max_memory_reserved() if pool is None else pool.pool_size()
print(json.dumps({
    "allocator": allocator,
    "steps": steps,
    "median_step_ms": statistics.median(times) * 1e3,
    "mean_step_ms": statistics.fmean(times) * 1e3,
    "peak_reserved_bytes": reserved,
    "final_loss": loss.item(),
}))
