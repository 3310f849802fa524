#!/bin/bash
# The h5ad write of a 1,000,000-cell GPU run, by two scpipe builds in turn (BUNDLE/scpipe and
# BUNDLE/scpipe-old: e.g. a writer change against the build before it), each output removed
# before the next run. The first run also grows the machine's memory (this VM maps memory on first
# use, about 3 s per 8 GiB), so compare the later ones. On 2026-11-24 (H100) it showed that
# writing large arrays in parallel at their file offsets was no faster than HDF5 alone (Linux
# serialises buffered writes to one file), and that change was reverted.
B=${1:?bundle}
for bin in scpipe scpipe-old scpipe scpipe-old; do
  "$B/$bin" run --demo --demo-cells 1000000 --demo-genes 20000 --gpus 1 -o /dev/shm/w.h5ad 2>&1 \
    | grep "write h5ad" | sed "s/^/$bin: /"
  rm -f /dev/shm/w.h5ad
done
