//! `redlease`: distributed locks on Redis from the command line.
//!
//! Subcommands:
//! - `run`: run a command while holding a lock (the distributed `flock(1)`), several locks,
//!   or the leadership of an election;
//! - `leader`: who leads an election, and (`--watch`) each change;
//! - `status`, `list`, `release --force`: what operators see of locks, and the big hammer;
//! - `demo`: the flash-sale coupon race across real processes, without and with a lock;
//! - `bench`: the benchmark scenarios of `BENCHMARKS.md`.
//!
//! Exit codes are documented in [`exit`] and in `--help`. Errors are printed on stderr as
//! `redlease: <error and its causes>` on one line. Logs (tracing) go to stderr, filtered
//! by `RUST_LOG` (default `error`: the commands say what matters themselves).

use std::process::ExitCode;

use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand};

#[cfg(feature = "bench")]
mod bench;
mod connect;
#[cfg(feature = "local")]
mod demo;
mod environment;
mod exit;
mod heartbeat;
mod latch;
mod leader;
mod name;
mod operator;
mod output;
mod proclaim;
mod run;
mod signals;
mod supervise;

/// Distributed locks on Redis, with fencing tokens, renewal and fair hand-off.
#[derive(Debug, Parser)]
#[command(
    name = "redlease",
    version,
    long_about = ABOUT,
    after_help = exit::TABLE,
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,

    /// Global: given before or after the subcommand, as redis-cli's and git's options.
    #[command(flatten)]
    redis: connect::RedisArgs,
}

const ABOUT: &str = "\
Distributed locks on Redis, with fencing tokens, renewal and fair hand-off.

A lock NAME is the Redis key redlease:NAME holding its holder's random token, with a lease
(TTL) that its holder renews and that frees a crashed holder's lock by itself. Every
acquisition gets a fencing token larger than all earlier ones. Beside the lock (a mutex):
semaphores (run --permits N), read-write locks (run --read / --write), several locks at
once (run --key A --key B), leader elections (run --elect NAME, leader --elect NAME,
proclaim NOTE) and count-down latches (latch count / wait / expect / barrier).
Every command names a lock with --key NAME and an election with --elect NAME.

Examples:
  redlease run --key nightly-report --no-wait -- ./report.sh
  redlease run --key account:7 --key account:3 -- ./transfer.sh 7 3 100
  redlease run --elect scheduler -- ./scheduler
  redlease leader --elect scheduler --watch
  redlease latch count --key import -- ./import-part.sh 3
  redlease latch wait --key import --wait 1h
  redlease status --key nightly-report
  redlease list
  redlease release --force --key nightly-report
  redlease demo";

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a command while holding a lock (a distributed flock), several locks, or the
    /// leadership of an election
    #[command(long_about = run::LONG_ABOUT, after_help = exit::SEE_TABLE)]
    Run(run::RunArgs),

    /// Show who leads an election (its note, term and time left); --watch follows changes
    #[command(long_about = leader::LONG_ABOUT, after_help = exit::SEE_TABLE)]
    Leader(leader::LeaderArgs),

    /// Change the note of the leader running this command (from the command of run
    /// --elect)
    #[command(long_about = proclaim::LONG_ABOUT, after_help = exit::SEE_TABLE)]
    Proclaim(proclaim::ProclaimArgs),

    /// Count-down latches and barriers: hold a count while a command runs, wait for the
    /// latch to open, preset arrivals
    #[command(long_about = latch::LONG_ABOUT, after_help = exit::SEE_TABLE)]
    Latch(latch::LatchArgs),

    /// Show who holds a lock, semaphore or read-write lock, its time left and its fencing
    /// counter
    #[command(long_about = operator::STATUS_ABOUT, after_help = exit::SEE_TABLE)]
    Status(operator::StatusArgs),

    /// List held locks, semaphores and read-write locks (SCAN, never KEYS)
    #[command(long_about = operator::LIST_ABOUT, after_help = exit::SEE_TABLE)]
    List(operator::ListArgs),

    /// Remove a lock, semaphore's permits or read-write lock's holds whoever holds them
    /// (operators; needs --force)
    #[command(long_about = operator::RELEASE_ABOUT, after_help = exit::SEE_TABLE)]
    Release(operator::ReleaseArgs),

    #[cfg(feature = "local")]
    /// The flash-sale coupon race across real processes: without a lock, with redlease,
    /// and with a crashed and a paused holder
    #[command(long_about = demo::LONG_ABOUT, after_help = exit::SEE_TABLE)]
    Demo(demo::DemoArgs),

    #[cfg(feature = "local")]
    /// One worker process of `redlease demo` (internal)
    #[command(hide = true)]
    DemoWorker(demo::WorkerArgs),

    /// Supervisor between `redlease run` and its command (internal)
    #[command(name = supervise::SUBCOMMAND, hide = true)]
    Supervise(supervise::SuperviseArgs),

    #[cfg(feature = "bench")]
    /// Measure lock throughput, hand-off latency and fairness against real Redis
    #[command(long_about = bench::LONG_ABOUT, after_help = exit::SEE_TABLE)]
    Bench(bench::BenchArgs),

    #[cfg(feature = "bench")]
    /// Client instructions per uncontended acquire + release under callgrind (internal;
    /// `make callgrind`)
    #[command(hide = true)]
    BenchCallgrind(bench::callgrind::CallgrindArgs),

    #[cfg(feature = "bench")]
    /// One loop measured by `bench-callgrind`, run under valgrind (internal)
    #[command(hide = true)]
    BenchCallgrindLoop(bench::callgrind::LoopArgs),

    #[cfg(feature = "bench")]
    /// One worker process of `redlease bench --processes` and its scaling scenario (internal)
    #[command(hide = true)]
    BenchWorker(bench::WorkerArgs),
}

