//! `redlease bench`: the benchmark scenarios of `BENCHMARKS.md`, all in one run against one
//! Redis, each redlease scenario next to a bare redis-rs loop doing the same job.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};

mod bare;
pub(crate) mod callgrind;
mod contended;
mod env;
mod flavor;
mod gauges;
mod held;
mod hot;
mod link;
mod looped;
mod pairs;
#[cfg(feature = "peers")]
mod peers;
mod plot;
mod processes;
mod queued;
mod quorum;
mod render;
mod report;
mod scale;
mod scale_plot;
mod scaling;
mod section;
mod shared;
mod stats;
mod uncontended;
mod waits;
mod worker;

pub(crate) use worker::{WorkerArgs, worker};

use env::Env;
use flavor::Flavor;
use report::Report;

/// `--help` text of `redlease bench`.
pub(crate) const LONG_ABOUT: &str = "\
Measure lock throughput, hand-off latency and fairness against real Redis, each redlease
scenario against a bare redis-rs floor doing the same job in the same run.

Without --redis, a private redis-server is started on a free loopback port and stopped at
the end (REDIS_URL is ignored, so that a benchmark never hits a shared server by accident).

Method. Both sides of a comparison are set up and warmed up (a tenth of --duration,
50ms..500ms), then measured in --pairs interleaved slice pairs (default 5, at least 5):
each side runs --duration in all, cut into slices of --duration / --pairs, and the side
that goes first alternates from pair to pair (redlease, floor | floor, redlease | ...:
ABBA), so that drift of the machine's speed lands on both alike. Reported per comparison:
the ratio redlease / floor of each pair's rates, their median and min..max, and each
side's rate (median and min..max over its slices); per side, over all its slices: latency
or waits, and deterministic counts from INFO commandstats deltas taken around every slice:
Redis commands per operation (scripts' inner calls included) and client round trips per
operation. Client instructions per operation come from `make callgrind` (valgrind).

1. uncontended, redlease: one task loops lock.acquire() + guard.release() on one key;
   ops/s and the latency of each acquire + release pair.
2. uncontended, bare floor: the same with plain redis-rs on one ConnectionManager:
   SET key token NX PX 30000, then EVALSHA of a compare-and-delete script. Compared with
   scenario 1 in slice pairs. Both loops check that every acquire succeeded and every
   release released.
3. contended, redlease: --workers tasks loop acquire (wait up to 10s) -> critical section
   -> release on ONE key; once with one Client shared by all workers, once with a Client
   per worker. The critical section is a non-atomic GET + SET of a counter in Redis.
4. contended, bare busy-retry floor: the same workers retry SET NX PX (yielding between
   tries) until it succeeds, then the same section and the compare-and-delete release;
   over one shared connection (compared in slice pairs with one shared Client), and with a
   connection per worker (compared with a Client per worker).
5. semaphore: 16 tasks loop acquire -> INCR of a counter -> release on one semaphore of 4
   permits (one Client shared by all).
6. read-write lock: 16 tasks loop on one read-write lock; each section is a read (GET of
   a counter) with probability 0.9, else a write (GET + SET of the counter).
7. quorum of 5: 5 more private redis-servers (also with --redis); one task loops acquire +
   release on a redlease quorum client, compared in slice pairs with a bare parallel
   Redlock in redis-rs (a ConnectionManager per node; SET key token NX PX 30000 to all 5 at
   once, held when a majority said OK, then EVALSHA compare-and-delete on all 5 at once).
   Both check every acquire and release; commands and round trips are given per node (the
   sum over the 5 nodes divided by 5).
8. scaling (only with --only scaling; about 2 minutes): 8, 64 and 256 contenders
   (--contenders) on one key over 4 OS processes (--processes), redlease against the
   busy-retry floor in --pairs alternating slice pairs of --slice at each point; then the
   scaling targets as computed lines: throughput at the most contenders >= 0.9x at the
   fewest, longest wait <= 1.5 x contenders x mean section time, commands per section
   flat. --plot FILE draws sections/s and the longest wait against contenders (redlease
   and busy-retry) into an SVG.
9. scale (only with --only scale; about 4 minutes): (a) N locks held at once by one Client
   (--leases, default 1000,10000,50000,100000; ttl 3s, renewed): a quiet window of 3s right
   after acquiring them all (Redis commands/s and EVALSHA/s from INFO commandstats, Redis
   CPU from INFO cpu, the bench process' CPU from /proc/self/stat, its RSS, Redis used_memory per
   lease, MEMORY USAGE of one lock's keys), then a probed window of 3s (another connection
   sends PING every 2ms: p50, p99, max; PTTL of 1,000 sampled lock keys every 100ms: the
   least lease left), then the floor: the same N keys kept alive by a loop of pipelined
   PEXPIRE, one per key per ttl/3, spread over the period, for 3s (commands/s and Redis CPU,
   ours / floor). (b) W tasks of one Client queued on one held lock (--waiters, default
   10,100,1000,5000; holder ttl 5s, renewed), nothing else happening, for 5s after the
   holder alone: commands and EVALSHA per second, commands per waiter per 5s above the
   holder alone, Redis and client memory per waiter; the same on a semaphore of 3 whose
   permits are all held, at the most W; on the lock at the fewest and the most W, the
   hand-off: the W tasks loop acquire -> 1ms section -> release for 3s: sections/s and
   commands per section. Targets computed, not asserted. --plot FILE draws (a) into an SVG.

With --link-delay DURATION, every private redis-server (the quorum's 5 too) sits behind a
delay line on loopback that delivers each chunk DURATION after it arrived, in each
direction and in order, without serialising pipelined traffic: a link's latency, as users
on a real network have it (0.1-0.5ms each way), where round trips and hand-off hops decide
rather than CPU. Both sides of every comparison and the worker processes connect through
it; INFO commandstats does not. --link-delay 0 measures the delay line's own cost.

With --processes N above 1, this binary re-executes itself as N worker processes that
share the contenders (each with one Client and one connection for all its tasks), and
the contended group compares redlease and busy-retry that way, in alternating slices of
--slice started at one instant in every process, instead of scenarios 3 and 4.

Reported for the contended scenarios: critical sections per second; the hand-off gap
(from the moment a holder sent its release to the moment the next holder's acquire
returned), p50 and p99; the time spent in one acquire (p50, p99, max = the longest wait of
any worker), also per pair with the gap p50; sections per worker (fewest..most); how often
the lock went back to the worker that had just released it; Redis commands per section
(all commands, scripts' inner calls included) and the lock's client round trips; and the
final counter, which must equal the number of sections (else sections overlapped and the
exit code is 1). For scenarios 5 and 6: sections per second, the time spent in one
acquire (max = the longest wait), the most tasks inside at once, sections that began beside
a hold they must exclude (a 5th permit holder, a writer beside anyone: must be 0), and
commands per section. A failed acquire or release of an uncontended or quorum loop also
makes the exit code 1.

Examples:
  redlease bench                         # 3s per side in 5 pairs, private redis-server
  redlease bench --duration 10s --pairs 9 --workers 16
  redlease bench --json > bench.json     # per-pair values, medians, ranges and counts
  redlease bench --only quorum           # scenario 7 alone
  redlease bench --only shared           # scenarios 5 and 6 alone
  redlease bench --only scaling --plot scaling.svg
  redlease bench --only scale --plot scale.svg
  redlease bench --only contended --processes 4 --workers 64
  redlease bench --only uncontended --only contended --link-delay 500us
  redlease bench --hot-cpus 2            # CPUs kept out of idle states (see BENCHMARKS.md)
  redlease bench --redis redis://10.0.0.5:6379   # measure an existing server
  make callgrind                         # client instructions per uncontended pair";

/// Arguments of `redlease bench`.
#[derive(Debug, clap::Args)]
pub(crate) struct BenchArgs {
    /// The Redis to measure (`--redis`, global); by default a private redis-server on a
    /// free loopback port, removed afterwards. Set by `main`.
    #[arg(skip)]
    pub(crate) redis: crate::connect::RedisArgs,

    /// Print one JSON document on stdout instead of tables
    #[arg(long)]
    json: bool,

    /// How long each side of a comparison is measured in all (cut into --pairs slices), and
    /// each other scenario; after a warm-up of a tenth of it (50ms..500ms)
    #[arg(long, value_name = "DURATION", default_value = "3s", value_parser = humantime::parse_duration)]
    duration: Duration,

    /// Held leases at each point of the scale scenario
    #[arg(long, value_name = "N,N,...", value_delimiter = ',', default_value = "1000,10000,50000,100000",
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    leases: Vec<u32>,

    /// Queued waiters at each point of the scale scenario (the hand-off is measured at the
    /// fewest and the most)
    #[arg(long, value_name = "N,N,...", value_delimiter = ',', default_value = "10,100,1000,5000",
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    waiters: Vec<u32>,

    /// Interleaved slice pairs per comparison (at least 5): each side of a comparison is
    /// measured for --duration in all, cut into this many slices of --duration / N
    #[arg(long, value_name = "N", default_value_t = pairs::MIN_PAIRS)]
    pairs: u32,

    /// Concurrent workers in the contended scenarios
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=1024))]
    workers: u16,

    /// Keep N CPUs out of their idle states during the run with lowest-priority
    /// (`SCHED_IDLE`) spinning processes, so that the time an idle CPU takes to wake up
    /// does not dominate single round trips; 0 (the default) measures the machine as it is
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=1024))]
    hot_cpus: u16,

    /// Run only these groups of scenarios (repeat the option for several; all but scaling
    /// and scale by default)
    #[arg(long, value_enum, value_name = "GROUP")]
    only: Vec<Group>,

    /// Spread the contenders over N OS processes (this binary re-executed as workers); with
    /// N > 1, the contended group compares redlease and busy-retry across processes in
    /// alternating slices. Default: 1 (in this process), 4 for the scaling scenario
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    processes: Option<u16>,

    /// Contenders at each point of the scaling scenario
    #[arg(long, value_name = "N,N,...", value_delimiter = ',', default_value = "8,64,256",
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    contenders: Vec<u16>,

    /// Length of one slice of the multi-process comparisons (scaling, --processes above 1)
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = humantime::parse_duration)]
    slice: Duration,

    /// Draw the scaling scenario's curves (sections/s and longest wait against contenders),
    /// or the scale scenario's (Redis commands/s and CPU against held leases, ours and the
    /// floor's), into this SVG file; needs --only scaling or --only scale (not both)
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,

    /// The tokio runtime the benchmark (both sides of every comparison) runs on: the
    /// multi-thread one of the other commands (2 workers), or a current-thread one, where
    /// every task the library spawns per operation is paid inline, as in the many services
    /// and tools that run one. Worker processes (--processes above 1) keep the multi-thread one
    #[arg(long, value_enum, value_name = "FLAVOR", default_value_t = Flavor::MultiThread)]
    pub(crate) runtime: Flavor,

    /// A link's latency between the clients and Redis: a delay line in front of every
    /// private redis-server (the quorum's too) delays each chunk by DURATION in each
    /// direction, without serialising pipelined traffic; both sides of every comparison and
    /// the worker processes connect through it. 0 runs through the delay line without
    /// delay (its own cost). Not with --redis. Default: none (loopback)
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    link_delay: Option<Duration>,
}

