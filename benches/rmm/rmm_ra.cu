// Reference harness: RMM (C++, librmm wheel) on the random-allocations workload.
// Workload (the same spec is handed to the project): a pre-generated trace of N events.
// Each step: if live bytes + next size would exceed MAX_USAGE or (live non-empty and coin<0.5) -> free a
// uniformly chosen live allocation; else allocate a size uniform in [1, max_size]. At the end all live
// allocations are freed. Only the allocate/deallocate calls are timed; time is reported per call.
// `rmm_ra N cross`: each thread allocates on one stream and frees on a second one (the
// cross-stream case of benches/benches/random_allocations.rs --cross-stream, same traces).
#include <rmm/mr/cuda_memory_resource.hpp>
#include <rmm/mr/cuda_async_memory_resource.hpp>
#include <rmm/mr/pool_memory_resource.hpp>
#include <rmm/mr/arena_memory_resource.hpp>
#include <rmm/mr/binning_memory_resource.hpp>
#include <rmm/mr/fixed_size_memory_resource.hpp>
#include <rmm/resource_ref.hpp>
#include <cuda_runtime_api.h>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <vector>
#include <thread>
#include <cuda.h>
#include <string>
#include <functional>

struct Ev { int alloc; uint32_t slot; size_t size; };

static uint64_t sm(uint64_t& s){ uint64_t z=(s+=0x9e3779b97f4a7c15ULL); z=(z^(z>>30))*0xbf58476d1ce4e5b9ULL; z=(z^(z>>27))*0x94d049bb133111ebULL; return z^(z>>31);}

std::vector<Ev> gen(size_t n, size_t max_size, size_t max_usage, uint64_t seed){
  std::vector<Ev> ev; ev.reserve(n+n/2);
  std::vector<uint32_t> live; std::vector<size_t> sz; size_t used=0; uint32_t next=0;
  std::vector<size_t> slot_size;
  for(size_t i=0;i<n;i++){
    size_t s = 1 + sm(seed)%max_size;
    bool do_free = !live.empty() && ((sm(seed)&1) || used + s > max_usage);
    if(do_free){ size_t k = sm(seed)%live.size(); uint32_t slot=live[k]; live[k]=live.back(); live.pop_back();
      used -= slot_size[slot]; ev.push_back({0,slot,slot_size[slot]}); }
    else { uint32_t slot=next++; slot_size.push_back(s); live.push_back(slot); used+=s; ev.push_back({1,slot,s}); }
  }
  for(auto slot: live) ev.push_back({0,slot,slot_size[slot]});
  return ev;
}

// RMM's own grid (benchmarks/random_allocations): 2n steps of a size of 1..max_size bytes; with
// blocks live, an allocation with probability 73% while fewer than n were made and under
// max_usage live, else the free of a random live block; the rest freed at the end. SplitMix64
// (seed 42), as in our bench's grid_trace.
std::vector<Ev> gen_grid(size_t n, size_t max_size, size_t max_usage){
  uint64_t seed=42; std::vector<Ev> ev; ev.reserve(2*n);
  std::vector<uint32_t> live; std::vector<size_t> slot_size; size_t used=0, made=0;
  for(size_t i=0;i<2*n;i++){
    size_t s = 1 + sm(seed)%max_size;
    bool alloc = live.empty() || ((sm(seed)%100) < 73 && made < n && used + s < max_usage);
    if(alloc){ uint32_t slot=made++; slot_size.push_back(s); live.push_back(slot); used+=s; ev.push_back({1,slot,s}); }
    else { size_t k = sm(seed)%live.size(); uint32_t slot=live[k]; live[k]=live.back(); live.pop_back();
      used -= slot_size[slot]; ev.push_back({0,slot,slot_size[slot]}); }
  }
  for(auto slot: live) ev.push_back({0,slot,slot_size[slot]});
  return ev;
}

template<class MR>
double run(MR& mr, const std::vector<Ev>& ev, cudaStream_t st, cudaStream_t free_st){
  size_t nslots=0; for(auto&e:ev) if(e.alloc) nslots++;
  std::vector<void*> p(nslots);
  cuda::stream_ref s{st}, f{free_st};
  auto t0=std::chrono::steady_clock::now();
  for(auto&e:ev){ if(e.alloc) p[e.slot]=mr.allocate(s,e.size,256); else mr.deallocate(f,p[e.slot],e.size,256); }
  auto t1=std::chrono::steady_clock::now();
  cudaStreamSynchronize(st); cudaStreamSynchronize(free_st);
  return std::chrono::duration<double,std::nano>(t1-t0).count()/ev.size();
}

