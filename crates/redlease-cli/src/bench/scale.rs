//! The scale scenario (`--only scale`): what holding many leases and queueing many waiters
//! on one `Client` cost Redis, the client and everybody else using Redis
//! ([`super::held`], [`super::queued`]), and the targets computed from it: reported, never
//! asserted.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use super::env::Env;
use super::held::{self, HeldPoint};
use super::queued::{self, QueuedPoint, Shape};
use super::render::{duration, table};
use super::stats::share;

/// Our Redis commands per second may be at most this many times the floor's.
const COMMANDS_TARGET: f64 = 1.5;
/// Our Redis CPU may be at most this many times the floor's.
const CPU_TARGET: f64 = 2.0;
/// The least lease left, as a share of the ttl, must be at least this.
const LEASE_LEFT_TARGET: f64 = 0.6;
/// Another client's longest `PING` may be at most this (a stand-in for the longest time
/// one renewal batch blocks Redis).
const PING_TARGET: Duration = Duration::from_millis(5);
/// Commands per queued waiter per [`queued::HOLDER_TTL`], above the holder alone.
const PER_WAITER_TARGET: f64 = 1.0;
/// Hand-off throughput at the most waiters over that at the fewest.
const HANDOFF_TARGET: f64 = 0.9;

/// How the scenario is run.
#[derive(Debug, Clone)]
pub(super) struct Options {
    /// Held leases at each point (sorted, no repeats).
    pub(super) leases: Vec<usize>,
    /// Queued waiters at each point (sorted, no repeats; a point with none comes first).
    pub(super) waiters: Vec<usize>,
    /// Each window of the held leases (quiet, probed, floor).
    pub(super) held_window: Duration,
    /// The window of queued waiters.
    pub(super) queued_window: Duration,
    /// The window of the hand-off loop.
    pub(super) handoff_window: Duration,
}

impl Options {
    /// The defaults, sized to end in about 3 minutes on 2 vCPUs.
    pub(super) fn new(leases: Vec<usize>, waiters: Vec<usize>) -> Self {
        Self {
            leases,
            waiters,
            held_window: held::TTL,
            queued_window: queued::HOLDER_TTL,
            handoff_window: Duration::from_secs(3),
        }
    }
}

/// What the scenario measured.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Scale {
    /// Another connection's `PING` with nothing held: the machine's own noise.
    pub(super) idle_ping: super::stats::Summary,
    #[serde(rename = "held_ttl_us", serialize_with = "super::stats::micros")]
    pub(super) held_ttl: Duration,
    #[serde(rename = "held_window_us", serialize_with = "super::stats::micros")]
    pub(super) held_window: Duration,
    pub(super) held: Vec<HeldPoint>,
    #[serde(rename = "holder_ttl_us", serialize_with = "super::stats::micros")]
    pub(super) holder_ttl: Duration,
    pub(super) queued: Vec<QueuedPoint>,
}

/// Runs every point.
pub(super) async fn run(env: &Env, options: &Options) -> anyhow::Result<Scale> {
    let probes = super::gauges::Probes::start(&env.redis, Vec::new())?;
    tokio::time::sleep(options.held_window).await;
    let idle_ping = probes.finish()?.ping;
    let mut held = Vec::with_capacity(options.leases.len());
    for &leases in &options.leases {
        held.push(held::point(env, leases, options.held_window).await?);
    }
    let mut queued = Vec::with_capacity(options.waiters.len() + 1);
    let (fewest, most) = (
        options.waiters.first().copied(),
        options.waiters.last().copied(),
    );
    for waiters in std::iter::once(0).chain(options.waiters.iter().copied()) {
        let handoff = (waiters > 0 && (Some(waiters) == fewest || Some(waiters) == most))
            .then_some(options.handoff_window);
        queued
            .push(queued::point(env, Shape::Lock, waiters, options.queued_window, handoff).await?);
    }
    // A semaphore of 3 whose permits are all held, alone and at the most waiters (its
    // re-check reads every permit: the dearest attempt).
    let semaphore = Shape::Semaphore { permits: 3 };
    for waiters in std::iter::once(0).chain(most) {
        queued.push(queued::point(env, semaphore, waiters, options.queued_window, None).await?);
    }
    Ok(Scale {
        idle_ping,
        held_ttl: held::TTL,
        held_window: options.held_window,
        held,
        holder_ttl: queued::HOLDER_TTL,
        queued,
    })
}

