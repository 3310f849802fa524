set -u
cd .gpu-run && tar xJf bins.tar.xz && cd ..
export OUT=${OUT:-/tmp/out}; mkdir -p $OUT/t
B=.gpu-run/b/new/scpipe
D=/tmp/disk; mkdir -p $D
SKIP="--no-qc --no-filter-cells --no-filter-genes --no-normalize --no-log1p --no-hvg --no-scale --no-pca --no-neighbors --no-umap --no-leiden --no-markers"
df -h /tmp | tail -1
/usr/bin/time -f "generate %e s" $B generate 1000000 20000 -o $D/in.h5ad 2>&1 | tail -1
/usr/bin/time -f "copy %e s" $B run $D/in.h5ad -o $D/in_lz4.zarr --device cpu $SKIP 2>&1 | tail -1
du -sh $D/in.h5ad $D/in_lz4.zarr
for s in in.h5ad in_lz4.zarr; do
  sync; echo 3 > /proc/sys/vm/drop_caches
  SCPIPE_TRACE_PHASES=1 $B run $D/$s -o /dev/shm/o.zarr --device cpu $SKIP > $OUT/t/disk_$s.log 2>&1
  echo "$s cold: $(grep -E 'read (X|obs)|^read input' $OUT/t/disk_$s.log | sed 's/ (at.*//' | cut -c1-60 | tr '\n' '|')"; rm -rf /dev/shm/o.zarr
done
