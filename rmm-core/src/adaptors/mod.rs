//! Adaptors: resources that wrap an upstream resource to limit, count, track, log, retry, align or
//! prefetch what goes through it. Each owns its upstream (`U`, any [`crate::MemoryResource`]).

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
