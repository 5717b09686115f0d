//! job_submit_smartmig: the Slurm job_submit plugin (FFI shell over `smartmig_core`).
