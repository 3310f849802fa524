//! Errors of the memory resources. Out-of-memory is its own type that says what was asked and
//! what the resource holds, so a user can tell "the pool is fragmented" from "the GPU is full".

use rmm_cuda::CudaError;
use std::fmt;

/// An allocation that could not be satisfied.
///
/// ```
/// use rmm_core::{CudaResource, Device, LimitingAdaptor, MemoryError, MemoryResource};
/// let device = Device::simulated(1 << 30);
/// let limited = LimitingAdaptor::new(CudaResource::new(&device), 1 << 20);
/// let stream = device.new_stream()?;
/// match limited.allocate(2 << 20, &stream) {
///     Err(MemoryError::OutOfMemory(oom)) => {
///         assert_eq!(oom.requested, 2 << 20);
///         println!("{oom}"); // says what was asked and what the resource holds
///     }
///     other => panic!("expected out of memory, got {other:?}"),
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutOfMemory {
    /// Which resource refused (e.g. `pool`, `arena`, `cuda`).
    pub resource: String,
    /// Bytes asked for.
    pub requested: usize,
    /// Bytes the resource holds from its upstream (pool or arena size), where that means something.
    pub held: Option<usize>,
    /// Bytes free inside the resource (or on the device, for resources that hold nothing).
    pub free: Option<usize>,
    /// Largest block that could be handed out now.
    pub largest_free_block: Option<usize>,
    /// The resource's limit (maximum pool size, byte limit, capacity).
    pub maximum: Option<usize>,
    /// Anything else worth saying (the upstream's own error, a block size).
    pub detail: Option<String>,
}

impl OutOfMemory {
    /// An out-of-memory report with only the request filled in.
    pub fn new(resource: impl Into<String>, requested: usize) -> Self {
        OutOfMemory {
            resource: resource.into(),
            requested,
            held: None,
            free: None,
            largest_free_block: None,
            maximum: None,
            detail: None,
        }
    }
    pub fn held(mut self, bytes: usize) -> Self {
        self.held = Some(bytes);
        self
    }
    pub fn free(mut self, bytes: usize) -> Self {
        self.free = Some(bytes);
        self
    }
    pub fn largest_free_block(mut self, bytes: usize) -> Self {
        self.largest_free_block = Some(bytes);
        self
    }
    pub fn maximum(mut self, bytes: usize) -> Self {
        self.maximum = Some(bytes);
        self
    }
    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }
}

/// Formats a byte count for people: `1.50 GiB`, `256 B`.
///
/// ```
/// assert_eq!(rmm_core::human_bytes(3 << 30), "3.00 GiB");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn human_bytes(bytes: usize) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
}

impl fmt::Display for OutOfMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "out of memory in {}: {} requested",
            self.resource,
            human_bytes(self.requested)
        )?;
        let parts = [
            ("holds", self.held),
            ("free", self.free),
            ("largest free block", self.largest_free_block),
            ("maximum", self.maximum),
        ];
        for (label, value) in parts {
            if let Some(v) = value {
                write!(f, "; {label} {}", human_bytes(v))?;
            }
        }
        if let Some(d) = &self.detail {
            write!(f, "; {d}")?;
        }
        Ok(())
    }
}

/// A failure of a memory resource.
///
/// ```
/// use rmm_core::{CudaResource, Device, MemoryError, MemoryResource};
/// let device = Device::simulated(1 << 20);
/// let cuda = CudaResource::new(&device);
/// let stream = device.new_stream()?;
/// let e = cuda.allocate(2 << 20, &stream).unwrap_err();
/// assert!(matches!(e, MemoryError::OutOfMemory(_)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MemoryError {
    #[error("{0}")]
    OutOfMemory(OutOfMemory),
    #[error(transparent)]
    Cuda(#[from] CudaError),
    /// A request that can never succeed as asked (bad alignment, wrong device, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A pointer handed back that the resource does not know (double free, wrong resource).
    #[error("invalid deallocation: {0}")]
    InvalidDeallocation(String),
    /// A feature that is not available in this configuration.
    #[error("not available: {0}")]
    NotAvailable(String),
}

impl MemoryError {
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, MemoryError::OutOfMemory(_))
    }
}

impl From<OutOfMemory> for MemoryError {
    fn from(oom: OutOfMemory) -> Self {
        MemoryError::OutOfMemory(oom)
    }
}

/// Result of the memory resources.
///
/// ```
/// fn two_buffers(stream: &rmm_core::Stream) -> rmm_core::Result<(rmm_core::DeviceBuffer, rmm_core::DeviceBuffer)> {
///     Ok((rmm_core::DeviceBuffer::new(8, stream)?, rmm_core::DeviceBuffer::new(8, stream)?))
/// }
/// let device = rmm_core::Device::simulated(1 << 20);
/// two_buffers(&device.new_stream()?)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type Result<T> = std::result::Result<T, MemoryError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_memory_says_what_was_asked_and_held() {
        let e = OutOfMemory::new("pool", 3 << 30)
            .held(8 << 30)
            .free(1 << 30)
            .largest_free_block(512 << 20)
            .maximum(16 << 30);
        assert_eq!(
            e.to_string(),
            "out of memory in pool: 3.00 GiB requested; holds 8.00 GiB; free 1.00 GiB; largest free block 512.00 MiB; maximum 16.00 GiB"
        );
        assert_eq!(human_bytes(100), "100 B");
    }
}
