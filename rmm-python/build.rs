// Compiles the C++ half of PyTorch's allocator entry points (csrc/torch_allocator.cpp): PyTorch
// learns of a failed allocation only through a C++ exception, which Rust cannot throw.
fn main() {
    println!("cargo:rerun-if-changed=csrc/torch_allocator.cpp");
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .file("csrc/torch_allocator.cpp")
        .compile("rmm_core_torch_allocator");
}
