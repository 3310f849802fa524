"""Exact kNN with PyTorch on the same points as bench-allocator_modes (--dump-data DIR): the
baseline of issue 9's neighbors goal (rapids-singlecell needs cuML/cuVS for this step, which the
GPU machine lacks). Query tiles of 8192 against all points: torch.cdist, then topk.

    python knn_torch.py DIR/points_N.f32 DIMS K [RUNS]     (prints one JSON line per run)
"""
import json
import sys
import time

import numpy as np
import torch

path, d, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
runs = int(sys.argv[4]) if len(sys.argv) > 4 else 3
x_host = np.fromfile(path, dtype=np.float32).reshape(-1, d)
n = x_host.shape[0]


def knn():
    x = torch.from_numpy(x_host).cuda()
    idx = torch.empty((n, k), dtype=torch.int64, device="cuda")
    dist = torch.empty((n, k), dtype=torch.float32, device="cuda")
    for s in range(0, n, 8192):
        e = min(n, s + 8192)
        dd = torch.cdist(x[s:e], x)
        v, i = torch.topk(dd, k, dim=1, largest=False, sorted=True)
        idx[s:e], dist[s:e] = i, v
    return idx.cpu(), dist.cpu()


for r in range(runs + 1):
    torch.cuda.synchronize()
    t = time.perf_counter()
    idx, dist = knn()
    torch.cuda.synchronize()
    s = time.perf_counter() - t
    print(json.dumps({"impl": "torch cdist+topk", "torch": torch.__version__, "cells": n,
                      "dims": d, "k": k, "run": r, "cold": r == 0, "seconds": s,
                      "peak_bytes": torch.cuda.max_memory_allocated()}))
