//! `redlease`: distributed locks on Redis from the command line.
//!
//! Subcommands:
//! - `bench`: the benchmark scenarios of `BENCHMARKS.md` (uncontended and contended, each
//!   against a bare redis-rs loop measured in the same run), printed as a table or as JSON.
//!
//! Exit codes: 0 on success, 1 when a benchmark ran but one of its correctness checks
//! failed, 2 on any other error (printed on stderr as `redlease: <error and its causes>`).
//!
//! Logs (tracing) go to stderr, filtered by `RUST_LOG` (default `warn`).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;

/// Exit code of an error that stopped the command.
const EXIT_ERROR: u8 = 2;

const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  the benchmark ran, but a correctness check failed (see the report)
  2  error: Redis unreachable, redis-server could not be started, bad arguments...

Logs go to stderr; set RUST_LOG (e.g. RUST_LOG=redlease=debug) to see more.";

/// Distributed locks on Redis.
#[derive(Debug, Parser)]
#[command(name = "redlease", version, about, after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Measure lock throughput, hand-off latency and fairness against real Redis
    #[command(long_about = bench::LONG_ABOUT, after_help = EXIT_CODES)]
    Bench(bench::BenchArgs),
}

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(err) => {
            eprintln!("redlease: {err:#}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

fn run() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    init_logging();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match cli.command {
        Command::Bench(args) => runtime.block_on(bench::run(args)),
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