template<class MR>
void bench(const char* name, MR& mr, size_t max_size, int threads, size_t n, bool cross){
  size_t max_usage = size_t(4)<<30;
  std::vector<std::vector<Ev>> evs; for(int t=0;t<threads;t++) evs.push_back(gen(n,max_size,max_usage/threads,42+t));
  std::vector<cudaStream_t> sts(threads), fsts(threads);
  for(auto&s:sts) cudaStreamCreateWithFlags(&s,cudaStreamNonBlocking);
  for(int t=0;t<threads;t++){ if(cross) cudaStreamCreateWithFlags(&fsts[t],cudaStreamNonBlocking); else fsts[t]=sts[t]; }
  run(mr,evs[0],sts[0],fsts[0]); // warm-up (pool growth)
  double best=1e30, tot_ops=0;
  for(int rep=0;rep<3;rep++){
    std::vector<double> per(threads);
    auto t0=std::chrono::steady_clock::now();
    // One thread runs on the calling thread (as the grid does, and our harness): a thread
    // spawned per repetition starts on any core of a many-core host, its caches cold.
    if(threads==1) per[0]=run(mr,evs[0],sts[0],fsts[0]);
    else { std::vector<std::thread> th; for(int t=0;t<threads;t++) th.emplace_back([&,t]{ per[t]=run(mr,evs[t],sts[t],fsts[t]); });
           for(auto&x:th) x.join(); }
    auto t1=std::chrono::steady_clock::now();
    tot_ops=0; for(auto&e:evs) tot_ops+=e.size();
    double ns = std::chrono::duration<double,std::nano>(t1-t0).count()/tot_ops; // wall ns per op (all threads)
    if(ns<best) best=ns;
  }
  printf("%-10s max_size=%-8zu threads=%d%s ops=%.0f  %.1f ns/op (wall, all threads)  %.2f Mops/s\n", name, max_size, threads, cross ? " cross" : "", tot_ops, best, 1e3/best);
  fflush(stdout);
  for(int t=0;t<threads;t++){ cudaStreamDestroy(sts[t]); if(cross) cudaStreamDestroy(fsts[t]); }
}

// The driver's stream-ordered pool called with nothing in between, through the runtime
// (cudaMallocFromPoolAsync, what RMM's cuda_async calls) and through the driver
// (cuMemAllocFromPoolAsync, what our AsyncResource calls): where a wrapper's cost would show.
struct RawRuntimePool {
  cudaMemPool_t pool{};
  RawRuntimePool(){
    cudaMemPoolProps props{}; props.allocType=cudaMemAllocationTypePinned; props.handleTypes=cudaMemHandleTypeNone;
    props.location.type=cudaMemLocationTypeDevice; props.location.id=0;
    cudaMemPoolCreate(&pool,&props); uint64_t t=UINT64_MAX; cudaMemPoolSetAttribute(pool,cudaMemPoolAttrReleaseThreshold,&t);
  }
  void* allocate(cuda::stream_ref s, size_t n, size_t){ void* p; cudaMallocFromPoolAsync(&p,n,pool,s.get()); return p; }
  void deallocate(cuda::stream_ref s, void* p, size_t, size_t){ cudaFreeAsync(p,s.get()); }
};
struct RawDriverPool {
  CUmemoryPool pool{};
  RawDriverPool(){
    CUmemPoolProps props{}; props.allocType=CU_MEM_ALLOCATION_TYPE_PINNED; props.handleTypes=CU_MEM_HANDLE_TYPE_NONE;
    props.location.type=CU_MEM_LOCATION_TYPE_DEVICE; props.location.id=0;
    cuMemPoolCreate(&pool,&props); cuuint64_t t=UINT64_MAX; cuMemPoolSetAttribute(pool,CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,&t);
  }
  void* allocate(cuda::stream_ref s, size_t n, size_t){ CUdeviceptr p; cuMemAllocFromPoolAsync(&p,n,pool,(CUstream)s.get()); return (void*)p; }
  void deallocate(cuda::stream_ref s, void* p, size_t, size_t){ cuMemFreeAsync((CUdeviceptr)p,(CUstream)s.get()); }
};

