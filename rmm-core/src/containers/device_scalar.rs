//! `DeviceScalar<T>`: one value in device memory.

use super::DeviceVec;
use crate::error::Result;
use bytemuck::Pod;
use rmm_cuda::Stream;

/// A single value of `T` in device memory (RMM's `device_scalar`), e.g. a counter a kernel
/// updates.
///
/// ```
/// use rmm_core::{Device, DeviceScalar};
/// let device = Device::simulated(1 << 30);
/// let stream = device.new_stream()?;
/// let mut counter = DeviceScalar::new(0u64, &stream)?;
/// counter.set_value(41)?;
/// assert_eq!(counter.value()? + 1, 42);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct DeviceScalar<T: Pod> {
    vec: DeviceVec<T>,
}

impl<T: Pod> DeviceScalar<T> {
    /// A scalar holding `value`, from the current resource.
    pub fn new(value: T, stream: &Stream) -> Result<Self> {
        Ok(DeviceScalar {
            vec: DeviceVec::from_host(std::slice::from_ref(&value), stream)?,
        })
    }

    /// Reads the value (waits for the stream's work before it).
    pub fn value(&self) -> Result<T> {
        Ok(self.vec.to_host()?[0])
    }

    /// Writes the value.
    pub fn set_value(&mut self, value: T) -> Result<()> {
        self.vec.copy_from_host(std::slice::from_ref(&value))
    }

    pub fn ptr(&self) -> u64 {
        self.vec.ptr()
    }

    /// The one-element vector underneath (to pass to kernels).
    pub fn as_vec(&self) -> &DeviceVec<T> {
        &self.vec
    }

    pub fn as_vec_mut(&mut self) -> &mut DeviceVec<T> {
        &mut self.vec
    }
}
