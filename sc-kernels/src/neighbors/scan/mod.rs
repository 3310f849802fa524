//! The kNN scan both searches share: per query, the `k + 8` best candidates by
//! `|r|^2 - 2 q.r`, then their distances recomputed exactly in f64. On the host by blocks of
//! matrix products ([`host`]), on the device by the f32 tile scan ([`device`]) or on tensor
//! cores with a proven bound ([`tensor`]).

pub(crate) mod device;
pub(crate) mod host;
pub mod tensor;
