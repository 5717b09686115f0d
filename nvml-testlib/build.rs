//! Links the cdylib with `-z nodelete`: nvml-wrapper dlcloses the library when an `Nvml`
//! is dropped, while the library's own Rust runtime may have left thread-local destructors
//! on the caller's threads; unmapping it then would crash those threads when they exit.
//! (The real libnvidia-ml.so.1 has no such state.)

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
}
