//! Sub-allocators: resources that take memory from an upstream resource in large pieces and carve
//! the blocks they hand out from it, so that most allocations and frees never reach the upstream
//! (RMM's `pool_memory_resource`, `fixed_size_memory_resource`, `binning_memory_resource` and
//! `arena_memory_resource`). Each owns its upstream (`U`, any [`crate::MemoryResource`]).
//!
//! A freed block goes to the free list of the stream it is freed on (one list and one lock per
//! stream): that stream reuses it at once, another stream only once its work is ordered after the
//! free (by an event wait on the device; the arena's defragmentation waits on the host).
//!
//! - `pool/`: [`PoolResource`], coalescing best-fit blocks of chunks that grow on demand;
//! - `fixed_size.rs`: [`FixedSizeResource`], blocks of one size from a stack;
//! - `binning.rs`: [`BinningResource`], requests sent by size to bins (fixed-size by default);
//! - `arena/`: [`ArenaResource`], per-stream arenas taking portions of one global arena;
//! - `free_list/`: the free-block stores (the coalescing list of the pool and the arena, the
//!   fixed-size blocks' stack);
//! - `stream_ordered/`: the per-stream free lists over those stores, and the event waits by
//!   which one stream takes over the blocks another freed.

mod arena;
mod binning;
mod fixed_size;
mod free_list;
mod pool;
mod stream_ordered;

pub use arena::{ArenaOptions, ArenaResource};
pub use binning::{BinningResource, DEFAULT_BIN_BLOCKS};
pub use fixed_size::FixedSizeResource;
pub use pool::{PoolOptions, PoolResource};