/// Groups of scenarios, for `--only`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Group {
    /// Scenarios 1 and 2: acquire + release, one task
    Uncontended,
    /// Scenarios 3 and 4: --workers tasks on one key
    Contended,
    /// Scenarios 5 and 6: a semaphore, a read-write lock
    Shared,
    /// Scenario 7: a quorum of 5 private redis-servers against a bare parallel Redlock
    Quorum,
    /// Scenario 8: 8, 64, 256 contenders over 4 processes (only when asked for: about 2
    /// minutes)
    Scaling,
    /// Scenario 9: held leases and queued waiters at scale (only when asked for: about 4
    /// minutes)
    Scale,
}

impl BenchArgs {
    fn runs(&self, group: Group) -> bool {
        self.only.contains(&group)
            || (self.only.is_empty() && !matches!(group, Group::Scaling | Group::Scale))
    }

    /// Checks the options that clap cannot.
    fn check(&self) -> anyhow::Result<()> {
        if self.duration < Duration::from_millis(100) || self.duration > Duration::from_secs(3600) {
            bail!(
                "--duration {} is out of range; use 100ms to 1h",
                humantime::format_duration(self.duration)
            );
        }
        pairs::check_count(self.pairs)?;
        if self.slice < Duration::from_millis(50) || self.slice > Duration::from_secs(600) {
            bail!(
                "--slice {} is out of range; use 50ms to 10m",
                humantime::format_duration(self.slice)
            );
        }
        if let Some(delay) = self.link_delay {
            if !self.redis.urls.is_empty() {
                bail!(
                    "--link-delay puts a delay line in front of the private redis-server; \
                     it cannot be combined with --redis"
                );
            }
            if delay > link::MAX_DELAY {
                bail!(
                    "--link-delay {} is out of range; use 0 to {}",
                    humantime::format_duration(delay),
                    humantime::format_duration(link::MAX_DELAY)
                );
            }
        }
        if self.plot.is_some() && self.runs(Group::Scaling) == self.runs(Group::Scale) {
            bail!(
                "--plot draws the scaling or the scale scenario; add --only scaling or --only scale"
            );
        }
        Ok(())
    }

