//! The per-device registry and `reinitialize`, on simulated devices.

use rmm_core::*;
use std::sync::Arc;

#[test]
fn per_device_resource_defaults_to_cuda_and_setters_return_the_previous() {
    let device = Device::simulated(1 << 30);
    assert_eq!(get_per_device_resource(&device).name(), "cuda");
    let managed: SharedResource = Arc::new(ManagedResource::new(&device));
    let prev = set_per_device_resource(&device, managed.clone()).unwrap();
    assert_eq!(prev.name(), "cuda");
    assert!(Arc::ptr_eq(&get_per_device_resource(&device), &managed));
    let back = set_per_device_resource(&device, prev).unwrap();
    assert!(Arc::ptr_eq(&back, &managed));
}

#[test]
fn a_resource_of_another_device_is_refused() {
    let a = Device::simulated(1 << 20);
    let b = Device::simulated(1 << 20);
    let err = set_per_device_resource(&a, Arc::new(CudaResource::new(&b))).unwrap_err();
    assert!(err.to_string().contains("belongs to"), "{err}");
}

#[test]
fn current_device_is_per_thread() {
    let device = Device::simulated(1 << 20);
    set_current_device(&device).unwrap();
    assert_eq!(current_device().unwrap(), device);
    let prev = set_current_device_resource(Arc::new(ManagedResource::new(&device))).unwrap();
    assert_eq!(prev.name(), "cuda");
    assert_eq!(get_current_device_resource().unwrap().name(), "managed");
    // Another thread has not chosen this device.
    let other = std::thread::spawn(|| current_device().map(|d| d.is_simulated()).unwrap_or(false))
        .join()
        .unwrap();
    assert!(!other);
}

#[test]
fn reinitialize_builds_the_asked_resource_per_device() {
    let devices = vec![Device::simulated(1 << 20), Device::simulated(1 << 20)];
    let built = reinitialize(ReinitializeOptions {
        managed_memory: true,
        devices: devices.clone(),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(built.len(), 2);
    for d in &devices {
        assert_eq!(get_per_device_resource(d).name(), "managed");
    }
    let plain = reinitialize(ReinitializeOptions {
        devices: devices.clone(),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(plain[0].name(), "cuda");
}
