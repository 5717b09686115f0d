//! `smartmig`: the command line of the simulator, trainer, evaluator, doctor and status.

use std::process::ExitCode;

use clap::Parser;
use smartmig::cli::{self, Cli};

fn main() -> ExitCode {
    // Before any thread exists: the environment is still safe to change.
    smartmig::policy::runtime::disable_telemetry();
    // Output into a closed pipe (`smartmig mig layouts | head -1`) ends the program quietly,
    // as it does any Unix filter, instead of making println! panic. Rust starts programs
    // with SIGPIPE ignored; this restores the default before anything is written.
    // SAFETY: no other thread exists yet; SIG_DFL is a valid disposition.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let args = Cli::parse();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(args.log_level()))
        .format_timestamp(None)
        .init();
    match cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line: the error and its causes, each once.
            let message = e.message();
            if !message.is_empty() {
                eprintln!("smartmig: {message}");
            }
            ExitCode::from(e.code())
        }
    }
}
