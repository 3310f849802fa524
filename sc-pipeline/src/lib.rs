//! Single-cell pipeline.
