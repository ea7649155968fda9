//! `fairgpu-guest`: fairgpu's tools for the inside of a guest.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use fairgpu_guest_tools::{collect, InfoOptions};

#[derive(Parser, Debug)]
#[command(name = "fairgpu-guest", version, about = "fairgpu inside a guest")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Finds the ivshmem device, shows the region, its channels and the
    /// wake path, and measures no-op round trips.
    Info {
        /// The region (a shm file, or a device's sysfs resource2); default:
        /// FAIRGPU_REGION, else the first ivshmem device.
        #[arg(long)]
        region: Option<PathBuf>,
        /// No-op round trips to measure (0: none).
        #[arg(long, default_value_t = 1000)]
        count: u32,
        /// Where PCI devices are listed.
        #[arg(long, default_value = fairgpu_frontend::pci::SYSFS_PCI_DEVICES)]
        sysfs: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fairgpu-guest: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Exit status: 0 all well, 1 no region, 2 the region is there but the
/// round trips could not be measured.
fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Info {
            region,
            count,
            sysfs,
            json,
        } => {
            let report = collect(&InfoOptions {
                region,
                sysfs_pci: sysfs,
                count,
            })?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", report.render());
            }
            Ok(match &report.region {
                None => ExitCode::from(1),
                Some(r) if r.latency.is_none() && count > 0 => ExitCode::from(2),
                Some(_) => ExitCode::SUCCESS,
            })
        }
    }
}
