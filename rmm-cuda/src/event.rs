//! Events: markers in a stream, used to order work across streams without host waits.

use crate::device::{Backend, Device};
use crate::error::{Checked, CudaError, Result};
use crate::sim::SimOp;
use crate::stream::Stream;
use cudarc::driver::{sys, CudaEvent};
use std::fmt;

enum Inner {
    Cuda(CudaEvent),
    Sim(u64),
}

/// An event of a device (timing disabled: it only orders).
///
/// ```
/// use rmm_cuda::Device;
/// let device = Device::simulated(1 << 20);
/// let (producer, consumer) = (device.new_stream()?, device.new_stream()?);
/// let ready = device.new_event()?;
/// producer.record(&ready)?;
/// consumer.wait(&ready)?; // the consumer's later work runs after the producer's so far
/// ready.synchronize()?;
/// assert!(ready.is_complete()?);
/// # Ok::<(), rmm_cuda::CudaError>(())
/// ```
pub struct Event {
    device: Device,
    inner: Inner,
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Event(on {})", self.device.id())
    }
}

impl Event {
    pub(crate) fn new_on(device: &Device) -> Result<Event> {
        let inner = match &*device.inner {
            Backend::Cuda(ctx) => Inner::Cuda(
                ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))
                    .checked("cuEventCreate")?,
            ),
            Backend::Sim(sim) => Inner::Sim(sim.next_id()),
        };
        Ok(Event {
            device: device.clone(),
            inner,
        })
    }

    /// The simulated event's number (for tests reading [`Device::sim_ops`]).
    pub fn sim_id(&self) -> Option<u64> {
        match self.inner {
            Inner::Sim(id) => Some(id),
            Inner::Cuda(_) => None,
        }
    }

    fn same_device(&self, stream: &Stream, call: &'static str) -> Result<()> {
        if stream.device() == &self.device {
            Ok(())
        } else {
            Err(CudaError::invalid(
                call,
                "the event and the stream belong to different devices",
            ))
        }
    }

    pub(crate) fn record_on(&self, stream: &Stream) -> Result<()> {
        self.same_device(stream, "cuEventRecord")?;
        match &self.inner {
            Inner::Cuda(ev) => ev
                .record(stream.cuda().expect("real event on real stream"))
                .checked("cuEventRecord"),
            Inner::Sim(id) => {
                stream.sim_log(SimOp::Record {
                    event: *id,
                    stream: stream.id().0,
                });
                Ok(())
            }
        }
    }

    pub(crate) fn wait_on(&self, stream: &Stream) -> Result<()> {
        self.same_device(stream, "cuStreamWaitEvent")?;
        match &self.inner {
            Inner::Cuda(ev) => stream
                .cuda()
                .expect("real event on real stream")
                .wait(ev)
                .checked("cuStreamWaitEvent"),
            Inner::Sim(id) => {
                stream.sim_log(SimOp::Wait {
                    stream: stream.id().0,
                    event: *id,
                });
                Ok(())
            }
        }
    }

    /// Blocks the host until the work before the last record is done.
    pub fn synchronize(&self) -> Result<()> {
        match &self.inner {
            Inner::Cuda(ev) => {
                let done = ev.synchronize().checked("cuEventSynchronize");
                crate::clear_upper_vector_state();
                done
            }
            Inner::Sim(id) => {
                if let Some(sim) = self.device.sim() {
                    sim.host_wait(SimOp::EventSync { event: *id });
                }
                Ok(())
            }
        }
    }

    /// True when the work before the last record is done.
    pub fn is_complete(&self) -> Result<bool> {
        match &self.inner {
            Inner::Cuda(ev) => ev.try_is_complete().checked("cuEventQuery"),
            Inner::Sim(_) => Ok(true),
        }
    }
}
