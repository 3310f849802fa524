//! Host waits hold no free-list lock: while `PoolResource::release` (or the arena's
//! `defragment`) waits on the host for a stream that freed blocks, other threads allocate and free
//! on that stream and on others, and read the resource's statistics; none of them gets the blocks
//! being waited for before the wait is over.
//!
//! The simulated device's host-wait hook holds the wait for stream A until the test lets it go.

use rmm_core::{
    ArenaOptions, ArenaResource, CudaResource, Device, MemoryResource, PoolOptions, PoolResource,
    Stream,
};
use rmm_cuda::SimOp;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;
/// Far longer than any of the steps takes; reached only when a thread is stuck behind the wait.
const PATIENCE: Duration = Duration::from_secs(20);

fn free(r: &dyn MemoryResource, ptr: u64, bytes: usize, s: &Stream) {
    // SAFETY: tests free only blocks they allocated from `r` with these sizes.
    unsafe { r.deallocate(ptr, bytes, s) }.unwrap();
}

/// A hook that holds every host wait for `stream` until the returned sender sends (or drops);
/// `entered` hears of each such wait as it starts.
fn hold_waits_for(device: &Device, stream: &Stream) -> (mpsc::Sender<()>, mpsc::Receiver<()>) {
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (entered_tx, entered_rx) = mpsc::channel::<()>();
    let go_rx = Mutex::new(go_rx);
    let entered_tx = Mutex::new(entered_tx);
    let held = stream.id().0;
    device.set_sim_wait_hook(Some(Arc::new(move |op| {
        if op == (SimOp::StreamSync { stream: held }) {
            let _ = entered_tx.lock().unwrap().send(());
            let _ = go_rx.lock().unwrap().recv_timeout(PATIENCE);
        }
    })));
    (go_tx, entered_rx)
}

/// Frees `count` blocks of `size` on stream `a` of `r`, then runs `wait` (which waits on the
/// host for `a`) on a thread whose wait for `a` is held; meanwhile another thread allocates and
/// frees on `a` and on `b` and runs `observe`. That thread must finish while the wait is still
/// held, without getting any of the blocks waited for.
fn others_proceed_during_the_wait<R: MemoryResource + 'static>(
    r: Arc<R>,
    device: &Device,
    size: usize,
    count: usize,
    wait: impl FnOnce(&R) + Send + 'static,
    observe: impl Fn(&R) + Send + 'static,
) {
    let (a, b) = (device.new_stream().unwrap(), device.new_stream().unwrap());
    let freed: Vec<u64> = (0..count).map(|_| r.allocate(size, &a).unwrap()).collect();
    for &p in &freed {
        free(&*r, p, size, &a);
    }
    let (go, entered) = hold_waits_for(device, &a);
    let waiter = {
        let r = r.clone();
        std::thread::spawn(move || wait(&r))
    };
    entered
        .recv_timeout(PATIENCE)
        .expect("the wait for stream A started");

    let (done_tx, done_rx) = mpsc::channel();
    let worker = {
        let (r, a, b, freed) = (r.clone(), a.clone(), b.clone(), freed.clone());
        std::thread::spawn(move || {
            for _ in 0..4 {
                for s in [&a, &b] {
                    let p = r.allocate(size, s).unwrap();
                    assert!(
                        !freed.contains(&p),
                        "a block still waited for was handed out on {s:?}"
                    );
                    free(&*r, p, size, s);
                }
            }
            observe(&r);
            done_tx.send(()).unwrap();
        })
    };
    let proceeded = done_rx.recv_timeout(PATIENCE);
    let still_waiting = !waiter.is_finished();
    go.send(()).unwrap();
    worker.join().unwrap();
    waiter.join().unwrap();
    device.set_sim_wait_hook(None);
    assert!(
        proceeded.is_ok(),
        "allocations on stream A and B waited for the host wait on A"
    );
    assert!(
        still_waiting,
        "the wait was held while the other thread worked"
    );
}

#[test]
fn pool_release_waits_without_holding_the_stream_lock() {
    let device = Device::simulated(1 << 30);
    let pool = Arc::new(
        PoolResource::new(
            CudaResource::new(&device),
            PoolOptions::sized(64 * MIB, Some(64 * MIB)),
        )
        .unwrap(),
    );
    others_proceed_during_the_wait(
        pool.clone(),
        &device,
        64 * KIB,
        8,
        |pool| {
            pool.release().unwrap();
        },
        |pool| {
            // Reads every stream's list.
            assert!(pool.free_bytes() <= pool.pool_size());
        },
    );
    // The blocks waited for are back, usable by every stream; nothing was lost.
    assert_eq!(pool.free_bytes(), pool.pool_size());
    let whole = pool
        .allocate(pool.pool_size(), &device.new_stream().unwrap())
        .unwrap();
    free(&*pool, whole, pool.pool_size(), &device.default_stream());
}

#[test]
fn arena_defragment_waits_without_holding_the_stream_lock() {
    let device = Device::simulated(1 << 30);
    let arena = Arc::new(
        ArenaResource::new(
            CudaResource::new(&device),
            ArenaOptions {
                arena_size: Some(16 * MIB),
                superblock_size: MIB,
                dump_on_failure: None,
            },
        )
        .unwrap(),
    );
    others_proceed_during_the_wait(
        arena.clone(),
        &device,
        64 * KIB,
        8,
        |arena| arena.defragment().unwrap(),
        |arena| {
            assert!(arena.state_report().contains("arena"));
        },
    );
    arena.defragment().unwrap();
    assert_eq!(arena.free_bytes(), 16 * MIB);
    assert_eq!(arena.largest_free_block(), 16 * MIB);
}
