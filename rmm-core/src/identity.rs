//! Which resources may free each other's memory: what [`crate::MemoryResource::is_equal`]
//! compares.

use crate::resource::MemoryKind;
use rmm_cuda::DeviceId;

/// What a resource's memory is interchangeable with (see [`crate::MemoryResource::identity`]):
/// two resources of equal identities can each free what the other allocated.
///
/// ```
/// use rmm_core::{CudaResource, Device, MemoryResource, PoolOptions, PoolResource, ResourceIdentity};
/// let device = Device::simulated(1 << 30);
/// // Memory straight from the driver: any `CudaResource` of the device frees it.
/// assert_eq!(CudaResource::new(&device).identity(), CudaResource::new(&device).identity());
/// // A pool's blocks go back to that pool only.
/// let pool = PoolResource::new(CudaResource::new(&device), PoolOptions::sized(1 << 20, None))?;
/// assert!(matches!(pool.identity(), ResourceIdentity::Object { .. }));
/// # Ok::<(), rmm_core::MemoryError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResourceIdentity {
    /// This object only (the default): its address, and its type, since an adaptor and the
    /// upstream it holds as a field may share an address.
    Object {
        /// Where the object is.
        address: usize,
        /// Its type ([`std::any::type_name`]).
        type_name: &'static str,
    },
    /// Memory of `kind` straight from the driver of `device` (each allocation its own driver
    /// allocation, freed by the matching driver call): every resource of that kind on that
    /// device frees what another allocated.
    Driver {
        /// The device whose driver allocates.
        device: DeviceId,
        /// Which allocation call (device, managed or pinned host memory).
        kind: MemoryKind,
    },
}

impl ResourceIdentity {
    /// The identity of `resource` as one object (what [`ResourceIdentity::Object`] holds).
    pub fn of_object<R: ?Sized>(resource: &R) -> Self {
        ResourceIdentity::Object {
            address: (resource as *const R).cast::<()>() as usize,
            type_name: std::any::type_name::<R>(),
        }
    }
}