impl Scale {
    /// Failed correctness checks: leases lost while held, hand-off task errors.
    pub(super) fn failures(&self) -> Vec<String> {
        let mut failures = Vec::new();
        for p in &self.held {
            if p.lost > 0 || p.probed.missing > 0 {
                failures.push(format!(
                    "scale, {} held leases: {} guards lost their lease, {} PTTL reads found a \
                     lock key gone",
                    p.leases, p.lost, p.probed.missing
                ));
            }
        }
        for p in &self.queued {
            if let Some(h) = p.handoff.as_ref().filter(|h| h.errors > 0) {
                failures.push(format!(
                    "scale, hand-off among {} waiters: {} tasks failed",
                    p.waiters, h.errors
                ));
            }
        }
        failures
    }

    /// Commands per waiter per holder ttl above the holder alone (the point with none).
    fn per_waiter(&self, p: &QueuedPoint) -> Option<f64> {
        self.above_alone(p, |q| q.commands_per_sec)
    }

    /// `rate` per waiter per holder ttl above the holder alone.
    fn above_alone(&self, p: &QueuedPoint, rate: fn(&QueuedPoint) -> f64) -> Option<f64> {
        let alone = self
            .queued
            .iter()
            .find(|q| q.waiters == 0 && q.shape == p.shape)?;
        #[allow(clippy::cast_precision_loss)] // waiters <= a few thousand
        (p.waiters > 0)
            .then(|| (rate(p) - rate(alone)) * self.holder_ttl.as_secs_f64() / p.waiters as f64)
    }
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "MISSED" }
}

fn ratio_cell(ours: f64, floor: f64) -> String {
    format!("{:.2}x", share(ours, floor))
}

fn bytes(b: Option<f64>) -> String {
    b.map_or_else(|| "n/a".to_owned(), |b| format!("{b:.0}"))
}