    /// Slice pairs per comparison.
    fn pair_count(&self) -> usize {
        usize::try_from(self.pairs).unwrap_or(usize::MAX)
    }

    /// The scale scenario's options.
    fn scale(&self) -> scale::Options {
        let sorted = |v: &[u32]| {
            let mut v: Vec<usize> = v
                .iter()
                .map(|&n| usize::try_from(n).unwrap_or(usize::MAX))
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        scale::Options::new(sorted(&self.leases), sorted(&self.waiters))
    }

    /// The scaling scenario's options.
    fn scaling(&self) -> scaling::Options {
        let mut contenders: Vec<usize> = self.contenders.iter().map(|&c| usize::from(c)).collect();
        contenders.sort_unstable();
        contenders.dedup();
        scaling::Options {
            contenders,
            processes: usize::from(self.processes.unwrap_or(4)),
            pairs: self.pair_count(),
            slice: self.slice,
        }
    }
}

/// Runs every scenario and prints the report.
/// Installs a Prometheus recorder (never served: only its cost is wanted), so that the
/// library's metrics are recorded as a service exporting them would record them.
#[cfg(feature = "metrics")]
pub(crate) fn record_metrics() {
    match metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder() {
        Ok(handle) => {
            // What an exporter's own task does: fold the recorded samples every few
            // seconds, so that they do not pile up.
            std::thread::spawn(move || {
                loop {
                    std::thread::sleep(std::time::Duration::from_secs(5));
                    handle.run_upkeep();
                }
            });
            tracing::info!("recording metrics into a Prometheus recorder");
        }
        Err(e) => tracing::warn!(error = %e, "cannot install the metrics recorder"),
    }
}

pub(crate) async fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    args.check()?;
    // `server` is dropped last, after every connection to it.
    let (server, url, where_) = crate::connect::url_or_private_server(&args.redis).await?;
    let where_ = if server.is_some() {
        where_.trim_start_matches("a ").to_owned()
    } else {
        "external".to_owned()
    };
    // Dropped after every connection through them, before `server`.
    let mut lines = Vec::new();
    let url = match &server {
        Some(server) => link::url(server, args.link_delay, &mut lines)?,
        None => url,
    };
    let env = Env::connect(&url, args.duration, args.link_delay).await?;
    let hot = hot::HotCpus::start(args.hot_cpus)?;
    let outcome = measure(&env, &args, where_).await;
    drop(hot);
    env.remove_keys().await;
    let report = outcome?;

