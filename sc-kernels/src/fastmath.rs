//! Branch-free `ln(1 + x)` and `exp(x) - 1` for `f32`, evaluated in `f64` and rounded once, so
//! they are correctly rounded except in rare near-halfway cases (at most one unit in the last
//! place off), and written so that the compiler vectorizes loops over them (libm's scalar
//! `log1pf` / `expm1f` calls dominated `log1p` and the seurat flavour of HVG otherwise).

const LN2: f64 = std::f64::consts::LN_2;
const SQRT2: f64 = std::f64::consts::SQRT_2;

/// `y = 2^e m` (positive normal `y`, `m` in [sqrt(1/2), sqrt(2))) as `(e, s)` with
/// `s = (m - 1) / (m + 1)`: `ln y = e ln 2 + 2 atanh(s)`, the series of [`ln_pos`] and
/// [`pow_f32`].
#[inline(always)]
fn ln_reduce(y: f64) -> (f64, f64) {
    let bits = y.to_bits();
    // Biased exponent as an exact f64 without an integer-to-float conversion (AVX2 has none
    // for 64-bit integers): 2^52 + e, minus 2^52.
    let e = f64::from_bits(0x4330_0000_0000_0000 | ((bits >> 52) & 0x7ff))
        - (4503599627370496.0 + 1023.0);
    let m = f64::from_bits((bits & ((1u64 << 52) - 1)) | (1023u64 << 52));
    let big = m > SQRT2;
    let m = if big { m * 0.5 } else { m };
    let e = e + if big { 1.0 } else { 0.0 };
    (e, (m - 1.0) / (m + 1.0))
}

/// `x` (clamped to [-708, 709]) as `k ln 2 + r`, `|r| <= ln 2 / 2`: `exp(x) = 2^k exp(r)`.
#[inline(always)]
fn exp_reduce(x: f64) -> (i64, f64) {
    let x = x.clamp(-708.0, 709.0);
    const SHIFT: f64 = 6755399441055744.0; // 1.5 * 2^52: adding it rounds to an integer
    let t = x * std::f64::consts::LOG2_E + SHIFT;
    let k = (t.to_bits() as i64).wrapping_sub(SHIFT.to_bits() as i64);
    let kf = t - SHIFT;
    // r = x - k ln 2, with ln 2 split for accuracy.
    (
        k,
        (x - kf * 6.93147180369123816490e-01) - kf * 1.90821492927058770002e-10,
    )
}

/// `q 2^k`.
#[inline(always)]
fn times_two_to(q: f64, k: i64) -> f64 {
    q * f64::from_bits(((k + 1023) as u64) << 52)
}

/// `ln(y)` for positive normal `y`, relative error about 1e-15.
#[inline(always)]
pub(crate) fn ln_pos(y: f64) -> f64 {
    let (e, s) = ln_reduce(y);
    let s2 = s * s;
    let p = 1.0
        + s2 * (1.0 / 3.0
            + s2 * (1.0 / 5.0
                + s2 * (1.0 / 7.0
                    + s2 * (1.0 / 9.0
                        + s2 * (1.0 / 11.0
                            + s2 * (1.0 / 13.0 + s2 * (1.0 / 15.0 + s2 * (1.0 / 17.0))))))));
    e * LN2 + 2.0 * s * p
}

/// `exp(x)` for `x` in [-708, 709], relative error about 1e-15.
#[inline(always)]
pub(crate) fn exp_f64(x: f64) -> f64 {
    let (k, r) = exp_reduce(x);
    times_two_to(horner(r, &EXP_SERIES), k)
}

/// `exp(r)`'s Taylor series to `r^12`, highest power first (1/12! .. 1/2!, 1, 1).
const EXP_SERIES: [f64; 13] = [
    1.0 / 479001600.0,
    1.0 / 39916800.0,
    1.0 / 3628800.0,
    1.0 / 362880.0,
    1.0 / 40320.0,
    1.0 / 5040.0,
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    0.5,
    1.0,
    1.0,
];

/// The polynomial of `coeffs` (highest power first) at `r`, by Horner's rule, unfused.
#[inline(always)]
fn horner(r: f64, coeffs: &[f64]) -> f64 {
    coeffs[1..].iter().fold(coeffs[0], |p, &c| p * r + c)
}

/// `exp(x)` rounded to `f32` (0 below about -708, infinite above 88.7).
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    exp_f64(x as f64) as f32
}

/// `x^y` for positive normal `x`, evaluated in `f64` to a relative error of about 1e-8 (what an
/// `f32` result needs: the series of [`ln_pos`] and `exp` cut at 5 and 8 terms) and rounded to
/// `f32`. UMAP applies its moves one after another, so each power's latency adds up: the short
/// series take a third less. Only `+ - * /` and bit operations, none fused: the GPU's copy
/// (`pow_f32` in `umap/umap.cu`, with `__dadd_rn`-style intrinsics) gives the same bits, which
/// keeps UMAP's layouts identical on both devices.
#[inline(always)]
pub fn pow_f32(x: f32, y: f32) -> f32 {
    let (e, s) = ln_reduce(x as f64);
    let s2 = s * s;
    let p = 1.0 + s2 * (1.0 / 3.0 + s2 * (1.0 / 5.0 + s2 * (1.0 / 7.0 + s2 * (1.0 / 9.0))));
    // exp(y ln x) as `exp_f64`, its series cut after r^7 (from 1/7!).
    let (k, r) = exp_reduce(y as f64 * (e * LN2 + 2.0 * s * p));
    times_two_to(horner(r, &EXP_SERIES[5..]), k) as f32
}

