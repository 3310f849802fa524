//! `MemoryResource::is_equal` (RMM's `is_equal`): two handles are equal when each can free what
//! the other allocated. Checked both ways for every pair.

use rmm_core::*;
use std::sync::Arc;

const MIB: usize = 1 << 20;

/// `a.is_equal(b)`, asserting that the answer is the same both ways.
fn equal(a: &dyn MemoryResource, b: &dyn MemoryResource) -> bool {
    let ab = a.is_equal(b);
    assert_eq!(ab, b.is_equal(a), "{} vs {}", a.name(), b.name());
    ab
}

fn pool(device: &Device) -> PoolResource<CudaResource> {
    PoolResource::new(CudaResource::new(device), PoolOptions::sized(MIB, None)).unwrap()
}

#[test]
fn driver_resources_of_one_device_and_kind_are_equal() {
    let device = Device::simulated(1 << 30);
    let other = Device::simulated(1 << 30);
    assert!(equal(
        &CudaResource::new(&device),
        &CudaResource::new(&device)
    ));
    assert!(!equal(
        &CudaResource::new(&device),
        &CudaResource::new(&other)
    ));
    assert!(equal(
        &ManagedResource::new(&device),
        &ManagedResource::with_prefetch(&device)
    ));
    assert!(!equal(
        &CudaResource::new(&device),
        &ManagedResource::new(&device)
    ));
    assert!(equal(
        &PinnedHostResource::new(&device),
        &PinnedHostResource::new(&device)
    ));
    assert!(!equal(
        &PinnedHostResource::new(&device),
        &CudaResource::new(&device)
    ));
    // And it is true: one frees what the other allocated.
    let (a, b) = (CudaResource::new(&device), CudaResource::new(&device));
    let s = device.new_stream().unwrap();
    let p = a.allocate(4096, &s).unwrap();
    unsafe { b.deallocate(p, 4096, &s) }.unwrap();
}

#[test]
fn a_sub_allocator_is_equal_to_itself_only_through_any_handle() {
    let device = Device::simulated(1 << 30);
    let (p1, p2) = (pool(&device), pool(&device));
    assert!(equal(&p1, &p1));
    assert!(!equal(&p1, &p2), "two pools over equal upstreams");
    assert!(!equal(&p1, p1.upstream()), "a pool and its upstream");

    let shared: SharedResource = Arc::new(pool(&device));
    let clone = shared.clone();
    assert!(equal(&shared, &clone), "two clones of one shared handle");
    assert!(
        equal(&shared, &*clone),
        "a shared handle and the resource itself"
    );
    let nested: Arc<SharedResource> = Arc::new(shared.clone());
    assert!(equal(&nested, &shared), "through several Arcs");

    let arena = ArenaResource::new(
        CudaResource::new(&device),
        ArenaOptions {
            arena_size: Some(4 * MIB),
            ..Default::default()
        },
    )
    .unwrap();
    let fixed = FixedSizeResource::new(CudaResource::new(&device), 4096, 4).unwrap();
    assert!(equal(&arena, &arena) && equal(&fixed, &fixed));
    assert!(!equal(&arena, &fixed) && !equal(&arena, &p1));
}

#[test]
fn counting_adaptors_are_themselves_only_and_pass_through_adaptors_are_their_upstream() {
    let device = Device::simulated(1 << 30);
    let shared: SharedResource = Arc::new(pool(&device));
    // A statistics adaptor whose upstream may share its address: still not its upstream.
    let stats = StatisticsAdaptor::new(pool(&device));
    assert!(equal(&stats, &stats));
    assert!(!equal(&stats, stats.upstream()));
    let tracking = TrackingAdaptor::new(shared.clone(), false);
    assert!(
        !equal(&tracking, &shared),
        "freeing around it would confuse its records"
    );
    let limiting = LimitingAdaptor::new(shared.clone(), MIB);
    assert!(!equal(&limiting, &shared) && !equal(&limiting, &tracking));

    // Prefetching and the failure callback only act on allocation: memory passes both ways.
    let prefetch = PrefetchAdaptor::new(shared.clone());
    assert!(equal(&prefetch, &shared));
    let callback = FailureCallbackAdaptor::new(shared.clone(), |_, _| false);
    assert!(equal(&callback, &prefetch));
    let over_cuda = PrefetchAdaptor::new(CudaResource::new(&device));
    assert!(equal(&over_cuda, &CudaResource::new(&device)));
    assert!(!equal(&over_cuda, &shared));
    // Allocated through one, freed through the other.
    let s = device.new_stream().unwrap();
    let p = prefetch.allocate(1000, &s).unwrap();
    unsafe { shared.deallocate(p, 1000, &s) }.unwrap();
}

#[test]
fn a_resource_of_its_own_compares_by_identity_unless_it_says_otherwise() {
    /// A resource written outside this crate, with only the required methods.
    #[derive(Debug)]
    struct Mine(CudaResource);
    impl MemoryResource for Mine {
        fn allocate(&self, bytes: usize, stream: &Stream) -> Result<u64> {
            self.0.allocate(bytes, stream)
        }
        unsafe fn deallocate(&self, ptr: u64, bytes: usize, stream: &Stream) -> Result<()> {
            self.0.deallocate(ptr, bytes, stream)
        }
        fn device(&self) -> &Device {
            self.0.device()
        }
        fn name(&self) -> String {
            "mine".into()
        }
    }
    let device = Device::simulated(1 << 30);
    let (a, b) = (
        Mine(CudaResource::new(&device)),
        Mine(CudaResource::new(&device)),
    );
    assert!(equal(&a, &a));
    assert!(!equal(&a, &b));
    assert!(
        !equal(&a, &a.0),
        "the default knows nothing wider than the object"
    );
    assert_eq!(a.identity(), ResourceIdentity::of_object(&a));
}
