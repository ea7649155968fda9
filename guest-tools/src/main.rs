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
    /// Runs NVIDIA's nvcc, making PTX for the virtual architecture where
    /// the arguments ask for a cubin of a real one (for programs that
    /// compile kernels at run time, such as PyCUDA, on a device that
    /// executes PTX only). Also what a link to this program named `nvcc`
    /// does. NVIDIA's nvcc: FAIRGPU_REAL_NVCC, else the next on PATH.
    Nvcc {
        /// nvcc's arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

fn main() -> ExitCode {
    // Run through a link named `nvcc`: the compiler wrapper, no subcommand.
    let mut argv = std::env::args();
    let called = argv.next().unwrap_or_default();
    if std::path::Path::new(&called).file_name() == Some("nvcc".as_ref()) {
        return nvcc(&argv.collect::<Vec<_>>());
    }
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
        Command::Nvcc { args } => Ok(nvcc(&args)),
    }
}

/// Replaces this process with NVIDIA's nvcc, given `args` rewritten
/// ([`fairgpu_guest_tools::nvcc`]); returns only on failure (127).
fn nvcc(args: &[String]) -> ExitCode {
    use fairgpu_guest_tools::nvcc::{find_real, rewrite, REAL_NVCC_ENV};
    use std::os::unix::process::CommandExt;

    let me = std::env::current_exe().unwrap_or_default();
    let Some(real) = find_real(
        std::env::var_os(REAL_NVCC_ENV),
        std::env::var_os("PATH"),
        &me,
    ) else {
        eprintln!(
            "fairgpu-guest nvcc: NVIDIA's nvcc not found: no other nvcc on PATH; set {REAL_NVCC_ENV}"
        );
        return ExitCode::from(127);
    };
    let e = std::process::Command::new(&real).args(rewrite(args)).exec();
    eprintln!("fairgpu-guest nvcc: running {}: {e}", real.display());
    ExitCode::from(127)
}
