"""Where a training step's time goes under one allocator (diagnostics for torch_training.py):
the GPU time of all kernels and the host time of the top operators, over 20 profiled steps.

    python torch_profile.py {torch|pool|expandable}
"""

import json
import sys

import torch
from torch.profiler import ProfilerActivity, profile

allocator = sys.argv[1]
if allocator != "torch":
    from rmm_core import mr

    pool = (
        mr.PoolMemoryResource(mr.CudaMemoryResource(0), initial_pool_size=1 << 32)
        if allocator == "pool"
        else mr.ExpandablePoolMemoryResource(initial_pool_size=1 << 32, device=0)
    )
    mr.set_per_device_resource(0, pool)
    from rmm_core.allocators.torch import rmm_torch_allocator

    torch.cuda.memory.change_current_allocator(rmm_torch_allocator)

torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048, batch_first=True)
model = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, num_layers=6), torch.nn.Linear(512, 1000)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)


def step(length):
    x = torch.randn(32, length, 512, device="cuda")
    y = torch.randint(0, 1000, (32, length), device="cuda")
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
    loss.backward()
    opt.step()


for length in range(64, 513, 16):
    step(length)
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for length in range(96, 513, 21):
        step(length)
    torch.cuda.synchronize()
events = prof.key_averages()
gpu_us = sum(e.self_device_time_total for e in events)
top = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:12]
print(json.dumps({
    "allocator": allocator,
    "gpu_kernel_ms": gpu_us / 1e3,
    "top_host_ms": {e.key: round(e.self_cpu_time_total / 1e3, 2) for e in top},
}))
