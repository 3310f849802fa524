//! rmm-core (in progress)
