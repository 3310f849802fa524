//! The floating-point element types the steps accept (`f32`, as AnnData files usually hold, and
//! `f64`). Arithmetic happens in the element type where scanpy does it in the array's dtype, and
//! in `f64` where scanpy accumulates in float64, so that results match scanpy's bit for bit or
//! to the last unit.

use std::fmt::Debug;
use std::ops::{Add, AddAssign, Div, Mul, Sub};

/// `f32` or `f64`.
pub trait Real:
    Copy
    + Send
    + Sync
    + Debug
    + PartialOrd
    + Default
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + AddAssign
    + 'static
{
    const ZERO: Self;
    const ONE: Self;
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
    fn ln_1p(self) -> Self;
    fn exp_m1(self) -> Self;
    fn is_finite(self) -> bool;
    /// `ln_1p` of every value, in place (vectorized for `f32`).
    fn ln_1p_slice(values: &mut [Self]) {
        values.iter_mut().for_each(|v| *v = v.ln_1p());
    }
    /// `exp_m1` of `src` into `dst` (vectorized for `f32`).
    fn exp_m1_into(src: &[Self], dst: &mut [Self]) {
        dst.iter_mut().zip(src).for_each(|(d, s)| *d = s.exp_m1());
    }
}

impl Real for f32 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    /// Vectorizable and correctly rounded but in rare cases (see [`crate::fastmath`]); libm
    /// outside the fast domain.
    #[inline(always)]
    fn ln_1p(self) -> Self {
        if self > -0.5 && self < 1e30 {
            crate::fastmath::ln_1p_f32(self)
        } else {
            f32::ln_1p(self)
        }
    }
    #[inline(always)]
    fn exp_m1(self) -> Self {
        if self.is_finite() {
            crate::fastmath::exp_m1_f32(self)
        } else {
            f32::exp_m1(self)
        }
    }
    #[inline(always)]
    fn is_finite(self) -> bool {
        f32::is_finite(self)
    }
    fn ln_1p_slice(values: &mut [Self]) {
        if crate::fastmath::all_in_fast_domain(values) {
            crate::fastmath::ln_1p_slice(values);
        } else {
            values.iter_mut().for_each(|v| *v = v.ln_1p());
        }
    }
    fn exp_m1_into(src: &[Self], dst: &mut [Self]) {
        if src.iter().fold(true, |ok, &x| ok & (x.abs() < 80.0)) {
            crate::fastmath::exp_m1_slice(src, dst);
        } else {
            dst.iter_mut().zip(src).for_each(|(d, s)| *d = s.exp_m1());
        }
    }
}

impl Real for f64 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v
    }
    #[inline(always)]
    fn ln_1p(self) -> Self {
        f64::ln_1p(self)
    }
    #[inline(always)]
    fn exp_m1(self) -> Self {
        f64::exp_m1(self)
    }
    #[inline(always)]
    fn is_finite(self) -> bool {
        f64::is_finite(self)
    }
}
