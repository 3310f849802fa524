//! `scpipe`: see `sc_pipeline::cli`.
fn main() -> std::process::ExitCode {
    sc_pipeline::cli::main()
}