int main(int argc, char** argv){
  size_t n = argc>1 ? std::stoul(argv[1]) : 100000;
  bool cross = argc>2 && std::string(argv[2])=="cross";
  bool async_only = argc>3 && std::string(argv[3])=="async";
  size_t free_b,total_b; cudaMemGetInfo(&free_b,&total_b);
  printf("free %zu total %zu\n", free_b,total_b);
  if(argc>3 && std::string(argv[3])=="grid"){
    // RMM's own grid, one thread, its resources as its benchmark builds them; a cell whose
    // allocation fails prints FAILED (what is live is freed).
    rmm::mr::cuda_memory_resource grid_up;
    size_t half = (free_b/2) & ~((size_t(1)<<20)-1);
    auto grid = [&](const char* name, auto& mr){
      cudaStream_t st; cudaStreamCreateWithFlags(&st,cudaStreamNonBlocking);
      for(size_t n: {size_t(1000), size_t(10000), size_t(100000)}) for(size_t mib: {1,4,64,256,1024,4096}){
        auto ev = gen_grid(n, mib<<20, size_t(16000)<<20);
        double best=1e30; bool failed=false;
        for(int rep=0; rep<4 && !failed; rep++){
          size_t nslots=0; for(auto&e:ev) if(e.alloc) nslots++;
          std::vector<void*> p(nslots,nullptr); std::vector<size_t> live_size(nslots,0);
          cuda::stream_ref s{st};
          auto t0=std::chrono::steady_clock::now();
          try{
            for(auto&e:ev){ if(e.alloc){ p[e.slot]=mr.allocate(s,e.size,256); live_size[e.slot]=e.size; }
                            else { mr.deallocate(s,p[e.slot],e.size,256); live_size[e.slot]=0; } }
          } catch(std::exception const& x){
            failed=true; printf("grid %-10s n=%zu max_mib=%zu FAILED: %s\n", name, n, mib, x.what());
            for(size_t k=0;k<nslots;k++) if(live_size[k]) mr.deallocate(s,p[k],live_size[k],256);
          }
          auto t1=std::chrono::steady_clock::now();
          cudaStreamSynchronize(st);
          double ns=std::chrono::duration<double,std::nano>(t1-t0).count()/ev.size();
          if(rep>0 && ns<best) best=ns;  // rep 0 warms up
        }
        if(!failed) printf("grid %-10s n=%zu max_mib=%zu events=%zu %.1f ns/op\n", name, n, mib, ev.size(), best);
        fflush(stdout);
      }
      cudaStreamDestroy(st);
    };
    bool with_async = !(argc>4 && std::string(argv[4])=="noasync");
    if(with_async){ rmm::mr::cuda_async_memory_resource mr; grid("cuda_async", mr); }
    { rmm::mr::pool_memory_resource mr{grid_up, half}; grid("pool", mr); }
    { rmm::mr::arena_memory_resource mr{grid_up, free_b - (size_t(64)<<20)}; grid("arena", mr); }
    { rmm::mr::pool_memory_resource pool{grid_up, half}; rmm::mr::binning_memory_resource mr{pool, 18, 22}; grid("binning", mr); }
    return 0;
  }
  rmm::mr::cuda_memory_resource cuda_mr;
  rmm::mr::cuda_async_memory_resource async_mr;
  rmm::mr::pool_memory_resource pool_mr{cuda_mr, size_t(8)<<30, size_t(16)<<30};
  rmm::mr::arena_memory_resource arena_mr{cuda_mr, size_t(16)<<30};
  rmm::mr::binning_memory_resource bin_mr{pool_mr, 18, 22};
  rmm::mr::fixed_size_memory_resource fixed_mr{cuda_mr, size_t(1)<<20, 1024};
  if(async_only){
    RawRuntimePool runtime_pool; RawDriverPool driver_pool;
    for(size_t ms: {size_t(1)<<10, size_t(64)<<10, size_t(1)<<20, size_t(4)<<20}){
      for(int th: {1,4}){
        bench("cuda_async", async_mr, ms, th, n, cross);
        bench("raw_runtime_pool", runtime_pool, ms, th, n, cross);
        bench("raw_driver_pool", driver_pool, ms, th, n, cross);
      }
    }
    return 0;
  }
  // `rmm_ra N one|cross subs`: the sub-allocators alone, one thread.
  bool subs_only = argc>3 && std::string(argv[3])=="subs";
  for(size_t ms: {size_t(1)<<10, size_t(64)<<10, size_t(1)<<20, size_t(4)<<20}){
    for(int th: {1,4}){
      if(subs_only && th!=1) continue;
      if(th==1 && ms>=(size_t(1)<<20) && !subs_only) bench("cuda", cuda_mr, ms, th, n/10, cross);
      if(!subs_only) bench("cuda_async", async_mr, ms, th, n, cross);
      bench("pool", pool_mr, ms, th, n, cross);
      bench("arena", arena_mr, ms, th, n, cross);
      bench("binning", bin_mr, ms, th, n, cross);
      if(ms<=(size_t(1)<<20)) bench("fixed1M", fixed_mr, ms, th, n, cross);
    }
  }
  return 0;
}
