//! `make callgrind`: client instructions per uncontended acquire + release, counted by
//! `valgrind --tool=callgrind`, for redlease and for the bare `SET NX PX` + `EVALSHA` loop.
//!
//! Two hidden subcommands:
//! - `redlease bench-callgrind` (the driver, run natively) starts a private redis-server,
//!   then runs this same binary under `valgrind --tool=callgrind` four times: the loop
//!   below for each side, with `--short` and with `--long` pairs. Valgrind is started
//!   without `--trace-children`, and Redis is the driver's child, not the loop's, so only
//!   the client's instructions are counted. Each run's total `Ir` (instructions executed,
//!   all threads) includes start-up, connecting and loading scripts; the difference of the
//!   two runs of one side divided by the difference of their pairs is the cost of one pair
//!   alone: (Ir(long) - Ir(short)) / (long - short).
//! - `redlease bench-callgrind-loop` (under valgrind) connects and does N uncontended
//!   acquire + release pairs on a current-thread tokio runtime (one thread: no work
//!   stealing, so the count does not depend on how two threads raced), checking each.
//!
//! With `--contended`, the two loops are the contended scenario's instead (`redlease bench
//! --only contended`, one Client or one connection shared by `--workers` tasks on one key,
//! each section a `GET` + `SET` of a counter): redlease's `acquire()` / `release()` against
//! the busy-retry floor, and the unit is one critical section. The driver also reads `INFO
//! commandstats` around each run, so that the commands per section come with the counts.
//!
//! The callgrind output files stay in a temporary directory (printed) for
//! `callgrind_annotate`; the driver prints the top 10 functions of the longer redlease run.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context as _, bail};
use redis::aio::ConnectionManager;

use super::bare::BareLock;
use super::flavor::Flavor;
use super::section::{LOCK_WAIT, Locker, critical_section};

/// Arguments of the driver, `redlease bench-callgrind`.
#[derive(Debug, clap::Args)]
pub(crate) struct CallgrindArgs {
    /// Pairs of the shorter run of each side
    #[arg(long, value_name = "N", default_value_t = 2000)]
    short: u64,
    /// Pairs of the longer run of each side
    #[arg(long, value_name = "N", default_value_t = 4000)]
    long: u64,
    /// The contended loops (`--workers` tasks on one key, one Client) instead of the
    /// uncontended ones; N counts critical sections
    #[arg(long)]
    contended: bool,
    /// Tasks of the contended loops
    #[arg(long, value_name = "N", default_value_t = 8)]
    workers: usize,
    /// The quorum loops instead of the single server's: redlease's quorum client against
    /// the bare parallel Redlock, over 5 private redis-servers; commands are summed over
    /// the nodes
    #[arg(long, conflicts_with = "contended")]
    quorum: bool,
    /// The runtime of the measured loops
    #[arg(long, value_enum, value_name = "FLAVOR", default_value_t = Flavor::CurrentThread)]
    runtime: Flavor,
}

/// Arguments of one measured loop, `redlease bench-callgrind-loop`.
#[derive(Debug, clap::Args)]
pub(crate) struct LoopArgs {
    /// The Redis to use (not `--redis`, which is the global connection option); several,
    /// comma-separated, for a quorum
    #[arg(long, value_name = "URL")]
    url: String,
    /// Which loop to run
    #[arg(long, value_enum)]
    side: LoopSide,
    /// Acquire + release pairs (critical sections of the contended loops)
    #[arg(long, value_name = "N")]
    ops: u64,
    /// Tasks of the contended loops
    #[arg(long, value_name = "N", default_value_t = 8)]
    workers: usize,
    /// The runtime the loop runs on
    #[arg(long, value_enum, value_name = "FLAVOR", default_value_t = Flavor::CurrentThread)]
    runtime: Flavor,
}

/// The two loops compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LoopSide {
    /// `lock.acquire()` + `guard.release()`
    Redlease,
    /// `SET key token NX PX 30000` + `EVALSHA` compare-and-delete
    Bare,
    /// `--workers` tasks sharing one Client, each looping `lock.acquire()`, `GET` + `SET`
    /// of a counter, `guard.release()`
    Contended,
    /// The same with the busy-retry floor: `SET NX PX` retried after a yield, compare-and-
    /// delete release, one shared connection
    ContendedBare,
}

impl LoopSide {
    fn name(self) -> &'static str {
        match self {
            Self::Redlease => "redlease",
            Self::Bare => "bare",
            Self::Contended => "contended",
            Self::ContendedBare => "contended-bare",
        }
    }
}