fn percent(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

/// Appends the scenario's tables and target lines.
pub(super) fn render(out: &mut String, s: &Scale) -> std::fmt::Result {
    render_held(out, s)?;
    render_queued(out, s)
}

#[allow(clippy::cast_precision_loss)] // milliseconds and counts far below 2^52
fn render_held(out: &mut String, s: &Scale) -> std::fmt::Result {
    if s.held.is_empty() {
        return Ok(());
    }
    let window = humantime::format_duration(s.held_window);
    writeln!(
        out,
        "\nScale, held leases: N locks held by one Client (ttl {}, renewed), a quiet window of {window}\n\
         right after acquiring them all (Redis commands and CPU, client CPU), then a probed window\n\
         of {window} (another connection's PING every 2 ms; PTTL of 1,000 sampled lock keys every\n\
         100 ms); the floor: the same N keys renewed by a loop of pipelined PEXPIRE, one per key\n\
         per ttl/3, spread over 100 ticks per period, measured for {window}",
        humantime::format_duration(s.held_ttl),
    )?;
    let rows: Vec<Vec<String>> = s
        .held
        .iter()
        .map(|p| {
            vec![
                p.leases.to_string(),
                duration(p.acquire_all),
                format!("{:.0}", p.ours.commands_per_sec),
                format!("{:.0}", p.floor.commands_per_sec),
                ratio_cell(p.ours.commands_per_sec, p.floor.commands_per_sec),
                format!("{:.0}", p.ours.requests_per_sec),
                percent(p.ours.redis_cpu),
                percent(p.floor.redis_cpu),
                ratio_cell(p.ours.redis_cpu, p.floor.redis_cpu),
                percent(p.ours.client_cpu),
            ]
        })
        .collect();
    table(
        out,
        &[
            "leases",
            "acquire all",
            "cmds/s",
            "floor cmds/s",
            "ratio",
            "EVALSHA/s",
            "Redis CPU",
            "floor CPU",
            "ratio",
            "client CPU",
        ],
        &rows,
    )?;
    writeln!(out)?;
    render_held_view(out, s)?;
    render_held_targets(out, s)
}

/// Memory, the least lease left and another client's latency, per point.
#[allow(clippy::cast_precision_loss)] // milliseconds and counts far below 2^52
fn render_held_view(out: &mut String, s: &Scale) -> std::fmt::Result {
    let ttl_ms = s.held_ttl.as_millis() as f64;
    let idle = vec![
        "nothing held".to_owned(),
        "-".to_owned(),
        "-".to_owned(),
        "-".to_owned(),
        "-".to_owned(),
        "-".to_owned(),
        duration(s.idle_ping.p50),
        duration(s.idle_ping.p99),
        duration(s.idle_ping.max),
        "-".to_owned(),
    ];
    let rows: Vec<Vec<String>> = std::iter::once(idle)
        .chain(s.held.iter().map(|p| {
            vec![
                p.leases.to_string(),
                bytes(Some(p.redis_bytes_per_lease)),
                p.one_lock_bytes.to_string(),
                bytes(p.client_bytes_per_lease),
                p.client_rss
                    .map_or_else(|| "n/a".to_owned(), |b| format!("{} MiB", b >> 20)),
                p.probed.least_pttl_ms.map_or_else(
                    || "n/a".to_owned(),
                    |ms| format!("{ms} ms ({:.0}%)", ms as f64 / ttl_ms * 100.0),
                ),
                duration(p.probed.ping.p50),
                duration(p.probed.ping.p99),
                duration(p.probed.ping.max),
                (p.lost as u64 + p.probed.missing).to_string(),
            ]
        }))
        .collect();
    table(
        out,
        &[
            "leases",
            "Redis B/lease",
            "one lock B",
            "client B/lease",
            "client RSS",
            "least lease left",
            "PING p50",
            "p99",
            "max",
            "lost",
        ],
        &rows,
    )?;
    writeln!(
        out,
        "  cmds: every command Redis ran, scripts' inner calls included; Redis CPU: used_cpu_sys +\n  \
         used_cpu_user over wall time; client CPU: this process (/proc/self/stat); Redis B/lease:\n  \
         used_memory delta / N; one lock B: MEMORY USAGE of the lock key, holder details and\n  \
         fencing counter; least lease left: the least PTTL seen; lost: guards no longer held\n  \
         and PTTL reads that found a lock key gone (must be 0); nothing held: the PING probe\n  \
         alone, before the first point (the machine's own noise)"
    )?;
    for p in &s.held {
        let by: Vec<String> = p
            .ours
            .by_command
            .iter()
            .map(|(name, rate)| format!("{name} {rate:.0}"))
            .collect();
        writeln!(out, "  {} leases, commands/s: {}", p.leases, by.join(", "))?;
    }
    Ok(())
}

/// The held leases' target lines.
#[allow(clippy::cast_precision_loss)] // milliseconds
fn render_held_targets(out: &mut String, s: &Scale) -> std::fmt::Result {
    let ttl_ms = s.held_ttl.as_millis() as f64;
    writeln!(out, "  targets (computed, not asserted):")?;
    for p in &s.held {
        let commands = share(p.ours.commands_per_sec, p.floor.commands_per_sec);
        let cpu = share(p.ours.redis_cpu, p.floor.redis_cpu);
        let left = p.probed.least_pttl_ms.map_or(0.0, |ms| ms as f64 / ttl_ms);
        writeln!(
            out,
            "    {}: commands <= {COMMANDS_TARGET}x floor {commands:.2}x {}; Redis CPU <= \
             {CPU_TARGET}x floor {cpu:.2}x {}; least lease left >= {:.0}% {:.0}% {}; longest \
             PING <= {} {} {}",
            p.leases,
            verdict(commands <= COMMANDS_TARGET),
            verdict(cpu <= CPU_TARGET),
            LEASE_LEFT_TARGET * 100.0,
            left * 100.0,
            verdict(left >= LEASE_LEFT_TARGET),
            duration(PING_TARGET),
            duration(p.probed.ping.max),
            verdict(p.probed.ping.max <= PING_TARGET),
        )?;
    }
    Ok(())
}

fn render_queued(out: &mut String, s: &Scale) -> std::fmt::Result {
    if s.queued.is_empty() {
        return Ok(());
    }
    let ttl = humantime::format_duration(s.holder_ttl);
    let window = s
        .queued
        .first()
        .map_or(Duration::ZERO, |p| Duration::from_secs(p.window.as_secs()));
    writeln!(
        out,
        "\nScale, queued waiters: W tasks of one Client queued on one lock that another task holds\n\
         (ttl {ttl}, renewed), or on a semaphore of 3 whose 3 permits are held, nothing else\n\
         happening, a window of {}; the rows with 0 waiters are the holders alone",
        humantime::format_duration(window),
    )?;
    let rows: Vec<Vec<String>> = s
        .queued
        .iter()
        .map(|p| {
            vec![
                p.shape.label(),
                p.waiters.to_string(),
                format!("{:.1}", p.commands_per_sec),
                format!("{:.1}", p.requests_per_sec),
                s.per_waiter(p)
                    .map_or_else(|| "-".to_owned(), |v| format!("{v:.3}")),
                s.above_alone(p, |q| q.requests_per_sec)
                    .map_or_else(|| "-".to_owned(), |v| format!("{v:.3}")),
                percent(p.redis_cpu),
                percent(p.client_cpu),
                bytes(p.redis_bytes_per_waiter),
                bytes(p.client_bytes_per_waiter),
            ]
        })
        .collect();
    let per_waiter = format!("cmds/waiter/{ttl}");
    let requests_per_waiter = format!("EVALSHA/waiter/{ttl}");
    table(
        out,
        &[
            "on",
            "waiters",
            "cmds/s",
            "EVALSHA/s",
            &per_waiter,
            &requests_per_waiter,
            "Redis CPU",
            "client CPU",
            "Redis B/waiter",
            "client B/waiter",
        ],
        &rows,
    )?;
    writeln!(
        out,
        "  cmds (EVALSHA)/waiter/{ttl}: commands (requests) above the holder alone, per waiter per\n  \
         holder ttl; B/waiter: used_memory (or the client's RSS) with the waiters queued, less\n  \
         with the holder alone, / W"
    )?;
    let handoffs: Vec<&QueuedPoint> = s.queued.iter().filter(|p| p.handoff.is_some()).collect();
    render_handoffs(out, &handoffs)?;
    render_queued_targets(out, s, &handoffs)
}

/// The hand-off loops' table.
fn render_handoffs(out: &mut String, handoffs: &[&QueuedPoint]) -> std::fmt::Result {
    if !handoffs.is_empty() {
        writeln!(
            out,
            "\nScale, hand-off: W tasks loop acquire -> {} section (a sleep) -> release on one lock",
            duration(queued::SECTION)
        )?;
        let rows: Vec<Vec<String>> = handoffs
            .iter()
            .filter_map(|p| {
                let h = p.handoff.as_ref()?;
                Some(vec![
                    p.waiters.to_string(),
                    format!("{:.0}", h.sections_per_sec),
                    format!("{:.2}", h.commands_per_section),
                    format!("{:.2}", h.requests_per_section),
                    h.sections.to_string(),
                    h.errors.to_string(),
                ])
            })
            .collect();
        table(
            out,
            &[
                "waiters",
                "sections/s",
                "cmds/section",
                "EVALSHA/section",
                "sections",
                "errors",
            ],
            &rows,
        )?;
    }
    Ok(())
}

/// The queued waiters' and the hand-off's target lines.
fn render_queued_targets(
    out: &mut String,
    s: &Scale,
    handoffs: &[&QueuedPoint],
) -> std::fmt::Result {
    let ttl = humantime::format_duration(s.holder_ttl);
    writeln!(out, "  targets (computed, not asserted):")?;
    // Each W's figure per waiter per holder ttl, with its verdict.
    let per_waiter = |rate: fn(&QueuedPoint) -> f64| -> String {
        s.queued
            .iter()
            .filter_map(|p| {
                let v = s.above_alone(p, rate)?;
                let on = match p.shape {
                    Shape::Lock => String::new(),
                    shape @ Shape::Semaphore { .. } => format!(" on a {}", shape.label()),
                };
                Some(format!(
                    "{}{on}: {v:.3} {}",
                    p.waiters,
                    verdict(v <= PER_WAITER_TARGET)
                ))
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    writeln!(
        out,
        "    at most {PER_WAITER_TARGET} command per queued waiter per {ttl}: {}",
        per_waiter(|q| q.commands_per_sec)
    )?;
    writeln!(
        out,
        "    (the same counting requests, not the commands they run: {})",
        per_waiter(|q| q.requests_per_sec)
    )?;
    if let (Some(first), Some(last)) = (
        handoffs
            .first()
            .and_then(|p| Some((p.waiters, p.handoff.as_ref()?))),
        handoffs
            .last()
            .and_then(|p| Some((p.waiters, p.handoff.as_ref()?))),
    ) && first.0 != last.0
    {
        let throughput = share(last.1.sections_per_sec, first.1.sections_per_sec);
        writeln!(
            out,
            "    hand-off throughput at {} >= {HANDOFF_TARGET}x at {}: {throughput:.2}x {}; \
             commands per section flat: {:.2} -> {:.2} ({:.2}x)",
            last.0,
            first.0,
            verdict(throughput >= HANDOFF_TARGET),
            first.1.commands_per_section,
            last.1.commands_per_section,
            share(last.1.commands_per_section, first.1.commands_per_section),
        )?;
    }
    Ok(())
}
