//! Asynchronous copies from pinned host memory (`PinnedHostVec`) on a simulated device: queued
//! without a host wait, recorded on their stream, and waited for before the source is changed or
//! freed, never after.

use rmm_core::*;
use rmm_cuda::SimOp;
use std::sync::Arc;

fn setup() -> (Device, SharedResource, PinnedHostResource) {
    let device = Device::simulated(1 << 30);
    let resource: SharedResource = Arc::new(CudaResource::new(&device));
    let pinned = PinnedHostResource::new(&device);
    (device, resource, pinned)
}

fn host_waits(ops: &[SimOp]) -> Vec<SimOp> {
    ops.iter()
        .copied()
        .filter(|op| {
            matches!(
                op,
                SimOp::StreamSync { .. } | SimOp::EventSync { .. } | SimOp::DeviceSync
            )
        })
        .collect()
}

fn records_on(ops: &[SimOp], stream: &Stream) -> Vec<u64> {
    ops.iter()
        .filter_map(|op| match *op {
            SimOp::Record { event, stream: s } if s == stream.id().0 => Some(event),
            _ => None,
        })
        .collect()
}

#[test]
fn a_copy_from_pinned_memory_queues_without_waiting_and_the_source_waits_before_it_goes() {
    let (device, r, pinned) = setup();
    let stream = device.new_stream().unwrap();
    let values: Vec<f64> = (0..10_000).map(|i| i as f64 * 0.5).collect();
    let src = PinnedHostVec::from_slice(&values, &pinned, &stream).unwrap();
    assert_eq!(src.as_slice(), &values[..]);
    device.clear_sim_ops();

    let v = DeviceVec::from_pinned_async_with_resource(&src, &stream, r).unwrap();
    let ops = device.sim_ops();
    assert_eq!(host_waits(&ops), vec![], "the copy is only queued");
    let recorded = records_on(&ops, &stream);
    assert_eq!(
        recorded.len(),
        1,
        "the copy is marked on its stream: {ops:?}"
    );

    // Reading the source never waits; dropping it waits for the copy, then frees the memory.
    assert_eq!(src.as_slice()[9_999], 4_999.5);
    device.clear_sim_ops();
    drop(src);
    let ops = device.sim_ops();
    assert_eq!(
        host_waits(&ops).first(),
        Some(&SimOp::EventSync { event: recorded[0] }),
        "{ops:?}"
    );
    assert_eq!(v.to_host().unwrap(), values);
}

#[test]
fn refilling_a_staging_buffer_waits_for_the_copies_on_every_stream() {
    let (device, r, pinned) = setup();
    let (a, b) = (device.new_stream().unwrap(), device.new_stream().unwrap());
    let mut staging = PinnedHostVec::<u32>::zeroed(1000, &pinned, &a).unwrap();
    staging
        .as_mut_slice()
        .unwrap()
        .iter_mut()
        .enumerate()
        .for_each(|(i, x)| *x = i as u32);
    let mut on_a = DeviceVec::<u32>::with_resource(1000, &a, r.clone()).unwrap();
    let mut on_b = DeviceVec::<u32>::with_resource(1000, &b, r).unwrap();
    device.clear_sim_ops();
    on_a.copy_from_pinned_async(&staging).unwrap();
    on_b.copy_from_pinned_async(&staging).unwrap();
    // A second copy on A re-records A's event rather than making another.
    on_a.copy_from_pinned_async(&staging).unwrap();
    let ops = device.sim_ops();
    assert_eq!(host_waits(&ops), vec![]);
    let (ra, rb) = (records_on(&ops, &a), records_on(&ops, &b));
    assert_eq!((ra.len(), rb.len()), (2, 1), "{ops:?}");
    assert_eq!(ra[0], ra[1]);

    device.clear_sim_ops();
    staging.as_mut_slice().unwrap().fill(7);
    let mut waited: Vec<SimOp> = host_waits(&device.sim_ops());
    waited.sort_by_key(|op| format!("{op:?}"));
    let mut expected = vec![
        SimOp::EventSync { event: ra[0] },
        SimOp::EventSync { event: rb[0] },
    ];
    expected.sort_by_key(|op| format!("{op:?}"));
    assert_eq!(waited, expected, "both streams' copies, once each");
    // Nothing is pending any more: a second change waits for nothing.
    device.clear_sim_ops();
    staging.as_mut_slice().unwrap()[0] = 1;
    assert_eq!(host_waits(&device.sim_ops()), vec![]);

    let expect: Vec<u32> = (0..1000).collect();
    assert_eq!(on_a.to_host().unwrap(), expect);
    assert_eq!(on_b.to_host().unwrap(), expect);
}

#[test]
fn per_thread_default_streams_each_get_their_own_mark() {
    let (device, r, pinned) = setup();
    let src = Arc::new(
        PinnedHostVec::from_slice(&[3u8; 4096], &pinned, &device.new_stream().unwrap()).unwrap(),
    );
    device.clear_sim_ops();
    std::thread::scope(|s| {
        for _ in 0..2 {
            let (src, r, device) = (src.clone(), r.clone(), device.clone());
            s.spawn(move || {
                let stream = device.per_thread_stream();
                let v = DeviceBuffer::from_pinned_async_with_resource(&src, &stream, r).unwrap();
                assert_eq!(v.to_host().unwrap(), vec![3u8; 4096]);
            });
        }
    });
    let records: Vec<u64> = records_on(&device.sim_ops(), &device.per_thread_stream());
    assert_eq!(records.len(), 2);
    assert_ne!(
        records[0], records[1],
        "the same handle names two streams: one event would cover only the last"
    );
    device.clear_sim_ops();
    src.wait_for_copies().unwrap();
    assert_eq!(host_waits(&device.sim_ops()).len(), 2);
}

#[test]
fn sizes_must_match_and_empty_vectors_work() {
    let (device, r, pinned) = setup();
    let stream = device.new_stream().unwrap();
    let src = PinnedHostVec::from_slice(&[1u16, 2, 3], &pinned, &stream).unwrap();
    let mut buf = DeviceBuffer::with_resource(4, &stream, r.clone()).unwrap();
    let err = buf.copy_from_pinned_async(&src).unwrap_err();
    assert!(matches!(err, MemoryError::InvalidArgument(_)), "{err}");
    assert!(err.to_string().contains("6 pinned host bytes"), "{err}");

    let empty = PinnedHostVec::<u64>::zeroed(0, &pinned, &stream).unwrap();
    assert!(empty.is_empty() && empty.as_slice().is_empty());
    let v = DeviceVec::from_pinned_async_with_resource(&empty, &stream, r).unwrap();
    assert!(v.is_empty());
}