/// The driver: measures both loops and prints instructions per pair.
pub(crate) fn main(args: &CallgrindArgs) -> anyhow::Result<ExitCode> {
    if args.long <= args.short {
        bail!(
            "--long {} must be larger than --short {}: the cost per pair is the difference \
             of the two runs",
            args.long,
            args.short
        );
    }
    let version = Command::new("valgrind")
        .arg("--version")
        .output()
        .context("running valgrind; install it (make callgrind does: apt-get install valgrind)")?;
    let version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
    let (nodes, single) = start_servers(args.quorum)?;
    let servers: Vec<&redlease_local::RedisServer> = nodes
        .iter()
        .flat_map(redlease_local::Nodes::servers)
        .chain(single.iter())
        .collect();
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let url = urls.join(",");
    let dir = std::env::temp_dir().join(format!("redlease-callgrind-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let exe = std::env::current_exe().context("finding the redlease binary")?;

    let mut out = String::new();
    let (sides, unit, what) = loops(args, urls.len());
    let ports: Vec<String> = servers.iter().map(|s| s.port().to_string()).collect();
    let untraced = match ports.as_slice() {
        [port] => format!("the private redis-server on port {port} is not traced"),
        ports => format!(
            "the private redis-servers on ports {} are not traced",
            ports.join(", ")
        ),
    };
    writeln!(
        out,
        "client instructions per {what} ({version}, callgrind Ir, all threads of the client, \
         {:?} runtime; {untraced})",
        args.runtime,
    )?;
    writeln!(
        out,
        "  side              Ir({} {unit}s)    Ir({} {unit}s)    Ir per {unit}   commands per {unit}",
        args.short, args.long
    )?;
    let mut per_unit = Vec::new();
    let mut commands = Vec::new();
    let span = args.long - args.short;
    for side in sides {
        let mut totals = Vec::new();
        let mut stats = Vec::new();
        for n in [args.short, args.long] {
            let file = dir.join(format!("callgrind.{}.{n}.out", side.name()));
            let before = command_calls(&urls)?;
            totals.push(measure(&exe, &url, side, n, args, &file)?);
            let after = command_calls(&urls)?;
            stats.push(before.delta(&after));
        }
        let (short, long) = (totals[0], totals[1]);
        #[allow(clippy::cast_precision_loss)] // counts far below 2^52
        let unit_ir = (long.saturating_sub(short)) as f64 / span as f64;
        per_unit.push(unit_ir);
        let total = stats[1].total.saturating_sub(stats[0].total);
        writeln!(
            out,
            "  {:<14} {short:>17} {long:>17} {unit_ir:>14.0} {:>16.2}",
            side.name(),
            super::stats::ratio(total, span)
        )?;
        commands.push((side, stats));
    }
    if let [ours, bare] = per_unit[..] {
        writeln!(
            out,
            "  {} / {}: {:.2}x the instructions per {unit} ({:+.0} per {unit})",
            sides[0].name(),
            sides[1].name(),
            if bare > 0.0 { ours / bare } else { 0.0 },
            ours - bare
        )?;
    }
    for (side, stats) in &commands {
        write_commands(&mut out, side.name(), stats, span, unit)?;
    }
    writeln!(out, "  callgrind output files: {}", dir.display())?;
    let longest = dir.join(format!("callgrind.{}.{}.out", sides[0].name(), args.long));
    writeln!(
        out,
        "\ntop 10 functions by own instructions, {} run of {} {unit}s (callgrind_annotate):",
        sides[0].name(),
        args.long
    )?;
    out.push_str(&top_functions(&longest, 10));
    std::io::stdout()
        .lock()
        .write_all(out.as_bytes())
        .context("writing the report")?;
    drop(servers);
    drop((nodes, single));
    Ok(ExitCode::SUCCESS)
}

/// The private servers: 5 nodes for `quorum`, else one.
fn start_servers(
    quorum: bool,
) -> anyhow::Result<(
    Option<redlease_local::Nodes>,
    Option<redlease_local::RedisServer>,
)> {
    Ok(if quorum {
        let nodes = redlease_local::Nodes::start(super::quorum::NODES)
            .context("starting the quorum's private redis-servers")?;
        (Some(nodes), None)
    } else {
        let server =
            redlease_local::RedisServer::start().context("starting a private redis-server")?;
        (None, Some(server))
    })
}

/// The two loops measured, what a unit of them is, and their description.
fn loops(args: &CallgrindArgs, nodes: usize) -> ([LoopSide; 2], &'static str, String) {
    if args.contended {
        (
            [LoopSide::Contended, LoopSide::ContendedBare],
            "section",
            format!(
                "contended critical section ({} tasks on one key, one Client / connection)",
                args.workers
            ),
        )
    } else if args.quorum {
        (
            [LoopSide::Redlease, LoopSide::Bare],
            "pair",
            format!("uncontended acquire + release on a quorum of {nodes} (commands: all nodes')"),
        )
    } else {
        (
            [LoopSide::Redlease, LoopSide::Bare],
            "pair",
            "uncontended acquire + release".to_owned(),
        )
    }
}

/// One line: the calls per unit of each command that `side`'s longer run made more than
/// its shorter one (`stats`: the two runs' deltas).
fn write_commands(
    out: &mut String,
    side: &str,
    stats: &[super::stats::CommandDelta],
    span: u64,
    unit: &str,
) -> std::fmt::Result {
    let [short, long] = stats else {
        return Ok(());
    };
    write!(out, "  {side} commands per {unit}:")?;
    for (name, &calls) in &long.by_command {
        let calls = calls.saturating_sub(short.by_command.get(name).copied().unwrap_or(0));
        if calls > 0 {
            write!(out, " {name} {:.2}", super::stats::ratio(calls, span))?;
        }
    }
    writeln!(out)
}

/// `INFO commandstats` of the private servers, summed, read natively (not traced).
fn command_calls(urls: &[String]) -> anyhow::Result<super::stats::CommandStats> {
    let mut sum = super::stats::CommandStats::default();
    for url in urls {
        let mut conn = redis::Client::open(url.as_str())
            .and_then(|c| c.get_connection())
            .context("connecting to a private redis-server for INFO commandstats")?;
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut conn)
            .context("INFO commandstats")?;
        sum.add(super::stats::CommandStats::parse(&info));
    }
    Ok(sum)
}

/// Runs one loop under callgrind and returns its total instructions.
fn measure(
    exe: &Path,
    url: &str,
    side: LoopSide,
    ops: u64,
    args: &CallgrindArgs,
    file: &PathBuf,
) -> anyhow::Result<u64> {
    let status = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", file.display()))
        .arg("--quiet")
        .arg(exe)
        .args(["bench-callgrind-loop", "--url", url, "--side", side.name()])
        .arg("--ops")
        .arg(ops.to_string())
        .arg("--workers")
        .arg(args.workers.to_string())
        .arg("--runtime")
        .arg(match args.runtime {
            Flavor::CurrentThread => "current-thread",
            Flavor::MultiThread => "multi-thread",
        })
        .stdin(Stdio::null())
        .status()
        .context("running valgrind --tool=callgrind")?;
    if !status.success() {
        bail!(
            "the {} loop of {ops} pairs under callgrind failed ({status}); see its messages above",
            side.name()
        );
    }
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("reading callgrind's output {}", file.display()))?;
    text.lines()
        .find_map(|l| {
            l.strip_prefix("summary:")
                .or_else(|| l.strip_prefix("totals:"))
        })
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .with_context(|| format!("no `summary:` line in {}", file.display()))
}