    let mut text = if args.json {
        serde_json::to_string_pretty(&report)?
    } else {
        report.render()?
    };
    text.push('\n');
    if let (Some(path), Some(scaling)) = (&args.plot, &report.scaling) {
        plot::write(path, scaling)?;
    }
    if let (Some(path), Some(scale)) = (&args.plot, &report.scale) {
        scale_plot::write(path, scale)?;
    }
    std::io::stdout()
        .lock()
        .write_all(text.as_bytes())
        .context("writing the report")?;
    drop(env);
    drop(lines);
    drop(server);
    if report.failures.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "redlease: {} correctness check(s) failed: {}",
            report.failures.len(),
            report.failures.join("; ")
        );
        Ok(ExitCode::from(1))
    }
}

async fn measure(env: &Env, args: &BenchArgs, server: String) -> anyhow::Result<Report> {
    let redis_version = env.redis_version().await;
    let mut comparisons = Vec::new();
    let uncontended = if args.runs(Group::Uncontended) {
        let (sides, compared) = uncontended::run(env, args.duration, args.pairs).await?;
        comparisons.extend(compared);
        sides
    } else {
        Vec::new()
    };
    let processes = args.processes.map_or(1, usize::from);
    let contended = if args.runs(Group::Contended) && processes == 1 {
        let (sides, compared) =
            contended::run(env, usize::from(args.workers), args.duration, args.pairs).await?;
        comparisons.extend(compared);
        sides
    } else {
        Vec::new()
    };
    let quorum = if args.runs(Group::Quorum) {
        let (sides, compared) = quorum::run(env, args.duration, args.pairs).await?;
        comparisons.extend(compared);
        sides
    } else {
        Vec::new()
    };
    let contended_processes = if args.runs(Group::Contended) && processes > 1 {
        let setup = processes::Setup {
            contenders: usize::from(args.workers),
            processes,
            pairs: args.pair_count(),
            slice: args.slice,
        };
        let label = format!("contended, {} workers", args.workers);
        Some(processes::point(env, &setup, "processes", &label).await?)
    } else {
        None
    };
    let shared = if args.runs(Group::Shared) {
        shared::run(env, args.duration).await?
    } else {
        Vec::new()
    };
    let scaling = if args.runs(Group::Scaling) {
        Some(scaling::run(env, &args.scaling()).await?)
    } else {
        None
    };
    let scale = if args.runs(Group::Scale) {
        Some(scale::run(env, &args.scale()).await?)
    } else {
        None
    };
    let mut failures = Report::check(&uncontended, &contended, &quorum, &shared);
    failures.extend(scale.iter().flat_map(scale::Scale::failures));
    failures.extend(
        contended_processes
            .iter()
            .chain(scaling.iter().flat_map(|s| &s.points))
            .flat_map(processes::Point::failures)
            .cloned(),
    );
    Ok(Report {
        redis_version,
        server,
        duration: args.duration,
        pairs: args.pairs,
        workers: usize::from(args.workers),
        hot_cpus: args.hot_cpus,
        runtime: args.runtime,
        link_delay: args.link_delay,
        failures,
        uncontended,
        contended,
        contended_processes,
        quorum,
        shared,
        scaling,
        scale,
        comparisons,
    })
}
