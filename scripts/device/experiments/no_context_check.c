// Whether the stream-ordered pool calls need a current context (issue 11: MemPool skips the
// context check on created streams). Compile and run on the GPU machine:
//   gcc scripts/device/experiments/no_context_check.c -o /tmp/noctx -I/usr/local/cuda/include -lcuda && /tmp/noctx
// Every line should end in 0 (CUDA_SUCCESS), the byte read back in ab.
#include <cuda.h>
#include <stdio.h>
int main(){
  cuInit(0); CUdevice d; cuDeviceGet(&d,0); CUcontext c; cuDevicePrimaryCtxRetain(&c,d); cuCtxSetCurrent(c);
  CUmemPoolProps p={0}; p.allocType=CU_MEM_ALLOCATION_TYPE_PINNED; p.location.type=CU_MEM_LOCATION_TYPE_DEVICE; p.location.id=0;
  CUmemoryPool pool; printf("create %d\n", cuMemPoolCreate(&pool,&p));
  CUstream s; printf("stream %d\n", cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  cuCtxSetCurrent(NULL);
  CUcontext cur=(CUcontext)1; cuCtxGetCurrent(&cur); printf("current now %p\n", (void*)cur);
  CUdeviceptr ptr=0; CUresult r=cuMemAllocFromPoolAsync(&ptr, 1<<20, pool, s); printf("alloc without a current context: %d ptr=%llx\n", r, (unsigned long long)ptr);
  r=cuMemFreeAsync(ptr, s); printf("free without a current context: %d\n", r);
  r=cuStreamSynchronize(s); printf("sync: %d\n", r);
  /* Another context of the same device current: the stream's context still serves. */
  CUcontext other;
#if CUDA_VERSION >= 13000
  r=cuCtxCreate(&other, NULL, 0, d);
#else
  r=cuCtxCreate(&other, 0, d);
#endif
  printf("other context: %d\n", r);
  cuCtxSetCurrent(other);
  ptr=0; r=cuMemAllocFromPoolAsync(&ptr, 1<<20, pool, s); printf("alloc with another context current: %d ptr=%llx\n", r, (unsigned long long)ptr);
  r=cuMemsetD8Async(ptr, 0xab, 1<<20, s); printf("memset on the stream, other context current: %d\n", r);
  unsigned char h[16]={0}; r=cuMemcpyDtoHAsync(h, ptr, 16, s); printf("copy back: %d\n", r);
  r=cuStreamSynchronize(s); printf("sync: %d byte %x\n", r, h[3]);
  r=cuMemFreeAsync(ptr, s); printf("free with another context current: %d\n", r);
  r=cuStreamSynchronize(s); printf("sync: %d\n", r);
  return 0;
}
