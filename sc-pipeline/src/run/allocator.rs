//! `--allocator pool|async|cuda|managed|binning|arena` with `--pool-initial` / `--pool-max`:
//! the GPU memory resource of a run, built with `rmm_core::reinitialize` where RMM's options
//! describe it (pool, cuda, managed) and from the resources directly otherwise.

use crate::{Error, Result};
use rmm_core::adaptors::FreeSpace;
use rmm_core::{
    reinitialize, set_per_device_resource, ArenaOptions, ArenaResource, AsyncResource,
    AsyncResourceOptions, BinningResource, CudaResource, Device, PoolOptions, PoolResource,
    ReinitializeOptions, SharedResource,
};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AllocatorChoice {
    /// Coalescing pool over cudaMalloc (RMM's pool_allocator=True).
    Pool,
    /// The driver's stream-ordered pool (cudaMallocAsync).
    Async,
    /// Plain cudaMalloc / cudaFree.
    Cuda,
    /// Managed (unified) memory: can exceed the GPU's memory, slower.
    Managed,
    /// Power-of-two bins (256 KiB to 4 MiB) over a pool; larger requests to the pool.
    Binning,
    /// RMM's arena: per-stream arenas carved from one global arena.
    Arena,
}

/// Parses `4GiB`, `512MiB`, `1.5G`, `1000000` (bytes).
pub fn parse_size(s: &str) -> std::result::Result<usize, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size (e.g. 4GiB, 512MiB, 1000000)"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024f64.powi(2),
        "g" | "gb" | "gib" => 1024f64.powi(3),
        "t" | "tb" | "tib" => 1024f64.powi(4),
        u => {
            return Err(format!(
                "unknown size unit '{u}' in '{s}' (B, KiB, MiB, GiB, TiB)"
            ))
        }
    };
    let bytes = value * mult;
    if !bytes.is_finite() || bytes < 0.0 || bytes > usize::MAX as f64 {
        return Err(format!("'{s}' is out of range"));
    }
    Ok(bytes as usize)
}

/// Reads the free space of a pool or arena: free bytes and the largest free block.
pub type FreeSpaceProbe = Arc<dyn Fn() -> FreeSpace + Send + Sync>;

/// A built allocator: the resource, and a probe of its free space where it keeps one (pool,
/// binning's pool, arena), for fragmentation figures.
pub struct Built {
    pub resource: SharedResource,
    pub probe: Option<FreeSpaceProbe>,
}

/// Builds the resource of `choice`, makes it the device's current resource and returns it.
pub fn build(
    choice: AllocatorChoice,
    device: &Device,
    pool_initial: Option<usize>,
    pool_max: Option<usize>,
) -> Result<Built> {
    let err = |e: rmm_core::MemoryError| Error::Device(format!("--allocator {choice:?}: {e}"));
    if let (Some(i), Some(m)) = (pool_initial, pool_max) {
        if i > m {
            return Err(Error::param(
                "--pool-initial",
                format!("{i} bytes is more than --pool-max ({m} bytes)"),
            ));
        }
    }
    let pool_probe = |p: &Arc<PoolResource<CudaResource>>| -> FreeSpaceProbe {
        let p = p.clone();
        Arc::new(move || FreeSpace {
            free_bytes: p.free_bytes(),
            largest_free_block: p.largest_free_block(),
        })
    };
    let (resource, probe): (SharedResource, Option<FreeSpaceProbe>) = match choice {
        AllocatorChoice::Cuda | AllocatorChoice::Managed => {
            let built = reinitialize(ReinitializeOptions {
                pool_allocator: false,
                managed_memory: choice == AllocatorChoice::Managed,
                devices: vec![device.clone()],
                ..Default::default()
            })
            .map_err(err)?;
            return Ok(Built {
                resource: built.into_iter().next().expect("one device asked"),
                probe: None,
            });
        }
        // The pool reinitialize(pool_allocator=True) builds, kept typed for its probe.
        AllocatorChoice::Pool => {
            let pool = Arc::new(pool_over_cuda(device, pool_initial, pool_max).map_err(err)?);
            let probe = pool_probe(&pool);
            (pool, Some(probe))
        }
        AllocatorChoice::Async => (
            Arc::new(
                AsyncResource::new(
                    device,
                    AsyncResourceOptions {
                        initial_pool_size: pool_initial,
                        release_threshold: None,
                        maximum_pool_size: pool_max,
                    },
                )
                .map_err(err)?,
            ),
            None,
        ),
        AllocatorChoice::Binning => {
            let pool = Arc::new(pool_over_cuda(device, pool_initial, pool_max).map_err(err)?);
            let probe = pool_probe(&pool);
            let upstream: SharedResource = pool;
            (
                Arc::new(BinningResource::with_range(upstream, 18, 22).map_err(err)?),
                Some(probe),
            )
        }
        AllocatorChoice::Arena => {
            let arena = Arc::new(
                ArenaResource::new(
                    CudaResource::new(device),
                    ArenaOptions {
                        arena_size: pool_max.or(pool_initial),
                        ..Default::default()
                    },
                )
                .map_err(err)?,
            );
            let a = arena.clone();
            let probe: FreeSpaceProbe = Arc::new(move || FreeSpace {
                free_bytes: a.free_bytes(),
                largest_free_block: a.largest_free_block(),
            });
            (arena, Some(probe))
        }
    };
    set_per_device_resource(device, resource.clone()).map_err(err)?;
    Ok(Built { resource, probe })
}

fn pool_over_cuda(
    device: &Device,
    initial: Option<usize>,
    maximum: Option<usize>,
) -> rmm_core::Result<PoolResource<CudaResource>> {
    let initial = match initial {
        Some(i) => i,
        None => device.memory_info()?.free / 2,
    };
    PoolResource::new(
        CudaResource::new(device),
        PoolOptions::sized(initial, maximum),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4GiB").unwrap(), 4 << 30);
        assert_eq!(parse_size("512 MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("1.5g").unwrap(), 3 << 29);
        assert_eq!(parse_size("1000").unwrap(), 1000);
        assert!(parse_size("lots").unwrap_err().contains("not a size"));
        assert!(parse_size("3 parsecs")
            .unwrap_err()
            .contains("unknown size unit"));
    }

    #[test]
    fn initial_above_maximum_is_refused_before_any_gpu_call() {
        let Err(e) = build(
            AllocatorChoice::Pool,
            &Device::simulated(1 << 20),
            Some(2 << 30),
            Some(1 << 30),
        ) else {
            panic!("an initial size above the maximum was accepted")
        };
        let e = e.to_string();
        assert!(
            e.contains("--pool-initial") && e.contains("--pool-max"),
            "{e}"
        );
    }
}
