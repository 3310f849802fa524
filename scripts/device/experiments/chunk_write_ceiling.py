"""The ceilings of a chunked zarr write from the GPU (issue 30's write gate): how fast can
THREADS threads write SIZE GiB as fresh files of CHUNK MiB into DIR (a chunk store's files), and
how fast do pinned device-to-host copies of CHUNK MiB run from one stream or from a stream per
thread (torch). Prints GB/s for each. Usage: python3 chunk_write_ceiling.py DIR SIZE_GIB."""
import os, sys, time, threading
import numpy as np

d, gib = sys.argv[1], float(sys.argv[2])
total = int(gib * (1 << 30))


def in_threads(threads, n, job):
    """Runs job(t, i) for i in 0..n, each i taken by the next free one of `threads` threads
    (t is the thread's number); returns the seconds it took."""
    nxt = [0]
    lock = threading.Lock()

    def work(t):
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= n:
                return
            job(t, i)

    t0 = time.perf_counter()
    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    return time.perf_counter() - t0


def files(threads, chunk_mib, sync=False):
    chunk = chunk_mib << 20
    n = total // chunk
    src = np.full(chunk, 7, dtype=np.uint8)
    root = os.path.join(d, "ceiling")
    os.makedirs(root, exist_ok=True)

    def job(_, i):
        fd = os.open(os.path.join(root, str(i)), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, src.data)
        if sync:
            os.fsync(fd)
        os.close(fd)

    dt = in_threads(threads, n, job)
    print(f"files: {threads:2d} threads, {chunk_mib} MiB files{' +fsync' if sync else ''}: "
          f"{n * chunk / dt / 1e9:.1f} GB/s ({dt:.2f} s)", flush=True)
    for i in range(n):
        os.remove(os.path.join(root, str(i)))


for threads in [1, 4, 8, 16]:
    files(threads, 8)
files(16, 8, sync=True)
files(16, 32)
files(32, 8)

try:
    import torch
except ImportError:
    print("no torch: copies skipped")
    sys.exit(0)
chunk = 8 << 20
n = min(total, 16 << 30) // chunk
dev = torch.empty(n * chunk // 4, dtype=torch.float32, device="cuda")
dev.fill_(1.0)
torch.cuda.synchronize()


def copies(threads, streams):
    bufs = [torch.empty(chunk // 4, dtype=torch.float32).pin_memory() for _ in range(threads)]
    ss = [torch.cuda.Stream() for _ in range(threads)] if streams else [torch.cuda.current_stream()] * threads
    per = chunk // 4

    def job(t, i):
        with torch.cuda.stream(ss[t]):
            bufs[t].copy_(dev[i * per:(i + 1) * per], non_blocking=True)
            ss[t].synchronize()

    dt = in_threads(threads, n, job)
    print(f"device to pinned host: {threads:2d} threads, {'a stream each' if streams else 'one stream'}, "
          f"8 MiB copies: {n * chunk / dt / 1e9:.1f} GB/s", flush=True)


for threads, streams in [(1, False), (4, False), (16, False), (4, True), (16, True)]:
    copies(threads, streams)