/// The `n` functions with the most own instructions, as `callgrind_annotate` lists them.
fn top_functions(file: &Path, n: usize) -> String {
    let output = Command::new("callgrind_annotate")
        .arg("--inclusive=no")
        .arg(file)
        .stderr(Stdio::null())
        .output();
    let Ok(output) = output.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()) else {
        return "  (callgrind_annotate could not be run)\n".to_owned();
    };
    let mut lines = output.lines().skip_while(|l| !l.contains("file:function"));
    let mut text = String::new();
    if let Some(header) = lines.next() {
        text.push_str(header);
        text.push('\n');
    }
    for line in lines
        .filter(|l| !l.trim().is_empty() && !l.starts_with("---"))
        .take(n)
    {
        // Function names of generic code can be very long; keep the table readable.
        let line: String = line.chars().take(160).collect();
        text.push_str(&line);
        text.push('\n');
    }
    text
}

/// One measured loop (under valgrind): `ops` acquire + release pairs. Exit code 1 when an
/// acquire failed or a release did not release.
pub(crate) fn run_loop(args: &LoopArgs) -> anyhow::Result<ExitCode> {
    let runtime = args.runtime.build()?;
    runtime.block_on(async {
        let urls: Vec<&str> = args.url.split(',').collect();
        let failed = match args.side {
            LoopSide::Redlease => {
                let client = if urls.len() > 1 {
                    redlease::Client::quorum(&urls).await
                } else {
                    redlease::Client::connect(&args.url).await
                }
                .context("connecting to Redis")?;
                let lock = client.lock(format!("bench-callgrind-{}", std::process::id()));
                let mut failed = 0u64;
                for _ in 0..args.ops {
                    match lock.acquire().await {
                        Ok(guard) => failed += u64::from(guard.release().await.is_err()),
                        Err(_) => failed += 1,
                    }
                }
                client
                    .shutdown()
                    .await
                    .context("shutting the client down")?;
                failed
            }
            LoopSide::Bare if urls.len() > 1 => {
                let urls: Vec<String> = urls.iter().map(|u| (*u).to_owned()).collect();
                let mut redlock = super::quorum::BareRedlock::new(
                    super::quorum::connect(&urls).await?,
                    format!("redlease-bench:callgrind:{}", std::process::id()),
                );
                let mut checks = super::stats::LoopChecks::default();
                for _ in 0..args.ops {
                    super::looped::Bare::pair(&mut redlock, &mut checks).await;
                }
                checks.acquires_failed + checks.releases_failed
            }
            LoopSide::Bare => {
                let redis = redis::Client::open(args.url.as_str()).context("opening the URL")?;
                let mut conn = ConnectionManager::new(redis)
                    .await
                    .context("connecting to Redis")?;
                let lock =
                    BareLock::new(format!("redlease-bench:callgrind:{}", std::process::id()));
                let mut failed = 0u64;
                for seq in 0..args.ops {
                    let token = super::bare::bare_token(0, seq);
                    let ok = lock.try_acquire(&mut conn, &token).await?
                        && lock.release(&mut conn, &token).await?;
                    failed += u64::from(!ok);
                }
                failed
            }
            LoopSide::Contended | LoopSide::ContendedBare => contended_loop(args).await?,
        };
        if failed == 0 {
            Ok(ExitCode::SUCCESS)
        } else {
            eprintln!(
                "redlease: {failed} of {} {} pairs failed to acquire or release",
                args.ops,
                args.side.name()
            );
            Ok(ExitCode::from(1))
        }
    })
}

