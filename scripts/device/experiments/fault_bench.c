// First touch of fresh anonymous memory, as the stack of the ranks' results and the downloads
// do it: T threads each copy into their slice of a new mapping, with and without
// madvise(MADV_HUGEPAGE), alone and while another thread unmaps a large touched mapping (the
// host X freed in the background). Prints GB/s per case.
//
//   cc -O2 -pthread -static -o fault_bench scripts/device/experiments/fault_bench.c
//   ./fault_bench GIB [THREADS...]
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "bench_copy.h"

struct unmap_job {
  void *p;
  size_t len;
  double seconds;
};

static void *unmap_it(void *arg) {
  struct unmap_job *u = arg;
  double t = now();
  munmap(u->p, u->len);
  u->seconds = now() - t;
  return NULL;
}

static void *map(size_t len, int huge) {
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("mmap");
    exit(1);
  }
  if (huge && madvise(p, len, MADV_HUGEPAGE) != 0) perror("madvise(MADV_HUGEPAGE)");
  return p;
}

static void run(size_t len, int threads, int huge, int with_unmap, const char *src) {
  struct unmap_job u = {0};
  pthread_t ut;
  if (with_unmap) {
    // A touched mapping of the same size, as the host X is when it is dropped.
    u.len = len;
    u.p = map(len, 0);
    memset(u.p, 1, len);
  }
  char *dst = map(len, huge);
  pthread_t tid[256];
  struct job jobs[256];
  size_t per = (len / threads) & ~(size_t)4095;
  double t = now();
  if (with_unmap) pthread_create(&ut, NULL, unmap_it, &u);
  for (int i = 0; i < threads; i++) {
    jobs[i].dst = dst + i * per;
    jobs[i].src = src;
    jobs[i].src_len = 256u << 20;
    jobs[i].len = i == threads - 1 ? len - i * per : per;
    pthread_create(&tid[i], NULL, copy_slice, &jobs[i]);
  }
  for (int i = 0; i < threads; i++) pthread_join(tid[i], NULL);
  double s = now() - t;
  if (with_unmap) pthread_join(ut, NULL);
  printf("copy into fresh memory: %5.1f GiB, %2d threads, %-9s %-22s %6.2f s  %6.1f GB/s%s\n",
         len / 1073741824.0, threads, huge ? "hugepage" : "4k-pages",
         with_unmap ? "while unmapping" : "alone", s, len / s / 1e9,
         with_unmap ? "" : "");
  if (with_unmap) printf("   (the unmap of %.1f GiB took %.2f s)\n", u.len / 1073741824.0, u.seconds);
  t = now();
  munmap(dst, len);
  printf("   unmap of the copy: %.2f s\n", now() - t);
}

int main(int argc, char **argv) {
  size_t gib = argc > 1 ? strtoul(argv[1], NULL, 10) : 8;
  size_t len = gib << 30;
  char *src = map(256u << 20, 0);
  memset(src, 7, 256u << 20);
  int counts[32], n = 0;
  for (int i = 2; i < argc && n < 32; i++) counts[n++] = atoi(argv[i]);
  if (n == 0) {
    counts[0] = 1;
    counts[1] = 8;
    counts[2] = 16;
    n = 3;
  }
  for (int i = 0; i < n; i++)
    for (int huge = 0; huge < 2; huge++)
      for (int un = 0; un < 2; un++) run(len, counts[i], huge, un, src);
  return 0;
}