impl Command {
    /// Gives the subcommand the connection options, wherever they were given.
    fn connect_with(&mut self, redis: connect::RedisArgs) {
        match self {
            Self::Run(args) => args.redis = redis,
            Self::Leader(args) => args.redis = redis,
            Self::Latch(args) => args.command.connect_with(redis),
            Self::Status(args) => args.redis = redis,
            Self::List(args) => args.redis = redis,
            Self::Release(args) => args.redis = redis,
            #[cfg(feature = "local")]
            Self::Demo(args) => args.redis = redis,
            #[cfg(feature = "local")]
            Self::DemoWorker(args) => args.redis = redis,
            #[cfg(feature = "bench")]
            Self::Bench(args) => args.redis = redis,
            #[cfg(feature = "bench")]
            Self::BenchWorker(args) => args.redis = redis,
            #[cfg(feature = "bench")]
            Self::BenchCallgrind(_) | Self::BenchCallgrindLoop(_) => {}
            Self::Supervise(_) | Self::Proclaim(_) => {}
        }
    }
}

fn main() -> ExitCode {
    let mut cli = match Cli::command()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m))
    {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    cli.command.connect_with(cli.redis.clone());
    // `latch count` is `run` holding a latch's count: its checks, exit codes and all.
    if let Command::Latch(latch::LatchArgs {
        command: latch::LatchCommand::Count(args),
    }) = cli.command
    {
        cli.command = Command::Run(args.into_run());
    }
    if let Command::Run(args) = &cli.command
        && let Err(message) = args.check()
    {
        let e = Cli::command().error(clap::error::ErrorKind::ArgumentConflict, message);
        return usage_error(&e);
    }
    // `run -E N`: N also for an error that means Redis could not be reached (69).
    let unavailable = match &cli.command {
        Command::Run(args) => args.conflict(exit::UNAVAILABLE),
        _ => exit::UNAVAILABLE,
    };
    init_logging();
    #[cfg(feature = "metrics")]
    if matches!(
        cli.command,
        Command::Bench(_) | Command::BenchCallgrindLoop(_) | Command::BenchWorker(_)
    ) {
        bench::record_metrics();
    }
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("redlease: {}", exit::one_line(&err));
            match exit::code_of(&err) {
                exit::UNAVAILABLE => exit::code(unavailable),
                code => exit::code(code),
            }
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Run(args) => runtime()?.block_on(run::run(args)),
        Command::Leader(args) => runtime()?.block_on(leader::leader(args)),
        Command::Proclaim(args) => runtime()?.block_on(proclaim::proclaim(args)),
        Command::Latch(args) => runtime()?.block_on(latch::latch(args.command)),
        Command::Status(args) => runtime()?.block_on(operator::status(args)),
        Command::List(args) => runtime()?.block_on(operator::list(args)),
        Command::Release(args) => runtime()?.block_on(operator::release(args)),
        #[cfg(feature = "local")]
        Command::Demo(args) => runtime()?.block_on(demo::run(args)),
        #[cfg(feature = "local")]
        Command::DemoWorker(args) => runtime()?.block_on(demo::worker(args)),
        #[cfg(feature = "bench")]
        Command::Bench(args) => args.runtime.build()?.block_on(bench::run(args)),
        // Blocking: it runs valgrind four times and reads its files.
        #[cfg(feature = "bench")]
        Command::BenchCallgrind(args) => bench::callgrind::main(&args),
        // Its own current-thread runtime, so that instruction counts are repeatable.
        #[cfg(feature = "bench")]
        Command::BenchCallgrindLoop(args) => bench::callgrind::run_loop(&args),
        #[cfg(feature = "bench")]
        Command::BenchWorker(args) => runtime()?.block_on(bench::worker(args)),
        // Its own small runtime: it only waits for its child and a few signals.
        Command::Supervise(args) => supervise::main(args),
    }
}

/// The runtime of the commands that talk to Redis. `block_on` runs the command itself on
/// the main thread (`run` relies on it: see `run::spawn`).
fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
}

/// Help and version go to stdout as clap prints them; a usage error becomes one line on
/// stderr and exit code 2.
fn usage_error(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit();
    }
    let rendered = e.render().to_string();
    let message: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty()
                && !l.starts_with("Usage:")
                && !l.starts_with("tip:")
                && !l.starts_with("For more information")
        })
        .collect();
    let message = message.join(" ");
    let message = message.strip_prefix("error: ").unwrap_or(&message);
    eprintln!("redlease: {message}; see --help");
    exit::code(exit::ERROR)
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}
