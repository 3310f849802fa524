//! `log1p` (scanpy's `pp.log1p`): `ln(1 + x)` on the stored values, divided by `ln(base)` when a
//! base is given. Zeros stay zero, so sparsity is kept.

use crate::csr::CsrMatrix;
use crate::error::{KernelError, Result};
use crate::real::Real;
use rayon::prelude::*;

pub(crate) mod gpu;

/// The step's kernel module, for the warm-up ([`crate::warm_up`]).
pub const KERNELS: crate::gpu::module_cache::KernelSource = gpu::SRC;
pub use gpu::{log1p_gpu, log1p_streamed};

fn check_base(base: Option<f64>) -> Result<()> {
    if let Some(b) = base {
        if !(b.is_finite() && b > 0.0 && b != 1.0) {
            return Err(KernelError::param(
                "base",
                format!("must be positive, finite and not 1, got {b}"),
            ));
        }
    }
    Ok(())
}

/// `ln(1 + v)` (in the element type), then divided by `ln(base)` in `f64` when a base is given,
/// as numpy does. Rejects NaN and infinite values (reported with `row` 0 and `col` the position).
pub fn log1p_values<T: Real>(values: &mut [T], base: Option<f64>) -> Result<()> {
    check_base(base)?;
    if let Some(k) = crate::first_match::par_position_first(values, |v| !v.is_finite()) {
        return Err(KernelError::NonFinite {
            row: 0,
            col: k,
            value: values[k].to_f64(),
        });
    }
    transform(values, base);
    Ok(())
}

fn transform<T: Real>(values: &mut [T], base: Option<f64>) {
    let lb = base.map(f64::ln);
    values.par_chunks_mut(1 << 15).for_each(|ch| match lb {
        None => T::ln_1p_slice(ch),
        Some(l) => {
            T::ln_1p_slice(ch);
            ch.iter_mut().for_each(|v| *v = T::from_f64(v.to_f64() / l));
        }
    });
}

/// Log-transforms the stored values of `x` in place. Rejects NaN and infinite values.
pub fn log1p<T: Real>(x: &mut CsrMatrix<T>, base: Option<f64>) -> Result<()> {
    check_base(base)?;
    x.check_finite()?;
    transform(&mut x.data, base);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_and_other_bases() {
        let mut x =
            CsrMatrix::new(2, 3, vec![0, 2, 3], vec![0, 2, 1], vec![1.0f32, 0.0, 9.0]).unwrap();
        log1p(&mut x, None).unwrap();
        assert_eq!(x.data, [2f32.ln(), 0.0, 10f32.ln()]);
        let mut x = CsrMatrix::new(1, 2, vec![0, 1], vec![0], vec![1.0f64]).unwrap();
        log1p(&mut x, Some(2.0)).unwrap();
        assert!((x.data[0] - 1.0).abs() < 1e-15);
    }

    #[test]
    fn rejects_bad_input() {
        let mut x = CsrMatrix::new(1, 2, vec![0, 1], vec![1], vec![f32::INFINITY]).unwrap();
        assert!(matches!(
            log1p(&mut x, None),
            Err(KernelError::NonFinite { row: 0, col: 1, .. })
        ));
        let mut x = CsrMatrix::new(1, 2, vec![0, 1], vec![1], vec![1.0f32]).unwrap();
        assert!(log1p(&mut x, Some(1.0)).is_err());
        assert!(log1p(&mut x, Some(-2.0)).is_err());
    }
}
