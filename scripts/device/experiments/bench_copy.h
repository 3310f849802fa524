// Shared by the C benches of this folder: a monotonic clock, and one thread's share of a large
// copy (64 MiB memcpy pieces from a touched source of src_len bytes, repeated).
#include <stddef.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

struct job {
  char *dst;
  const char *src;
  size_t len;
  size_t src_len;
};

static void *copy_slice(void *arg) {
  struct job *j = arg;
  const size_t piece = 64 << 20;
  for (size_t off = 0; off < j->len; off += piece) {
    size_t n = j->len - off < piece ? j->len - off : piece;
    memcpy(j->dst + off, j->src + (off % j->src_len), n);
  }
  return NULL;
}
