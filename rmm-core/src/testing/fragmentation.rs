//! How fragmented a pool is while it replays an allocation log.

use crate::adaptors::{replay_log_observed, LogRecord, ReplayReport};
use crate::error::Result;
use crate::resource::MemoryResource;
use crate::suballocators::PoolResource;

/// What a replay left of a pool's free memory at the log's peak.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fragmentation {
    /// `1 - largest free block / free bytes` at the moment the most bytes were live (0: the
    /// free memory is one block, or there is none).
    pub at_peak: f64,
    /// Free bytes and the largest free block at that moment.
    pub free_bytes: usize,
    pub largest_free_block: usize,
    /// What the pool held from its upstream then.
    pub pool_size: usize,
}

/// Replays `records` against `pool` and measures its fragmentation each time the live bytes
/// reach a new high (the last such moment is the peak).
pub fn fragmentation_at_peak<U: MemoryResource>(
    records: &[LogRecord],
    pool: &PoolResource<U>,
) -> Result<(Fragmentation, ReplayReport)> {
    let mut peak = 0;
    let mut seen = Fragmentation {
        at_peak: 0.0,
        free_bytes: 0,
        largest_free_block: 0,
        pool_size: 0,
    };
    let report = replay_log_observed(records, pool, |live| {
        if live >= peak {
            peak = live;
            let (free, largest) = (pool.free_bytes(), pool.largest_free_block());
            seen = Fragmentation {
                at_peak: if free == 0 {
                    0.0
                } else {
                    1.0 - largest as f64 / free as f64
                },
                free_bytes: free,
                largest_free_block: largest,
                pool_size: pool.pool_size(),
            };
        }
    })?;
    Ok((seen, report))
}