/// The contended loops: `args.workers` tasks take `args.ops` critical sections between
/// them (each task takes the next one while any is left); the number of sections that
/// failed (an acquire or release error, or a counter off at the end).
async fn contended_loop(args: &LoopArgs) -> anyhow::Result<u64> {
    let redis = redis::Client::open(args.url.as_str()).context("opening the URL")?;
    let conn = ConnectionManager::new(redis)
        .await
        .context("connecting to Redis")?;
    let id = std::process::id();
    let client = if args.side == LoopSide::Contended {
        Some(
            redlease::Client::connect(&args.url)
                .await
                .context("connecting to Redis")?,
        )
    } else {
        None
    };
    let locker = match &client {
        Some(client) => {
            Locker::Redlease(client.lock(format!("bench-callgrind-{id}")).wait(LOCK_WAIT))
        }
        None => Locker::Bare(BareLock::new(format!("redlease-bench:callgrind:{id}"))),
    };
    let counter: Arc<str> = format!("redlease-bench:callgrind:{id}:counter").into();
    let left = Arc::new(AtomicU64::new(args.ops));
    let tasks: Vec<_> = (0..args.workers)
        .map(|worker| {
            let (locker, mut conn) = (locker.clone(), conn.clone());
            let (counter, left) = (Arc::clone(&counter), Arc::clone(&left));
            tokio::spawn(async move {
                let (mut seq, mut attempts, mut failed) = (0u64, 0u64, 0u64);
                while left
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                    .is_ok()
                {
                    let Ok(held) = locker
                        .acquire(&mut conn, worker + 1, &mut seq, &mut attempts)
                        .await?
                    else {
                        failed += 1;
                        continue;
                    };
                    critical_section(&mut conn, &counter).await?;
                    failed += u64::from(locker.release(held, &mut conn).await.is_err());
                }
                anyhow::Ok((attempts, failed))
            })
        })
        .collect();
    let (mut attempts, mut failed) = (0, 0);
    for task in tasks {
        let (a, f) = task.await.context("a contended task panicked")??;
        attempts += a;
        failed += f;
    }
    let mut conn = conn;
    let count: Option<u64> = redis::cmd("GETDEL")
        .arg(&*counter)
        .query_async(&mut conn)
        .await
        .context("reading the counter")?;
    let count = count.unwrap_or(0);
    if count + failed != args.ops {
        eprintln!(
            "redlease: the counter reads {count} after {} sections",
            args.ops
        );
        failed += 1;
    }
    if args.side == LoopSide::ContendedBare {
        eprintln!(
            "busy-retry: {:.2} SET NX attempts per section",
            super::stats::ratio(attempts, args.ops)
        );
    }
    if let Some(client) = client {
        client
            .shutdown()
            .await
            .context("shutting the client down")?;
    }
    Ok(failed)
}
