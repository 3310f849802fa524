# Read by CMake before HDF5's project (through .cargo/config.toml): the C flags of its Release
# build. A cache entry set first is kept by CMake's own defaults (-O3).
set(CMAKE_C_FLAGS_RELEASE "-O1 -DNDEBUG" CACHE STRING "HDF5 at -O1: a shorter first build")
