//! `scpipe`: see `sc_pipeline::cli`.

/// Large host arrays on transparent huge pages (see `sc_pipeline::huge_pages`).
#[global_allocator]
static ALLOCATOR: sc_pipeline::huge_pages::HugePageAllocator =
    sc_pipeline::huge_pages::HugePageAllocator;

fn main() -> std::process::ExitCode {
    sc_pipeline::cli::main()
}