/// `ln(1 + x)` for `x > -1`, rounded to `f32`.
#[inline(always)]
pub fn ln_1p_f32(x: f32) -> f32 {
    let xd = x as f64;
    let series = xd * (1.0 + xd * (-0.5 + xd * (1.0 / 3.0 + xd * (-0.25))));
    let full = ln_pos(1.0 + xd);
    (if xd.abs() < 1e-4 { series } else { full }) as f32
}

/// `exp(x) - 1`, rounded to `f32`.
#[inline(always)]
pub fn exp_m1_f32(x: f32) -> f32 {
    let xd = x as f64;
    let series = xd * (1.0 + xd * (0.5 + xd * (1.0 / 6.0)));
    let full = exp_f64(xd) - 1.0;
    (if xd.abs() < 1e-5 { series } else { full }) as f32
}

/// Whether the fast paths apply to every value (finite, `> -0.5`); otherwise callers use libm.
#[inline]
pub fn all_in_fast_domain(v: &[f32]) -> bool {
    v.iter().fold(true, |ok, &x| ok & (x > -0.5) & (x < 1e30))
}

// The slice loops below are compiled a second time with AVX2 + FMA enabled and chosen at run
// time: the default target (x86-64 baseline) cannot vectorize the f64 arithmetic, the AVX2
// version runs four values per instruction.

#[inline(always)]
fn ln_1p_loop(v: &mut [f32]) {
    v.iter_mut().for_each(|x| *x = ln_1p_f32(*x));
}

#[inline(always)]
fn exp_m1_loop(src: &[f32], dst: &mut [f32]) {
    dst.iter_mut()
        .zip(src)
        .for_each(|(d, s)| *d = exp_m1_f32(*s));
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn ln_1p_loop_avx2(v: &mut [f32]) {
    ln_1p_loop(v)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp_m1_loop_avx2(src: &[f32], dst: &mut [f32]) {
    exp_m1_loop(src, dst)
}

#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx2() -> bool {
    static AVX2: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVX2.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
}

/// `ln_1p_f32` of every value, in place (values must lie in the fast domain).
pub fn ln_1p_slice(v: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU supports AVX2 and FMA (checked above).
        unsafe { ln_1p_loop_avx2(v) };
        return;
    }
    ln_1p_loop(v)
}

/// `exp_m1_f32` of `src` into `dst`.
pub fn exp_m1_slice(src: &[f32], dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU supports AVX2 and FMA (checked above).
        unsafe { exp_m1_loop_avx2(src, dst) };
        return;
    }
    exp_m1_loop(src, dst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ulps(a: f32, b: f32) -> i64 {
        (a.to_bits() as i64 - b.to_bits() as i64).abs()
    }

    #[test]
    fn special_values() {
        assert_eq!(ln_1p_f32(0.0), 0.0);
        assert_eq!(exp_m1_f32(0.0), 0.0);
        assert_eq!(ln_1p_f32(1.0), 2f32.ln());
        assert_eq!(exp_m1_f32(1.0), (1f64.exp() - 1.0) as f32);
        assert!(exp_m1_f32(100.0).is_infinite());
        assert_eq!(exp_m1_f32(-100.0), -1.0);
    }

    #[test]
    fn mostly_correctly_rounded() {
        let mut off = 0;
        let n = 200_000;
        for i in 0..n {
            let x = (i as f32) * 1e-3 + 1e-7;
            let want = (x as f64).ln_1p() as f32;
            let got = ln_1p_f32(x);
            assert!(ulps(got, want) <= 1, "{x}");
            off += (got != want) as usize;
            let y = x * 1e-2;
            assert!(ulps(exp_m1_f32(y), (y as f64).exp_m1() as f32) <= 1, "{y}");
        }
        assert!(off < n / 1000, "{off} of {n} not correctly rounded");
    }

    proptest! {
        #[test]
        fn within_one_ulp(x in -0.49f32..1e6) {
            prop_assert!(ulps(ln_1p_f32(x), (x as f64).ln_1p() as f32) <= 1);
        }

        /// UMAP's powers: squared distances from 1e-30 to 1e8, exponents of its curves.
        #[test]
        fn pow_within_one_ulp(x in 1e-30f32..1e8, y in 0.05f32..2.0) {
            let want = (x as f64).powf(y as f64) as f32;
            prop_assert!(ulps(pow_f32(x, y), want) <= 1, "{x}^{y}: {} vs {want}", pow_f32(x, y));
        }

        #[test]
        fn exp_within_one_ulp(x in -80f32..80.0) {
            prop_assert!(ulps(exp_m1_f32(x), (x as f64).exp_m1() as f32) <= 1);
            prop_assert!(ulps(exp_f32(x), (x as f64).exp() as f32) <= 1);
        }
    }
}
