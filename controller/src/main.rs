//! smartmigd: the MIG repartitioning daemon (central and node roles).

fn main() {
    eprintln!("smartmigd: the controller daemon is not built yet (see the project's issues)");
    std::process::exit(2);
}
