//! `redlease-chaos`: runs the fault matrix against real redis-server processes and writes
//! RELIABILITY.md; `redlease-chaos worker` (hidden) is one worker process of it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};

mod handoff;
mod heads;
mod link;
mod partition;
mod report;
mod runner;
mod scenario;
mod scenarios;
mod storm;
mod worker;

/// Prove redlease under faults: worker processes, a fencing judge, real faults.
///
/// Exit codes: 0 every promise kept; 1 a safety promise broken (or the run failed); 3
/// safety kept but the liveness target missed in a row that promises it.
#[derive(Debug, Parser)]
#[command(name = "redlease-chaos", version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,

    /// Lease of the lock in every scenario
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    ttl: Duration,

    /// Worker processes per scenario
    #[arg(long, default_value_t = 3)]
    workers: usize,

    /// Fault rounds per scenario
    #[arg(long, default_value_t = 4)]
    rounds: usize,

    /// Sections of warm-up and cool-down around the faults
    #[arg(long, default_value_t = 30)]
    sections: usize,

    /// Run only the scenarios whose name contains one of these words
    #[arg(long = "only")]
    only: Vec<String>,

    /// Write the page here (RELIABILITY.md at the repository root for `make chaos`)
    #[arg(long)]
    out: Option<PathBuf>,

    /// Write the outcomes as JSON here
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// One worker process (internal)
    #[command(hide = true)]
    Worker(worker::WorkerArgs),
}

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("redlease-chaos: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off")),
        )
        .with_writer(std::io::stderr)
        .init();
    if let Some(Command::Worker(args)) = cli.command {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        return rt.block_on(worker::worker(args));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(matrix(cli))
}

async fn matrix(cli: Cli) -> anyhow::Result<ExitCode> {
    let budget = scenarios::Budget {
        ttl: cli.ttl,
        workers: cli.workers,
        rounds: cli.rounds,
        warmup_sections: cli.sections,
    };
    let started = tokio::time::Instant::now();
    let mut outcomes = Vec::new();
    for scenario in scenarios::matrix() {
        if !cli.only.is_empty() && !cli.only.iter().any(|w| scenario.name.contains(w.as_str())) {
            continue;
        }
        eprint!("{:<55} ", scenario.name);
        let outcome = scenarios::run(scenario, budget)
            .await
            .with_context(|| format!("scenario `{}`", scenario.name))?;
        let f = &outcome.findings;
        let l = &f.liveness;
        eprintln!(
            "{:>6.1}s sections {:>4} faults {:>3} stale-acc {} stale-rej {} overlaps {} claims {} overlapping {} expired {} inside {} mutex {} backwards {} \
             stalls {} >100ms {} longest {:?} after-kill {} longest {:?} waits {} timed-out {} overruns {} worst {:?} judge-lag {:?} -> {}",
            outcome.took.as_secs_f64(),
            f.sections,
            outcome.injected,
            f.stale_accepted,
            f.stale_rejected,
            f.overlaps,
            f.claims,
            f.claim_overlaps,
            f.claims_expired,
            f.most_inside,
            f.mutex_violations,
            f.tokens_backwards,
            l.stalls,
            l.over_limit,
            l.longest,
            l.after_death,
            l.longest_after_death,
            l.waits,
            l.timed_out,
            l.overruns,
            l.worst_overrun,
            l.judge_lag,
            report::verdict(&outcome)
        );
        outcomes.push(outcome);
    }
    let took = started.elapsed();
    let table = report::table(&outcomes);
    eprintln!("\n{table}");
    if let Some(path) = &cli.out {
        let machine = machine();
        std::fs::write(path, report::page(&outcomes, budget, took, &machine))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &cli.json {
        std::fs::write(path, serde_json::to_vec_pretty(&outcomes)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let broken = outcomes.iter().filter(|o| !o.kept_promise()).count();
    if broken > 0 {
        eprintln!("redlease-chaos: {broken} scenario(s) broke what redlease promises");
        return Ok(ExitCode::from(1));
    }
    let stalled = outcomes.iter().filter(|o| !o.kept_liveness()).count();
    if stalled > 0 {
        eprintln!("redlease-chaos: {stalled} scenario(s) missed the liveness target");
        return Ok(ExitCode::from(3));
    }
    Ok(ExitCode::SUCCESS)
}

/// "N CPUs, redis-server VERSION", for the report.
fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let redis = std::process::Command::new("redis-server")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|v| {
            v.split_whitespace()
                .find_map(|w| w.strip_prefix("v=").map(str::to_owned))
        })
        .unwrap_or_else(|| "?".into());
    format!("a {cpus}-CPU machine with redis-server {redis}")
}
