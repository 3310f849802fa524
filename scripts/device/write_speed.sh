#!/bin/bash
# The h5ad write of a 1,000,000-cell GPU run, by two scpipe builds in turn (BUNDLE/scpipe-old:
# HDF5 writes every array; BUNDLE/scpipe: large arrays written in parallel after HDF5 closes the
# file), each output removed before the next run. The first run only grows the machine's memory
# (this VM maps memory on first use, about 3 s per 8 GiB), so the later ones compare the writes.
B=${1:?bundle}
for bin in scpipe scpipe-old scpipe scpipe-old; do
  "$B/$bin" run --demo --demo-cells 1000000 --demo-genes 20000 --gpus 1 -o /dev/shm/w.h5ad 2>&1 \
    | grep "write h5ad" | sed "s/^/$bin: /"
  rm -f /dev/shm/w.h5ad
done
