//! `Fft2d`: batched 2-D real-to-complex and complex-to-real transforms (cuFFT, double
//! precision) whose work area comes from the context's resource, like every other device
//! allocation of a step (cuFFT's own allocation is switched off).

use super::GpuContext;
use crate::error::{KernelError, Result};
use rmm_core::DeviceVec;
use rmm_cuda::cudarc::cufft::{result, sys};
use std::ffi::c_int;

/// One plan's handle, destroyed on drop.
struct Plan(sys::cufftHandle);

impl Drop for Plan {
    fn drop(&mut self) {
        // SAFETY: made by `result::create` and destroyed only here.
        let _ = unsafe { result::destroy(self.0) };
    }
}

/// The forward (D2Z) and inverse (Z2D) transforms of `batch` real `rows x cols` arrays, stored
/// one after another (`rows * cols` doubles each), to and from their half spectra
/// (`rows * (cols / 2 + 1)` complex values each). The inverse is unnormalized, as cuFFT's.
pub struct Fft2d {
    forward: Plan,
    inverse: Plan,
    /// The plans' shared work area (the transforms run one at a time on the stream).
    _work: DeviceVec<u8>,
    pub rows: usize,
    pub cols: usize,
    pub batch: usize,
}

fn fft_error(what: &str) -> impl Fn(result::CufftError) -> KernelError + '_ {
    move |e| KernelError::Gpu(format!("cuFFT {what}: {e:?}"))
}

impl Fft2d {
    /// Plans for `batch` transforms of `rows x cols` on `ctx`'s stream.
    pub fn new(ctx: &GpuContext, rows: usize, cols: usize, batch: usize) -> Result<Fft2d> {
        let too_big = |v: usize| c_int::try_from(v).is_err();
        if rows == 0 || cols == 0 || batch == 0 || too_big(rows * cols * batch) {
            return Err(KernelError::Shape(format!(
                "a 2-D FFT of {batch} x {rows} x {cols}"
            )));
        }
        ctx.bind_to_thread()?;
        let half = cols / 2 + 1;
        let make = |kind: sys::cufftType, what: &str| -> Result<(Plan, usize)> {
            let plan = Plan(result::create().map_err(fft_error(what))?);
            let mut n = [rows as c_int, cols as c_int];
            let (idist, odist) = match kind {
                sys::cufftType::CUFFT_D2Z => (rows * cols, rows * half),
                _ => (rows * half, rows * cols),
            };
            // SAFETY: a fresh plan; `n` outlives the call; null embeddings mean packed arrays.
            let work = unsafe {
                result::set_auto_allocation(plan.0, false).map_err(fft_error(what))?;
                result::make_plan_many(
                    plan.0,
                    2,
                    n.as_mut_ptr(),
                    std::ptr::null_mut(),
                    1,
                    idist as c_int,
                    std::ptr::null_mut(),
                    1,
                    odist as c_int,
                    kind,
                    batch as c_int,
                )
                .map_err(fft_error(what))?
            };
            // SAFETY: the plan is valid and the stream belongs to the context bound above.
            unsafe { result::set_stream(plan.0, ctx.cuda_stream().cu_stream() as _) }
                .map_err(fft_error(what))?;
            Ok((plan, work))
        };
        let (forward, fw) = make(sys::cufftType::CUFFT_D2Z, "forward plan")?;
        let (inverse, iw) = make(sys::cufftType::CUFFT_Z2D, "inverse plan")?;
        let work = ctx.alloc::<u8>(fw.max(iw).max(1))?;
        for (p, what) in [
            (&forward, "forward work area"),
            (&inverse, "inverse work area"),
        ] {
            // SAFETY: `work` holds at least the size either plan asked for and lives as long
            // as the plans (both in `Fft2d`).
            unsafe { result::set_work_area(p.0, work.ptr() as *mut std::ffi::c_void) }
                .map_err(fft_error(what))?;
        }
        Ok(Fft2d {
            forward,
            inverse,
            _work: work,
            rows,
            cols,
            batch,
        })
    }

    /// Complex values of one transform's half spectrum.
    pub fn spectrum_len(&self) -> usize {
        self.rows * (self.cols / 2 + 1)
    }

    fn check(&self, real: usize, complex: usize, batch: usize) -> Result<()> {
        if real < batch * self.rows * self.cols || complex < batch * 2 * self.spectrum_len() {
            return Err(KernelError::Shape(format!(
                "{batch} 2-D FFTs of {} x {} on arrays of {real} reals and {complex} doubles",
                self.rows, self.cols
            )));
        }
        Ok(())
    }

    /// `spectra` (interleaved re, im) = the forward transforms of `real`.
    pub fn forward(
        &self,
        ctx: &GpuContext,
        real: &DeviceVec<f64>,
        spectra: &mut DeviceVec<f64>,
    ) -> Result<()> {
        self.check(real.len(), spectra.len(), self.batch)?;
        ctx.bind_to_thread()?;
        // SAFETY: sizes checked above; both arrays are queued on the plan's stream.
        unsafe {
            result::exec_d2z(
                self.forward.0,
                real.ptr() as *mut f64,
                spectra.ptr() as *mut sys::cufftDoubleComplex,
            )
        }
        .map_err(fft_error("forward transform"))
    }

    /// `real` = the (unnormalized) inverse transforms of `spectra`, which cuFFT overwrites.
    pub fn inverse(
        &self,
        ctx: &GpuContext,
        spectra: &mut DeviceVec<f64>,
        real: &mut DeviceVec<f64>,
    ) -> Result<()> {
        self.check(real.len(), spectra.len(), self.batch)?;
        ctx.bind_to_thread()?;
        // SAFETY: sizes checked above; both arrays are queued on the plan's stream.
        unsafe {
            result::exec_z2d(
                self.inverse.0,
                spectra.ptr() as *mut sys::cufftDoubleComplex,
                real.ptr() as *mut f64,
            )
        }
        .map_err(fft_error("inverse transform"))
    }
}
