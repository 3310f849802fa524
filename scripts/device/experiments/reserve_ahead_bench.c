// Writing several large datasets into one fresh tmpfs file, as the h5ad writer does with X and
// `.raw` (issue 12): can the reservation (fallocate, one thread, the inode locked) of dataset k+1
// run while dataset k is copied? Copies fault their pages in, and while fallocate runs every
// fault on the file takes the inode's spinlock; a mapping populated beforehand (MAP_POPULATE)
// needs no faults. Cases, each on DATASETS datasets of GIB GiB, copied by THREADS threads:
//   in turn      fallocate k, copy k, then k+1 (what scpipe does now)
//   populated    fallocate k, map it with MAP_POPULATE, copy k, then k+1
//   ahead        a second thread reserves k+1 while k is copied (copies fault)
//   ahead+pop    the same, each dataset mapped with MAP_POPULATE by the reserving thread
//
//   cc -O2 -pthread -o reserve_ahead_bench scripts/device/experiments/reserve_ahead_bench.c
//   ./reserve_ahead_bench DIR GIB DATASETS THREADS
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "bench_copy.h"

static size_t len;    // bytes per dataset
static int nsets, nthreads;
static char *src;     // 1 GiB, touched
static const size_t SRC = 1ul << 30;

static void copy_all(char *dst) {
  pthread_t t[256];
  struct job s[256];
  size_t per = (len / nthreads + 4095) & ~4095ul;
  for (int i = 0; i < nthreads; i++) {
    size_t a = per * i < len ? per * i : len, b = per * (i + 1) < len ? per * (i + 1) : len;
    s[i] = (struct job){dst + a, src, b - a, SRC};
    pthread_create(&t[i], NULL, copy_slice, &s[i]);
  }
  for (int i = 0; i < nthreads; i++) pthread_join(t[i], NULL);
}

static int fd;
static char *maps[64];
static volatile int ready;  // datasets reserved (and mapped) so far
static int populate;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

static void reserve_and_map(int k) {
  if (posix_fallocate(fd, (off_t)len * k, len) != 0) {
    perror("fallocate");
    exit(1);
  }
  int flags = MAP_SHARED | (populate ? MAP_POPULATE : 0);
  maps[k] = mmap(NULL, len, PROT_READ | PROT_WRITE, flags, fd, (off_t)len * k);
  if (maps[k] == MAP_FAILED) {
    perror("mmap");
    exit(1);
  }
}

static void *reserver(void *arg) {
  (void)arg;
  for (int k = 0; k < nsets; k++) {
    reserve_and_map(k);
    pthread_mutex_lock(&mu);
    ready = k + 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
  }
  return NULL;
}

static void run(const char *dir, const char *name, int ahead, int pop) {
  char path[4096];
  snprintf(path, sizeof path, "%s/reserve_ahead.bin", dir);
  unlink(path);
  fd = open(path, O_RDWR | O_CREAT, 0600);
  populate = pop;
  ready = 0;
  double t0 = now(), copying = 0;
  pthread_t r;
  if (ahead) pthread_create(&r, NULL, reserver, NULL);
  for (int k = 0; k < nsets; k++) {
    if (ahead) {
      pthread_mutex_lock(&mu);
      while (ready <= k) pthread_cond_wait(&cv, &mu);
      pthread_mutex_unlock(&mu);
    } else {
      reserve_and_map(k);
    }
    double c = now();
    copy_all(maps[k]);
    copying += now() - c;
  }
  if (ahead) pthread_join(r, NULL);
  double total = now() - t0;
  for (int k = 0; k < nsets; k++) munmap(maps[k], len);
  close(fd);
  unlink(path);
  printf("%-12s %d x %.1f GiB: %.2f s (copies %.2f s), %.1f GB/s\n", name, nsets,
         len / (double)(1ul << 30), total, copying, nsets * len / total / 1e9);
  fflush(stdout);
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s DIR GIB DATASETS THREADS\n", argv[0]);
    return 2;
  }
  len = (size_t)(atof(argv[2]) * (1ul << 30)) & ~((2ul << 20) - 1);
  nsets = atoi(argv[3]);
  nthreads = atoi(argv[4]);
  if (nsets < 1 || nsets > 64 || nthreads < 1 || nthreads > 256) return 2;
  src = malloc(SRC);
  memset(src, 7, SRC);
  for (int rep = 0; rep < 2; rep++) {
    run(argv[1], "in turn", 0, 0);
    run(argv[1], "populated", 0, 1);
    run(argv[1], "ahead", 1, 0);
    run(argv[1], "ahead+pop", 1, 1);
  }
  return 0;
}
