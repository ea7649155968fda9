//! The `fairgpu` binary: parse arguments, set up logging, run a command.

mod cli;
mod commands;

use clap::Parser;
use cli::Cli;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_new(&cli.log)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    match commands::run_with_log(cli.command, &cli.log) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fairgpu: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
