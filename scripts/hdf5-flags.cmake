# Read by CMake before HDF5's project (through .cargo/config.toml): the C flags of its Release
# build. A cache entry set first is kept by CMake's own defaults (-O3).
# -O0: HDF5's C library is the largest unit of the first build (118 core-seconds at -O3, 66 at
# -O1, 47 at -O0 on 2 cores). Its code is on no hot path of ours: large arrays are read and
# written around it, and a gzip-compressed h5ad reads as fast (zlib is built apart, at -O3):
# 100,000 cells, medians of 4, -O3 7.3 s, -O1 7.1 s, -O0 6.9 s (benches/results/LOG.md).
set(CMAKE_C_FLAGS_RELEASE "-O0 -DNDEBUG" CACHE STRING "HDF5 at -O0: a shorter first build")
