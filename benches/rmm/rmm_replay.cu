// Reference harness: RMM 26.10's resources replaying an allocation log (RMM's CSV format:
// Thread,Time,Action,Pointer,Size,Stream; e.g. `scpipe run --allocation-log LOG.csv`), the twin of
// benches/benches/replay.rs: the same events in the logged order, one stream per logged stream
// handle (0: the legacy default stream, 2: the per-thread one), resources configured as
// rmm_ra.cu configures them. Figure: time inside the allocate and deallocate calls / their
// number, best of 20 replays after one warm-up replay on the same resource.
// Usage: rmm_replay LOG.csv
#include <rmm/mr/cuda_memory_resource.hpp>
#include <rmm/mr/cuda_async_memory_resource.hpp>
#include <rmm/mr/pool_memory_resource.hpp>
#include <rmm/mr/arena_memory_resource.hpp>
#include <rmm/mr/binning_memory_resource.hpp>
#include <cuda_runtime_api.h>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

struct Ev { bool alloc; uint64_t ptr; size_t size; uint64_t stream; };

static std::vector<Ev> read_log(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::vector<Ev> ev;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) f.push_back(cell);
    if (f.size() < 6) continue;
    if (f[2] == "allocate failure") continue;
    Ev e;
    e.alloc = f[2] == "allocate";
    e.ptr = f[3] == "(nil)" ? 0 : std::stoull(f[3], nullptr, 16);
    e.size = std::stoull(f[4]);
    e.stream = std::stoull(f[5], nullptr, 16);
    ev.push_back(e);
  }
  return ev;
}

template <class MR>
static double replay(MR& mr, const std::vector<Ev>& ev, std::unordered_map<uint64_t, cudaStream_t>& st,
                     size_t& calls, size_t& peak) {
  std::unordered_map<uint64_t, std::pair<void*, size_t>> live;
  live.reserve(ev.size());
  double ns = 0;
  size_t bytes = 0;
  calls = 0;
  peak = 0;
  for (auto& e : ev) {
    cuda::stream_ref s{st[e.stream]};
    if (e.alloc) {
      auto t0 = std::chrono::steady_clock::now();
      void* p = mr.allocate(s, e.size, 256);
      auto t1 = std::chrono::steady_clock::now();
      ns += std::chrono::duration<double, std::nano>(t1 - t0).count();
      ++calls;
      if (e.size > 0) { live[e.ptr] = {p, e.size}; bytes += e.size; if (bytes > peak) peak = bytes; }
    } else {
      auto it = live.find(e.ptr);
      if (it == live.end()) continue;
      auto t0 = std::chrono::steady_clock::now();
      mr.deallocate(s, it->second.first, it->second.second, 256);
      auto t1 = std::chrono::steady_clock::now();
      ns += std::chrono::duration<double, std::nano>(t1 - t0).count();
      ++calls;
      bytes -= it->second.second;
      live.erase(it);
    }
  }
  for (auto& [k, v] : live) mr.deallocate(cuda::stream_ref{st[0]}, v.first, v.second, 256);
  for (auto& [h, s] : st) cudaStreamSynchronize(s);
  return ns;
}

template <class MR>
static void bench(const char* name, MR& mr, const std::vector<Ev>& ev,
                  std::unordered_map<uint64_t, cudaStream_t>& st) {
  size_t calls = 0, peak = 0;
  replay(mr, ev, st, calls, peak);  // warm-up (growth)
  double best = 1e300;
  for (int r = 0; r < 20; ++r) {
    double ns = replay(mr, ev, st, calls, peak) / (calls ? calls : 1);
    if (ns < best) best = ns;
  }
  printf("%-10s calls=%zu  %.1f ns/call  peak %zu bytes\n", name, calls, best, peak);
  fflush(stdout);
}

int main(int argc, char** argv) {
  if (argc < 2) { fprintf(stderr, "usage: rmm_replay LOG.csv\n"); return 2; }
  auto ev = read_log(argv[1]);
  std::unordered_map<uint64_t, cudaStream_t> st;
  st[0] = cudaStreamLegacy;
  st[2] = cudaStreamPerThread;
  for (auto& e : ev)
    if (!st.count(e.stream)) { cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); st[e.stream] = s; }
  printf("%zu events, %zu streams\n", ev.size(), st.size());
  rmm::mr::cuda_memory_resource cuda_mr;
  rmm::mr::cuda_async_memory_resource async_mr;
  rmm::mr::pool_memory_resource pool_mr{cuda_mr, size_t(8) << 30, size_t(16) << 30};
  rmm::mr::arena_memory_resource arena_mr{cuda_mr, size_t(16) << 30};
  rmm::mr::binning_memory_resource bin_mr{pool_mr, 18, 22};
  bench("cuda", cuda_mr, ev, st);
  bench("cuda_async", async_mr, ev, st);
  bench("pool", pool_mr, ev, st);
  bench("arena", arena_mr, ev, st);
  bench("binning", bin_mr, ev, st);
  return 0;
}
