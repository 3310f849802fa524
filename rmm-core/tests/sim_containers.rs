//! Containers on a simulated device: round trips, resize keeping contents, copies across
//! streams, drops on other threads, and the memory going back to the resource.

use rmm_core::*;
use rmm_cuda::SimOp;
use std::sync::Arc;

fn setup() -> (Device, SharedResource) {
    let device = Device::simulated(1 << 30);
    let resource: SharedResource = Arc::new(CudaResource::new(&device));
    (device, resource)
}

fn used(device: &Device) -> usize {
    let info = device.memory_info().unwrap();
    info.total - info.free
}

#[test]
fn buffer_round_trip_host_device_host() {
    let (device, r) = setup();
    let stream = device.new_stream().unwrap();
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let buf = DeviceBuffer::from_host_with_resource(&data, &stream, r).unwrap();
    assert_eq!(buf.size(), data.len());
    assert_eq!(buf.to_host().unwrap(), data);
}

#[test]
fn resize_keeps_contents_and_capacity_rules_hold() {
    let (device, r) = setup();
    let stream = device.new_stream().unwrap();
    let data: Vec<u8> = (0..1000u32).map(|i| (i % 256) as u8).collect();
    let mut buf = DeviceBuffer::from_host_with_resource(&data, &stream, r).unwrap();
    buf.resize(5000).unwrap();
    assert_eq!(buf.size(), 5000);
    assert!(buf.capacity() >= 5000);
    assert_eq!(&buf.to_host().unwrap()[..1000], &data[..]);
    buf.resize(10).unwrap();
    assert_eq!(buf.to_host().unwrap(), data[..10].to_vec());
    assert_eq!(
        buf.capacity(),
        5000,
        "shrinking the size keeps the capacity"
    );
    buf.shrink_to_fit().unwrap();
    assert_eq!(buf.capacity(), 10);
    assert_eq!(buf.to_host().unwrap(), data[..10].to_vec());
    buf.reserve(100).unwrap();
    assert_eq!((buf.size(), buf.capacity()), (10, 100));
    assert_eq!(buf.to_host().unwrap(), data[..10].to_vec());
}

#[test]
fn all_memory_returns_when_buffers_drop() {
    let (device, r) = setup();
    let stream = device.new_stream().unwrap();
    let before = used(&device);
    {
        let mut a = DeviceBuffer::with_resource(1 << 20, &stream, r.clone()).unwrap();
        let _b = a.try_clone_on(&stream).unwrap();
        a.resize(3 << 20).unwrap();
        assert!(used(&device) >= before + (4 << 20));
    }
    assert_eq!(used(&device), before);
}

#[test]
fn deep_copy_across_streams_orders_after_the_source_stream() {
    let (device, r) = setup();
    let s1 = device.new_stream().unwrap();
    let s2 = device.new_stream().unwrap();
    let v = DeviceVec::from_host_with_resource(&[1.5f64, 2.5, -3.0], &s1, r).unwrap();
    device.clear_sim_ops();
    let copy = v.try_clone_on(&s2).unwrap();
    assert_eq!(copy.to_host().unwrap(), vec![1.5, 2.5, -3.0]);
    assert_eq!(copy.stream().id(), s2.id());
    let ops = device.sim_ops();
    // The copy stream waited for an event recorded on the source stream, without a host sync first.
    let rec = ops
        .iter()
        .position(|op| matches!(op, SimOp::Record { stream, .. } if *stream == s1.id().0));
    let wait = ops
        .iter()
        .position(|op| matches!(op, SimOp::Wait { stream, .. } if *stream == s2.id().0));
    assert!(
        matches!((rec, wait), (Some(r), Some(w)) if r < w),
        "ops: {ops:?}"
    );
}

#[test]
fn set_stream_orders_new_stream_after_old() {
    let (device, r) = setup();
    let s1 = device.new_stream().unwrap();
    let s2 = device.new_stream().unwrap();
    let mut v = DeviceVec::<u32>::with_resource(16, &s1, r).unwrap();
    device.clear_sim_ops();
    v.set_stream(&s2).unwrap();
    assert_eq!(v.stream().id(), s2.id());
    assert!(device
        .sim_ops()
        .iter()
        .any(|op| matches!(op, SimOp::Wait { stream, .. } if *stream == s2.id().0)));
    let other = Device::simulated(1 << 20);
    assert!(
        v.set_stream(&other.new_stream().unwrap()).is_err(),
        "a stream of another device is refused"
    );
}

#[test]
fn drop_on_another_thread_frees() {
    let (device, r) = setup();
    let stream = device.new_stream().unwrap();
    let before = used(&device);
    let v = DeviceVec::from_host_with_resource(&vec![7u16; 4096], &stream, r).unwrap();
    std::thread::spawn(move || drop(v)).join().unwrap();
    assert_eq!(used(&device), before);
}

#[test]
fn typed_vector_and_scalar() {
    let (device, _) = setup();
    let stream = device.new_stream().unwrap();
    let zeros = DeviceVec::<f32>::zeros(100, &stream).unwrap();
    assert_eq!(zeros.to_host().unwrap(), vec![0.0; 100]);
    let mut v = DeviceVec::from_host(&[1i32, 2, 3, 4], &stream).unwrap();
    v.resize(6).unwrap();
    assert_eq!(&v.to_host().unwrap()[..4], &[1, 2, 3, 4]);
    assert_eq!(v.len(), 6);
    let mut s = DeviceScalar::new(41u64, &stream).unwrap();
    assert_eq!(s.value().unwrap(), 41);
    s.set_value(42).unwrap();
    assert_eq!(s.value().unwrap(), 42);
}

#[test]
fn wrong_lengths_and_devices_are_errors_not_panics() {
    let (device, r) = setup();
    let stream = device.new_stream().unwrap();
    let mut buf = DeviceBuffer::with_resource(8, &stream, r.clone()).unwrap();
    assert!(matches!(
        buf.copy_from_host(&[1, 2, 3]),
        Err(MemoryError::InvalidArgument(_))
    ));
    let mut out = [0u8; 4];
    assert!(matches!(
        buf.copy_to_host(&mut out),
        Err(MemoryError::InvalidArgument(_))
    ));
    let other = Device::simulated(1 << 20);
    assert!(DeviceBuffer::with_resource(8, &other.default_stream(), r).is_err());
    let oom = DeviceBuffer::new(2 << 30, &stream).unwrap_err();
    assert!(oom.is_out_of_memory(), "{oom}");
    assert!(oom.to_string().contains("2.00 GiB requested"), "{oom}");
}

#[test]
fn zero_length_containers_work() {
    let (device, r) = setup();
    let stream = device.default_stream();
    let mut buf = DeviceBuffer::with_resource(0, &stream, r).unwrap();
    assert!(buf.is_empty());
    assert_eq!(buf.to_host().unwrap(), Vec::<u8>::new());
    buf.resize(3).unwrap();
    buf.copy_from_host(&[9, 8, 7]).unwrap();
    assert_eq!(buf.to_host().unwrap(), vec![9, 8, 7]);
}
