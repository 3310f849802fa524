//! The space of the files being written: staged under a temporary name until whole
//! ([`staged_file`]), their large datasets copied in by several threads ([`parallel_fill`]), their
//! pages reserved ahead ([`reserve_ahead`]), and the file system calls those share ([`system`]).

pub(crate) mod parallel_fill;
pub(crate) mod reserve_ahead;
pub(crate) mod staged_file;
pub(crate) mod system;
