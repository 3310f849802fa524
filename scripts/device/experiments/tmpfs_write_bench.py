"""How fast can a large output be written into a fresh tmpfs file? (issue 12: the h5ad write is
the critical path). Copies SIZE GiB from a touched host buffer into a new file under DIR through
a shared map, several ways; prints GB/s for each. Usage: python3 tmpfs_write_bench.py DIR SIZE_GIB
[all] (all: also thread counts, contiguous slices, huge pages, MADV_POPULATE_WRITE)."""
import mmap, os, sys, time, threading
import numpy as np

d, gib = sys.argv[1], float(sys.argv[2])
n = int(gib * (1 << 30)) // (4 << 20) * (4 << 20)
src = np.empty(n, dtype=np.uint8)
src[::4096] = 1  # touch every page
src[:] = 7
PIECE = 4 << 20
print("kernel", os.uname().release, "cores", os.cpu_count())
for f in ["/sys/kernel/mm/transparent_hugepage/shmem_enabled", "/sys/kernel/mm/transparent_hugepage/enabled"]:
    try:
        print(f, open(f).read().strip())
    except OSError as e:
        print(f, e)
print([l.strip() for l in open("/proc/mounts") if " " + d + " " in l or d.startswith(l.split()[1] + "/")])

def run(name, threads=16, contiguous=False, hugepage=False, fallocate=False, populate=False,
        pipelined=False, map_populate=False):
    path = os.path.join(d, "wbench.bin")
    if os.path.exists(path):
        os.remove(path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    t0 = time.perf_counter()
    if fallocate:
        os.posix_fallocate(fd, 0, n)
    else:
        os.ftruncate(fd, n)
    t1 = time.perf_counter()
    flags = mmap.MAP_SHARED | (getattr(mmap, "MAP_POPULATE", 0x8000) if map_populate else 0)
    m = mmap.mmap(fd, n, flags, mmap.PROT_READ | mmap.PROT_WRITE)
    t_map = time.perf_counter() - t1
    # pipelined: one thread reserves 64 MiB steps while the copy follows behind it
    reserved = [0 if pipelined else n]
    def reserve():
        step = 64 << 20
        for a in range(0, n, step):
            os.posix_fallocate(fd, a, min(step, n - a))
            reserved[0] = a + min(step, n - a)
    if hugepage:
        m.madvise(mmap.MADV_HUGEPAGE)
    dst = np.frombuffer(m, dtype=np.uint8)
    pieces = n // PIECE
    def work(t):
        if contiguous:
            per = pieces // threads
            idx = range(t * per, pieces if t == threads - 1 else (t + 1) * per)
        else:
            idx = range(t, pieces, threads)
        for i in idx:
            a, b = i * PIECE, (i + 1) * PIECE
            while reserved[0] < b:
                time.sleep(5e-5)
            if populate:
                m.madvise(23, a, PIECE)  # MADV_POPULATE_WRITE
            np.copyto(dst[a:b], src[a:b])
    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    if pipelined:
        ts.append(threading.Thread(target=reserve))
    for t in ts: t.start()
    for t in ts: t.join()
    t2 = time.perf_counter()
    del dst
    m.close()
    os.close(fd)
    os.remove(path)
    print(f"{name:46s} prepare {t1-t0:6.2f} s  map {t_map:5.2f} s  copy {t2-t1:6.2f} s  total {n/(t2-t0)/1e9:6.2f} GB/s")
    sys.stdout.flush()

for rep in range(2):
    run(f"{rep} 16 threads, 4 MiB pieces interleaved")
    run(f"{rep} fallocate in 64 MiB steps, copy behind", pipelined=True)
    run(f"{rep} posix_fallocate, then 16 threads", fallocate=True)
    run(f"{rep} posix_fallocate, MAP_POPULATE, 16 threads", fallocate=True, map_populate=True)
    if len(sys.argv) > 3:
        run(f"{rep} 16 threads, contiguous slices", contiguous=True)
        run(f"{rep} 16 threads + MADV_HUGEPAGE", hugepage=True)
        run(f"{rep} 16 threads, MADV_POPULATE_WRITE", populate=True)
        run(f"{rep} 8 threads", threads=8)
        run(f"{rep} 32 threads", threads=32)
        run(f"{rep} 4 threads", threads=4)
