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
//! The callgrind output files stay in a temporary directory (printed) for
//! `callgrind_annotate`; the driver prints the top 10 functions of the longer redlease run.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use anyhow::{Context as _, bail};
use redis::aio::ConnectionManager;

use super::bare::BareLock;

/// Arguments of the driver, `redlease bench-callgrind`.
#[derive(Debug, clap::Args)]
pub(crate) struct CallgrindArgs {
    /// Pairs of the shorter run of each side
    #[arg(long, value_name = "N", default_value_t = 2000)]
    short: u64,
    /// Pairs of the longer run of each side
    #[arg(long, value_name = "N", default_value_t = 4000)]
    long: u64,
}

/// Arguments of one measured loop, `redlease bench-callgrind-loop`.
#[derive(Debug, clap::Args)]
pub(crate) struct LoopArgs {
    /// The Redis to use
    #[arg(long, value_name = "URL")]
    redis: String,
    /// Which loop to run
    #[arg(long, value_enum)]
    side: LoopSide,
    /// Acquire + release pairs
    #[arg(long, value_name = "N")]
    ops: u64,
}

/// The two loops compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LoopSide {
    /// `lock.acquire()` + `guard.release()`
    Redlease,
    /// `SET key token NX PX 30000` + `EVALSHA` compare-and-delete
    Bare,
}

impl LoopSide {
    fn name(self) -> &'static str {
        match self {
            Self::Redlease => "redlease",
            Self::Bare => "bare",
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
    let server = redlease_local::RedisServer::start().context("starting a private redis-server")?;
    let dir = std::env::temp_dir().join(format!("redlease-callgrind-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let exe = std::env::current_exe().context("finding the redlease binary")?;

    let mut out = String::new();
    writeln!(
        out,
        "client instructions per uncontended acquire + release ({version}, callgrind Ir, all \
         threads of the client; the private redis-server on port {} is not traced)",
        server.port()
    )?;
    writeln!(
        out,
        "  side          Ir({} pairs)    Ir({} pairs)    Ir per pair",
        args.short, args.long
    )?;
    let mut per_pair = Vec::new();
    for side in [LoopSide::Redlease, LoopSide::Bare] {
        let mut totals = Vec::new();
        for n in [args.short, args.long] {
            let file = dir.join(format!("callgrind.{}.{n}.out", side.name()));
            totals.push(measure(&exe, &server.url(), side, n, &file)?);
        }
        let (short, long) = (totals[0], totals[1]);
        #[allow(clippy::cast_precision_loss)] // counts far below 2^52
        let pair = (long.saturating_sub(short)) as f64 / (args.long - args.short) as f64;
        per_pair.push(pair);
        writeln!(
            out,
            "  {:<10} {short:>15} {long:>15} {pair:>14.0}",
            side.name()
        )?;
    }
    if let [ours, bare] = per_pair[..] {
        writeln!(
            out,
            "  redlease / bare: {:.2}x the instructions per pair ({:+.0} per pair)",
            if bare > 0.0 { ours / bare } else { 0.0 },
            ours - bare
        )?;
    }
    writeln!(out, "  callgrind output files: {}", dir.display())?;
    let longest = dir.join(format!("callgrind.redlease.{}.out", args.long));
    writeln!(
        out,
        "\ntop 10 functions by own instructions, redlease run of {} pairs (callgrind_annotate):",
        args.long
    )?;
    out.push_str(&top_functions(&longest, 10));
    std::io::stdout()
        .lock()
        .write_all(out.as_bytes())
        .context("writing the report")?;
    drop(server);
    Ok(ExitCode::SUCCESS)
}

/// Runs one loop under callgrind and returns its total instructions.
fn measure(exe: &Path, url: &str, side: LoopSide, ops: u64, file: &PathBuf) -> anyhow::Result<u64> {
    let status = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", file.display()))
        .arg("--quiet")
        .arg(exe)
        .args([
            "bench-callgrind-loop",
            "--redis",
            url,
            "--side",
            side.name(),
        ])
        .arg("--ops")
        .arg(ops.to_string())
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
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let failed = match args.side {
            LoopSide::Redlease => {
                let client = redlease::Client::connect(&args.redis)
                    .await
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
            LoopSide::Bare => {
                let redis = redis::Client::open(args.redis.as_str()).context("opening the URL")?;
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
