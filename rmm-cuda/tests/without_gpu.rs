//! What the CUDA layer does on a machine without a GPU (CI): typed errors, never a panic; and the
//! simulated device's bookkeeping.

use rmm_cuda::*;

#[test]
fn no_gpu_is_a_typed_error_not_a_panic() {
    if gpu_available() {
        eprintln!("this machine has a GPU; the no-GPU path is not exercised here");
        return;
    }
    let err = Device::cuda(0).unwrap_err();
    assert!(
        matches!(err, CudaError::NoDriver | CudaError::NoDevice),
        "{err}"
    );
    assert!(err.to_string().contains("no CUDA"), "{err}");
    // Asking again gives the same answer (the probe is cached, never retried into a panic).
    assert_eq!(Device::cuda(3).unwrap_err(), err);
}

#[test]
fn simulated_device_counts_memory_and_refuses_bad_pointers() {
    let d = Device::simulated(1 << 20);
    assert!(d.is_simulated());
    let p = d.alloc(1000).unwrap();
    assert_eq!(p % ALIGNMENT as u64, 0);
    assert_eq!(d.memory_info().unwrap().free, (1 << 20) - 1000);
    let oom = d.alloc(1 << 20).unwrap_err();
    assert!(oom.is_out_of_memory(), "{oom}");
    assert!(
        unsafe { d.free(p + 8) }.is_err(),
        "an interior pointer is not an allocation"
    );
    unsafe { d.free(p).unwrap() };
    assert!(unsafe { d.free(p) }.is_err(), "double free is refused");
    assert_eq!(d.memory_info().unwrap().free, 1 << 20);
}

#[test]
fn simulated_copies_check_their_ranges() {
    let d = Device::simulated(1 << 20);
    let s = d.new_stream().unwrap();
    let p = d.alloc(16).unwrap();
    unsafe {
        s.copy_from_host(p, &[1u8; 16]).unwrap();
        assert!(
            s.copy_from_host(p, &[1u8; 17]).is_err(),
            "a copy past the end is refused"
        );
        let mut out = [0u8; 16];
        s.copy_to_host(&mut out, p).unwrap();
        assert_eq!(out, [1u8; 16]);
        d.free(p).unwrap();
    }
}

/// A copy from another (simulated) device lands in this one's memory; a range past either
/// allocation is refused.
#[test]
fn simulated_peer_copies_check_both_ranges() {
    let (a, b) = (Device::simulated(1 << 20), Device::simulated(1 << 20));
    let (sa, sb) = (a.new_stream().unwrap(), b.new_stream().unwrap());
    let (pa, pb) = (a.alloc(16).unwrap(), b.alloc(16).unwrap());
    unsafe {
        sa.copy_from_host(pa, &[7u8; 16]).unwrap();
        sb.copy_from_peer(pb + 4, pa, &a, 8).unwrap();
        let mut out = [0u8; 16];
        sb.copy_to_host(&mut out, pb).unwrap();
        assert_eq!(out[4..12], [7u8; 8]);
        assert!(
            sb.copy_from_peer(pb, pa + 8, &a, 16).is_err(),
            "past the source"
        );
        assert!(
            sb.copy_from_peer(pb + 8, pa, &a, 16).is_err(),
            "past the destination"
        );
        a.free(pa).unwrap();
        b.free(pb).unwrap();
    }
}

#[test]
fn simulated_events_record_and_wait_are_logged() {
    let d = Device::simulated(1 << 20);
    let (a, b) = (d.new_stream().unwrap(), d.new_stream().unwrap());
    assert_ne!(a.id(), b.id());
    let e = d.new_event().unwrap();
    b.wait_for(&a, &e).unwrap();
    let ev = e.sim_id().unwrap();
    assert_eq!(
        d.sim_ops(),
        vec![
            SimOp::Record {
                event: ev,
                stream: a.id().0
            },
            SimOp::Wait {
                stream: b.id().0,
                event: ev
            }
        ]
    );
    // Waiting for oneself is free.
    a.wait_for(&a, &e).unwrap();
    assert_eq!(d.sim_ops().len(), 2);
    let other = Device::simulated(1 << 20);
    assert!(
        other.new_stream().unwrap().record(&e).is_err(),
        "an event of another device is refused"
    );
}
