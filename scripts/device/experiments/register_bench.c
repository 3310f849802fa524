// Moving a host CSR to several GPUs (issue 12): today each rank copies its rows through two
// pinned 64 MiB staging buffers, and with 4 GPUs the 4 ranks together move no more bytes per
// second than 1 GPU does alone (the host-side memcpy into the staging buffers is the limit:
// each byte is read and written by the CPU, then read again by the copy engine). Could the
// ranks' copy engines read the host array itself, page-locked in place (cuMemHostRegister)?
// This times, on a touched host array of GIB GiB (2 MiB pages when HUGE=1):
//   register     cuMemHostRegister of each GPU's share, the shares on one thread each
//   copy         each GPU copies its share from the registered array (cuMemcpyHtoDAsync)
//   unregister   cuMemHostUnregister of each share
//   staged       each GPU copies its share through two pinned 64 MiB buffers, filled by
//                COPIERS threads per GPU (what scpipe does, without rayon)
// for 1 .. NGPUS GPUs.
//
//   cc -O2 -pthread -I/usr/local/cuda/include -o register_bench scripts/device/experiments/register_bench.c \
//      -L/usr/local/cuda/lib64/stubs -lcuda
//   ./register_bench GIB NGPUS HUGE COPIERS
#define _GNU_SOURCE
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench_copy.h"

#define CHECK(x)                                                      \
  do {                                                                \
    CUresult r_ = (x);                                                \
    if (r_ != CUDA_SUCCESS) {                                         \
      const char *s_;                                                 \
      cuGetErrorString(r_, &s_);                                      \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_);  \
      exit(1);                                                        \
    }                                                                 \
  } while (0)

static const size_t CHUNK = 64ul << 20;
static int copiers;

struct gpu {
  int id;
  CUcontext ctx;
  CUstream stream;
  CUdeviceptr dst;
  char *src;
  size_t len;
  double t_register, t_copy, t_unregister, t_staged;
  void *pinned[2];
  CUevent done[2];
};

static void *do_register(void *arg) {
  struct gpu *g = arg;
  CHECK(cuCtxSetCurrent(g->ctx));
  double t = now();
  CHECK(cuMemHostRegister(g->src, g->len, 0));
  g->t_register = now() - t;
  return NULL;
}

static void *do_copy(void *arg) {
  struct gpu *g = arg;
  CHECK(cuCtxSetCurrent(g->ctx));
  double t = now();
  for (size_t off = 0; off < g->len; off += CHUNK) {
    size_t n = g->len - off < CHUNK ? g->len - off : CHUNK;
    CHECK(cuMemcpyHtoDAsync(g->dst + off, g->src + off, n, g->stream));
  }
  CHECK(cuStreamSynchronize(g->stream));
  g->t_copy = now() - t;
  return NULL;
}

static void *do_unregister(void *arg) {
  struct gpu *g = arg;
  CHECK(cuCtxSetCurrent(g->ctx));
  double t = now();
  CHECK(cuMemHostUnregister(g->src));
  g->t_unregister = now() - t;
  return NULL;
}

static void *do_staged(void *arg) {
  struct gpu *g = arg;
  CHECK(cuCtxSetCurrent(g->ctx));
  double t = now();
  int i = 0;
  for (size_t off = 0; off < g->len; off += CHUNK, i ^= 1) {
    size_t n = g->len - off < CHUNK ? g->len - off : CHUNK;
    CHECK(cuEventSynchronize(g->done[i]));
    pthread_t th[64];
    struct job s[64];
    size_t per = (n / copiers + 4095) & ~4095ul;
    for (int c = 0; c < copiers; c++) {
      size_t a = per * c < n ? per * c : n, b = per * (c + 1) < n ? per * (c + 1) : n;
      s[c] = (struct job){(char *)g->pinned[i] + a, g->src + off + a, b - a, b - a ? b - a : 1};
      pthread_create(&th[c], NULL, copy_slice, &s[c]);
    }
    for (int c = 0; c < copiers; c++) pthread_join(th[c], NULL);
    CHECK(cuMemcpyHtoDAsync(g->dst + off, g->pinned[i], n, g->stream));
    CHECK(cuEventRecord(g->done[i], g->stream));
  }
  CHECK(cuStreamSynchronize(g->stream));
  g->t_staged = now() - t;
  return NULL;
}

static void on_all(struct gpu *gs, int n, void *(*f)(void *)) {
  pthread_t t[16];
  for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, f, &gs[i]);
  for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s GIB NGPUS HUGE COPIERS\n", argv[0]);
    return 2;
  }
  size_t len = (size_t)atol(argv[1]) << 30;
  int ngpus = atoi(argv[2]), huge = atoi(argv[3]);
  copiers = atoi(argv[4]);
  CHECK(cuInit(0));
  int count;
  CHECK(cuDeviceGetCount(&count));
  if (ngpus > count) ngpus = count;
  char *host = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (host == MAP_FAILED) return perror("mmap"), 1;
  if (huge) madvise(host, len, MADV_HUGEPAGE);
  double t = now();
  memset(host, 1, len);
  printf("touch %zu GiB (huge pages %d): %.3f s\n", len >> 30, huge, now() - t);
  struct gpu gs[16];
  for (int i = 0; i < ngpus; i++) {
    CUdevice d;
    CHECK(cuDeviceGet(&d, i));
    gs[i].id = i;
    CHECK(cuDevicePrimaryCtxRetain(&gs[i].ctx, d));
    CHECK(cuCtxSetCurrent(gs[i].ctx));
    CHECK(cuStreamCreate(&gs[i].stream, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAlloc(&gs[i].dst, len));
    for (int b = 0; b < 2; b++) {
      CHECK(cuMemHostAlloc(&gs[i].pinned[b], CHUNK, 0));
      CHECK(cuEventCreate(&gs[i].done[b], CU_EVENT_DISABLE_TIMING));
      CHECK(cuEventRecord(gs[i].done[b], gs[i].stream));
    }
  }
  for (int round = 0; round < 2; round++) {
    for (int n = 1; n <= ngpus; n *= 2) {
      size_t share = (len / n) & ~((2ul << 20) - 1);
      for (int i = 0; i < n; i++) {
        gs[i].src = host + share * i;
        gs[i].len = i == n - 1 ? len - share * i : share;
      }
      double t0 = now();
      on_all(gs, n, do_register);
      double t1 = now();
      on_all(gs, n, do_copy);
      double t2 = now();
      on_all(gs, n, do_unregister);
      double t3 = now();
      on_all(gs, n, do_staged);
      double t4 = now();
      printf("round %d, %d GPU(s), %zu GiB: register %.3f s, copy %.3f s (%.1f GB/s), "
             "unregister %.3f s; registered total %.3f s; staged (%d copiers each) %.3f s "
             "(%.1f GB/s)\n",
             round, n, len >> 30, t1 - t0, t2 - t1, len / (t2 - t1) / 1e9, t3 - t2, t3 - t0,
             copiers, t4 - t3, len / (t4 - t3) / 1e9);
    }
  }
  return 0;
}
