# The tardiness lower bound (src/bounds/tardiness.rs) uses HiGHS through the `highs`
# crate, which builds HiGHS from source with CMake.
need+=(cmake)
