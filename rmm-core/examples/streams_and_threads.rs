//! One pool shared by several threads, each with its own stream: buffers allocated on one
//! stream, handed to another thread and freed on its stream (the pool's per-stream free lists
//! and events keep that safe without a device synchronization), and the counts at the end.
//!
//! `cargo run --release -p rmm-core --example streams_and_threads` (on GPU 0, or on the
//! simulated device without a GPU).

use rmm_core::{
    CudaResource, Device, DeviceVec, PoolOptions, PoolResource, SharedResource, StatisticsAdaptor,
};
use std::sync::mpsc;
use std::sync::Arc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = if rmm_cuda::gpu_available() {
        Device::cuda(0)?
    } else {
        println!("no GPU on this machine: on the simulated device");
        Device::simulated(1 << 30)
    };
    let pool = PoolResource::new(
        CudaResource::new(&device),
        PoolOptions::sized(64 << 20, None),
    )?;
    let stats = Arc::new(StatisticsAdaptor::new(pool));
    let resource: SharedResource = stats.clone();

    let threads = 4;
    let rounds = 200;
    // Each thread hands its buffers to the next thread, which frees them on its own stream.
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..threads)
        .map(|_| mpsc::channel::<DeviceVec<u32>>())
        .unzip();
    std::thread::scope(|s| -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let handles: Vec<_> = receivers
            .into_iter()
            .enumerate()
            .map(|(t, inbox)| {
                let next = senders[(t + 1) % threads].clone();
                let (device, resource) = (device.clone(), resource.clone());
                s.spawn(move || -> Result<usize, String> {
                    let stream = device.new_stream().map_err(|e| e.to_string())?;
                    let mut freed = 0;
                    for round in 0..rounds {
                        let len = 1 + (round * 37 + t * 101) % 4096;
                        let v = DeviceVec::from_host_with_resource(
                            &vec![t as u32; len],
                            &stream,
                            resource.clone(),
                        )
                        .map_err(|e| e.to_string())?;
                        next.send(v).map_err(|e| e.to_string())?;
                        while let Ok(mut theirs) = inbox.try_recv() {
                            // Freed on this thread's stream, after the other stream's work.
                            theirs.set_stream(&stream).map_err(|e| e.to_string())?;
                            freed += 1;
                        }
                    }
                    // Done sending; the rest of the inbox until the previous thread is done.
                    drop(next);
                    for mut theirs in inbox {
                        theirs.set_stream(&stream).map_err(|e| e.to_string())?;
                        freed += 1;
                    }
                    Ok(freed)
                })
            })
            .collect();
        drop(senders);
        let mut freed = 0;
        for h in handles {
            freed += h.join().expect("a thread panicked")?;
        }
        println!("{threads} threads, {rounds} buffers each; {freed} freed on another thread's stream");
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    let s = stats.statistics();
    println!(
        "the pool served {} allocations, peak {} bytes, {} bytes still allocated",
        s.allocations.total, s.bytes.peak, s.bytes.value
    );
    Ok(())
}
