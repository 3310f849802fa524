"""Compares every dataset of two h5ad files: prints the ones that differ (and how much) and
'all N datasets equal' when none does. Usage: python3 compare_h5ad.py A.h5ad B.h5ad"""
import sys

import h5py
import numpy as np

a, b = (h5py.File(f, "r") for f in sys.argv[1:3])
names = []
a.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
differ = 0
for name in names:
    if name not in b:
        print(f"{name}: missing from {sys.argv[2]}")
        differ += 1
        continue
    x, y = np.asarray(a[name][()]), np.asarray(b[name][()])
    if x.shape != y.shape or not np.array_equal(x, y):
        differ += 1
        if x.shape != y.shape:
            print(f"{name}: shapes {x.shape} and {y.shape}")
        elif x.dtype.kind in "fiu":
            d = np.abs(x.astype(np.float64) - y.astype(np.float64))
            print(f"{name}: {int((d > 0).sum())} of {d.size} values differ, max {d.max():.3g}")
        else:
            print(f"{name}: differs")
print(f"all {len(names)} datasets equal" if differ == 0 else f"{differ} of {len(names)} datasets differ")
