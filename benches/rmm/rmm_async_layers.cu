// RMM's cuda_async, and the driver's pool through the runtime, as a shared library that
// benches/benches/async_layers.rs loads (`--rmm-lib PATH`), so that RMM's resource and ours take
// turns within one process on the same trace: the driver's per-process swings (500 to 1,000 ns
// per call from one process to the next) then hit both alike.
//
// Built on the GPU machine (scripts/device/benchmarks/async_layers.sh):
//   nvcc -std=c++20 -O3 -arch=sm_90 -shared -Xcompiler -fPIC -Irmm/include -Irmm/include/rapids \
//     -Irlog/include rmm_async_layers.cu -o librmm_async_layers.so -Lrmm/lib64 -lrmm ...
//
// Every function returns null (allocate) or false on failure, after printing what failed: no C++
// exception crosses into Rust. The resource and the pool live until the process ends.
#include <rmm/mr/cuda_async_memory_resource.hpp>
#include <rmm/resource_ref.hpp>
#include <cuda_runtime_api.h>
#include <cstdio>
#include <cstdint>
#include <exception>

using async_mr = rmm::mr::cuda_async_memory_resource;

extern "C" {

// RMM's cuda_async_memory_resource as its benchmark builds it (default arguments).
void* rmm_async_new() {
  try { return new async_mr(); }
  catch (std::exception const& e) { std::fprintf(stderr, "rmm_async_new: %s\n", e.what()); return nullptr; }
}

void* rmm_async_allocate(void* mr, size_t bytes, void* stream) {
  try { return static_cast<async_mr*>(mr)->allocate(cuda::stream_ref{static_cast<cudaStream_t>(stream)}, bytes, 256); }
  catch (std::exception const& e) { std::fprintf(stderr, "rmm_async_allocate(%zu): %s\n", bytes, e.what()); return nullptr; }
}

bool rmm_async_deallocate(void* mr, void* ptr, size_t bytes, void* stream) {
  try { static_cast<async_mr*>(mr)->deallocate(cuda::stream_ref{static_cast<cudaStream_t>(stream)}, ptr, bytes, 256); return true; }
  catch (std::exception const& e) { std::fprintf(stderr, "rmm_async_deallocate: %s\n", e.what()); return false; }
}

// The driver's pool through the runtime with nothing in between (what cuda_async calls): a
// pool of pinned device memory on device 0 whose release threshold is at its maximum.
void* runtime_pool_new() {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t pool{};
  if (cudaMemPoolCreate(&pool, &props) != cudaSuccess) { std::fprintf(stderr, "cudaMemPoolCreate failed\n"); return nullptr; }
  uint64_t threshold = UINT64_MAX;
  if (cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold) != cudaSuccess) return nullptr;
  return pool;
}

void* runtime_pool_allocate(void* pool, size_t bytes, void* stream) {
  void* p = nullptr;
  cudaError_t e = cudaMallocFromPoolAsync(&p, bytes, static_cast<cudaMemPool_t>(pool), static_cast<cudaStream_t>(stream));
  if (e != cudaSuccess) { std::fprintf(stderr, "cudaMallocFromPoolAsync(%zu): %s\n", bytes, cudaGetErrorString(e)); return nullptr; }
  return p;
}

bool runtime_pool_free(void* ptr, void* stream) {
  return cudaFreeAsync(ptr, static_cast<cudaStream_t>(stream)) == cudaSuccess;
}

}  // extern "C"
