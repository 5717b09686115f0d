//! `smartmig`: the simulator, trainer and evaluator command line.

use std::process::ExitCode;

use clap::Parser;
use smartmig::cli::{self, Cli};

fn main() -> ExitCode {
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
