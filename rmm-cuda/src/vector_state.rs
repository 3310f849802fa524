//! The CPU's vector registers after driver calls. The CUDA driver returns with the upper halves
//! of the AVX-512 registers in use on the calling thread (no `vzeroupper` on its way out):
//! `xgetbv(1)` reads XINUSE 0x2e7 on a thread of `scpipe` that waited for the GPU, 0x2a3 in a
//! process without CUDA (H200 machine's Xeon). Until something clears them, the thread's SSE code
//! (what Rust emits for x86-64, and libm's `exp`) runs many times slower: Leiden's sequential
//! refinement, on the thread that had downloaded its graph, spent 616 ms in 2 million `exp` calls
//! instead of 28. A wait for the GPU ([`crate::Stream::synchronize`],
//! [`crate::Event::synchronize`]) is where host work on the GPU's results begins, so each one
//! clears them.

/// Puts the upper halves of this thread's vector registers back in their initial state
/// (`vzeroupper`) where the CPU has AVX; nothing elsewhere.
#[inline]
pub fn clear_upper_vector_state() {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: the CPU has AVX (checked above). `vzeroupper` zeroes only bits 128 and up of
        // the vector registers, where code compiled without AVX (the caller) keeps nothing.
        unsafe { zero_upper() }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn zero_upper() {
    std::arch::x86_64::_mm256_zeroupper()
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// XINUSE (`xgetbv` with ECX 1): which state components are not in their initial state; bit
    /// 2 is the upper halves of the YMM registers. `None` where the CPU cannot tell.
    fn in_use() -> Option<u64> {
        // CPUID leaf 0xD, sub-leaf 1, EAX bit 2: XGETBV with ECX 1 is supported.
        let supported = std::arch::is_x86_feature_detected!("xsave")
            && std::arch::x86_64::__cpuid_count(0xd, 1).eax & 4 != 0;
        if !supported {
            return None;
        }
        let (lo, hi): (u32, u32);
        // SAFETY: supported (above); it only reads a register.
        unsafe {
            std::arch::asm!("xgetbv", in("ecx") 1u32, out("eax") lo, out("edx") hi,
                options(nomem, nostack));
        }
        Some(((hi as u64) << 32) | lo as u64)
    }

    #[test]
    fn clearing_puts_the_upper_halves_back_in_their_initial_state() {
        if !std::arch::is_x86_feature_detected!("avx") || in_use().is_none() {
            eprintln!("skipped: this CPU has no AVX or cannot report which state is in use");
            return;
        }
        // A 256-bit write, as the driver's code leaves behind.
        // SAFETY: the CPU has AVX; ymm1 is declared clobbered.
        unsafe {
            std::arch::asm!("vpcmpeqd ymm1, ymm1, ymm1", out("ymm1") _, options(nomem, nostack))
        };
        assert_ne!(
            in_use().unwrap() & 4,
            0,
            "the write put the upper halves in use"
        );
        clear_upper_vector_state();
        assert_eq!(in_use().unwrap() & 4, 0, "cleared");
    }
}
