//! Lets our containers go straight into cudarc kernel launches and library calls (cuBLAS, ...).
//!
//! `DevicePtr`/`DevicePtrMut` order the caller's stream after the buffer's own stream when they
//! differ (an event wait, no host sync). A kernel argument is just the address: launch on the
//! buffer's stream, or order the streams yourself.
//!
//! A buffer of a simulated device has no CUDA stream; cudarc can only be used on real devices,
//! so these impls are reached only with real buffers (the simulated case panics with a message).

use super::{DeviceBuffer, DeviceVec};
use bytemuck::Pod;
use cudarc::driver::{
    sys, CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, LaunchArgs, PushKernelArg, SyncOnDrop,
};
use rmm_cuda::Stream;
use std::sync::Arc;

fn cuda_stream_of(stream: &Stream) -> &Arc<CudaStream> {
    stream
        .cuda()
        .expect("a buffer of a simulated device cannot be used with cudarc (it has no CUDA stream)")
}

/// Makes `user` wait for the work queued on `own` (when they are different streams).
fn order_after(user: &CudaStream, own: &Arc<CudaStream>) {
    if user.cu_stream() == own.cu_stream() {
        return;
    }
    let ctx = user.context();
    match ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)) {
        Ok(event) => {
            ctx.record_err(event.record(own));
            ctx.record_err(user.wait(&event));
        }
        Err(e) => ctx.record_err::<()>(Err(e)),
    }
}

impl<T: Pod> DeviceSlice<T> for DeviceVec<T> {
    fn len(&self) -> usize {
        DeviceVec::len(self)
    }
    fn stream(&self) -> &Arc<CudaStream> {
        cuda_stream_of(DeviceVec::stream(self))
    }
}

impl<T: Pod> DevicePtr<T> for DeviceVec<T> {
    fn device_ptr<'a>(&'a self, stream: &'a CudaStream) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        order_after(stream, DeviceSlice::stream(self));
        (self.ptr(), SyncOnDrop::Sync(None))
    }
}

impl<T: Pod> DevicePtrMut<T> for DeviceVec<T> {
    fn device_ptr_mut<'a>(
        &'a mut self,
        stream: &'a CudaStream,
    ) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        order_after(stream, DeviceSlice::stream(self));
        (self.ptr(), SyncOnDrop::Sync(None))
    }
}

impl DeviceSlice<u8> for DeviceBuffer {
    fn len(&self) -> usize {
        self.size()
    }
    fn stream(&self) -> &Arc<CudaStream> {
        cuda_stream_of(DeviceBuffer::stream(self))
    }
}

impl DevicePtr<u8> for DeviceBuffer {
    fn device_ptr<'a>(&'a self, stream: &'a CudaStream) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        order_after(stream, DeviceSlice::stream(self));
        (self.ptr(), SyncOnDrop::Sync(None))
    }
}

impl DevicePtrMut<u8> for DeviceBuffer {
    fn device_ptr_mut<'a>(
        &'a mut self,
        stream: &'a CudaStream,
    ) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        order_after(stream, DeviceSlice::stream(self));
        (self.ptr(), SyncOnDrop::Sync(None))
    }
}

// SAFETY: the argument is a pointer to the buffer's device address, a u64 that lives as long as
// the borrow of the buffer, which outlives the launch builder.
unsafe impl<'a, 'b: 'a, T: Pod> PushKernelArg<&'b DeviceVec<T>> for LaunchArgs<'a> {
    #[inline(always)]
    fn arg(&mut self, arg: &'b DeviceVec<T>) -> &mut Self {
        self.arg(arg.buffer().ptr_ref())
    }
}

// SAFETY: as above.
unsafe impl<'a, 'b: 'a, T: Pod> PushKernelArg<&'b mut DeviceVec<T>> for LaunchArgs<'a> {
    #[inline(always)]
    fn arg(&mut self, arg: &'b mut DeviceVec<T>) -> &mut Self {
        let arg: &'b DeviceVec<T> = arg;
        self.arg(arg.buffer().ptr_ref())
    }
}

// SAFETY: as above.
unsafe impl<'a, 'b: 'a> PushKernelArg<&'b DeviceBuffer> for LaunchArgs<'a> {
    #[inline(always)]
    fn arg(&mut self, arg: &'b DeviceBuffer) -> &mut Self {
        self.arg(arg.ptr_ref())
    }
}
