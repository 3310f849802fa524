//! Adaptors: resources that wrap an upstream resource to limit, count, track, log, retry, align or
//! prefetch what goes through it. Each owns its upstream (`U`, any [`crate::MemoryResource`]).

/// Writes, inside an adaptor's `impl MemoryResource`, the methods that only pass the call through
/// to the adaptor's `upstream` field, so each adaptor writes out only what it adds:
///
/// - `deallocate`, `device`, `kind`: the upstream's, as they are;
/// - `identity`: the upstream's, for an adaptor that adds nothing to a free (its memory is the
///   upstream's, so [`crate::MemoryResource::is_equal`] answers as for the upstream);
/// - `name = "label"`: `label(<the upstream's name>)`.
///
/// ```text
/// impl<U: MemoryResource> MemoryResource for LimitingAdaptor<U> {
///     fn allocate(&self, bytes: usize, stream: &Stream) -> Result<u64> { ... }
///     unsafe fn deallocate(&self, ptr: u64, bytes: usize, stream: &Stream) -> Result<()> { ... }
///     pass_through!(device, kind, name = "limiting");
/// }
/// ```
macro_rules! pass_through {
    ($($method:ident $(= $label:literal)?),+ $(,)?) => {
        $(pass_through!(@ $method $($label)?);)+
    };
    (@deallocate) => {
        unsafe fn deallocate(
            &self,
            ptr: u64,
            bytes: usize,
            stream: &$crate::Stream,
        ) -> $crate::Result<()> {
            self.upstream.deallocate(ptr, bytes, stream)
        }
    };
    (@device) => {
        fn device(&self) -> &$crate::Device {
            self.upstream.device()
        }
    };
    (@kind) => {
        fn kind(&self) -> $crate::MemoryKind {
            self.upstream.kind()
        }
    };
    (@identity) => {
        /// The upstream's: this adaptor adds nothing to a free, so the upstream (or anything equal
        /// to it) frees what this allocated, and the other way round.
        fn identity(&self) -> $crate::ResourceIdentity {
            self.upstream.identity()
        }
    };
    (@name $label:literal) => {
        fn name(&self) -> String {
            format!(concat!($label, "({})"), self.upstream.name())
        }
    };
}

mod aligned;
mod failure_callback;
mod limiting;
mod logging;
mod prefetch;
mod statistics;
mod timeline;
mod tracking;

pub use aligned::AlignedAdaptor;
pub use failure_callback::FailureCallbackAdaptor;
pub use limiting::LimitingAdaptor;
pub use logging::{
    memory_viz_snapshot, parse_log, replay_file, replay_log, replay_log_observed,
    write_memory_viz_snapshot, LogAction, LogRecord, LoggingAdaptor, ReplayReport, LOG_HEADER,
};
pub use prefetch::PrefetchAdaptor;
pub use statistics::{Counter, Statistics, StatisticsAdaptor};
pub use timeline::{FreeSpace, Timeline, TimelineAdaptor, TimelinePoint};
pub use tracking::{AllocationRecord, TrackingAdaptor};
