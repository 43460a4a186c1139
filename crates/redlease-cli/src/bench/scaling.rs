//! The scaling scenario (`--only scaling`): 8, 64 and 256 contenders on one key spread over
//! 4 OS processes, redlease against the busy-retry floor in alternating slices at each point
//! (see [`super::processes`]), and the targets of `ARCHITECTURE.md` ("Performance
//! targets", scaling) computed from the medians: reported, never asserted.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use super::env::Env;
use super::processes::{self, Point, Setup};
use super::render::duration;
use super::stats::share;

/// Throughput at the most contenders must be at least this share of that at the fewest.
const THROUGHPUT_TARGET: f64 = 0.9;
/// The longest wait may be at most this many times contenders x mean section time.
const WAIT_FACTOR: f64 = 1.5;

/// How the scenario is run.
#[derive(Debug, Clone)]
pub(super) struct Options {
    /// Contenders at each point (sorted, no repeats).
    pub(super) contenders: Vec<usize>,
    pub(super) processes: usize,
    pub(super) pairs: usize,
    pub(super) slice: Duration,
}

/// What the scenario measured.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Scaling {
    pub(super) processes: usize,
    pub(super) pairs: usize,
    #[serde(rename = "slice_us", serialize_with = "super::stats::micros")]
    pub(super) slice: Duration,
    pub(super) points: Vec<Point>,
    pub(super) targets: Targets,
}

/// The scaling targets, computed from the points (not assertions).
#[derive(Debug, Clone, Serialize)]
pub(super) struct Targets {
    /// Median sections/s at the most contenders over that at the fewest.
    pub(super) throughput_last_over_first: Option<SideRatio>,
    /// Whether redlease's `throughput_last_over_first` is at least 0.9.
    pub(super) throughput_met: Option<bool>,
    /// Per point: redlease's longest wait against 1.5 x contenders x mean section time.
    pub(super) wait_bounds: Vec<WaitBound>,
    /// Per point: Redis commands per section of each side.
    pub(super) commands_per_section: Vec<CommandsAt>,
    /// Most over fewest of redlease's commands per section across the points.
    pub(super) commands_spread: Option<f64>,
}

/// A ratio of each side.
#[derive(Debug, Clone, Copy, Serialize)]
pub(super) struct SideRatio {
    pub(super) redlease: f64,
    pub(super) busy_retry: f64,
}

/// The longest-wait target at one point.
#[derive(Debug, Clone, Copy, Serialize)]
pub(super) struct WaitBound {
    pub(super) contenders: usize,
    #[serde(rename = "longest_wait_us", serialize_with = "super::stats::micros")]
    pub(super) longest_wait: Duration,
    #[serde(rename = "bound_us", serialize_with = "super::stats::micros")]
    pub(super) bound: Duration,
    pub(super) met: bool,
    /// The same bound with the section timed as the lock sees it: one section's share of
    /// the lock's time (1 / sections per second), hand-off included.
    #[serde(rename = "cycle_bound_us", serialize_with = "super::stats::micros")]
    pub(super) cycle_bound: Duration,
    pub(super) cycle_met: bool,
}

/// Commands per section at one point.
#[derive(Debug, Clone, Copy, Serialize)]
pub(super) struct CommandsAt {
    pub(super) contenders: usize,
    pub(super) redlease: Option<f64>,
    pub(super) busy_retry: Option<f64>,
}

/// Runs every point.
pub(super) async fn run(env: &Env, options: &Options) -> anyhow::Result<Scaling> {
    let mut points = Vec::with_capacity(options.contenders.len());
    for &contenders in &options.contenders {
        let setup = Setup {
            contenders,
            processes: options.processes,
            pairs: options.pairs,
            slice: options.slice,
        };
        let label = format!("scaling, {contenders} contenders");
        points.push(processes::point(env, &setup, &format!("scaling-{contenders}"), &label).await?);
    }
    Ok(Scaling {
        processes: options.processes,
        pairs: options.pairs,
        slice: options.slice,
        targets: Targets::of(&points),
        points,
    })
}

impl Targets {
    pub(super) fn of(points: &[Point]) -> Self {
        let throughput_last_over_first = match (points.first(), points.last()) {
            (Some(first), Some(last)) if points.len() > 1 => Some(SideRatio {
                redlease: share(
                    last.redlease.sections_per_sec.spread.median,
                    first.redlease.sections_per_sec.spread.median,
                ),
                busy_retry: share(
                    last.busy_retry.sections_per_sec.spread.median,
                    first.busy_retry.sections_per_sec.spread.median,
                ),
            }),
            _ => None,
        };
        let wait_bounds = points
            .iter()
            .map(|p| {
                #[allow(clippy::cast_precision_loss)] // contenders <= 1024
                let bound = p
                    .redlease
                    .mean_section
                    .mul_f64(WAIT_FACTOR * p.contenders as f64);
                let rate = p.redlease.sections_per_sec.spread.median;
                #[allow(clippy::cast_precision_loss)] // contenders <= 1024
                let cycle_bound = if rate > 0.0 {
                    Duration::from_secs_f64(WAIT_FACTOR * p.contenders as f64 / rate)
                } else {
                    Duration::ZERO
                };
                WaitBound {
                    contenders: p.contenders,
                    longest_wait: p.redlease.wait.max,
                    bound,
                    met: p.redlease.wait.max <= bound,
                    cycle_bound,
                    cycle_met: p.redlease.wait.max <= cycle_bound,
                }
            })
            .collect();
        let commands_per_section: Vec<CommandsAt> = points
            .iter()
            .map(|p| CommandsAt {
                contenders: p.contenders,
                redlease: p.redlease.commands.as_ref().map(|c| c.total),
                busy_retry: p.busy_retry.commands.as_ref().map(|c| c.total),
            })
            .collect();
        let ours: Option<Vec<f64>> = commands_per_section.iter().map(|c| c.redlease).collect();
        let commands_spread = ours.and_then(|v| {
            let most = v.iter().copied().reduce(f64::max)?;
            let fewest = v.iter().copied().reduce(f64::min)?;
            (fewest > 0.0).then(|| most / fewest)
        });
        Self {
            throughput_met: throughput_last_over_first.map(|r| r.redlease >= THROUGHPUT_TARGET),
            throughput_last_over_first,
            wait_bounds,
            commands_per_section,
            commands_spread,
        }
    }
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "MISSED" }
}

/// Appends the scenario's tables and target lines.
pub(super) fn render(out: &mut String, s: &Scaling) -> std::fmt::Result {
    let contenders: Vec<String> = s.points.iter().map(|p| p.contenders.to_string()).collect();
    writeln!(
        out,
        "\nScaling: {} contenders over {} processes, one key, acquire -> GET + SET counter -> release;\n\
         {} alternating slice pairs (redlease, busy-retry) of {} per point",
        contenders.join(", "),
        s.processes,
        s.pairs,
        humantime::format_duration(s.slice),
    )?;
    processes::render_points(out, &s.points)?;
    let t = &s.targets;
    let (Some(first), Some(last)) = (s.points.first(), s.points.last()) else {
        return Ok(());
    };
    writeln!(out, "  targets (computed from the medians, not asserted):")?;
    if let (Some(r), Some(met)) = (t.throughput_last_over_first, t.throughput_met) {
        writeln!(
            out,
            "    throughput at {} >= {THROUGHPUT_TARGET}x at {}: redlease {:.2}x ({}); busy-retry {:.2}x",
            last.contenders,
            first.contenders,
            r.redlease,
            verdict(met),
            r.busy_retry,
        )?;
    }
    let waits = |bound: fn(&WaitBound) -> (Duration, bool)| {
        t.wait_bounds
            .iter()
            .map(|w| {
                let (limit, met) = bound(w);
                format!(
                    "{}: {} <= {} {}",
                    w.contenders,
                    duration(w.longest_wait),
                    duration(limit),
                    verdict(met)
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    writeln!(
        out,
        "    redlease longest wait <= {WAIT_FACTOR} x contenders x mean section time: {}",
        waits(|w| (w.bound, w.met))
    )?;
    writeln!(
        out,
        "    the same with the section as the lock's cycle (1 / sections per second, hand-off \
         included): {}",
        waits(|w| (w.cycle_bound, w.cycle_met))
    )?;
    let commands = |f: fn(&CommandsAt) -> Option<f64>| {
        t.commands_per_section
            .iter()
            .map(|c| {
                format!(
                    "{}: {}",
                    c.contenders,
                    f(c).map_or_else(|| "n/a".to_owned(), |v| format!("{v:.2}"))
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    writeln!(
        out,
        "    commands per section flat: redlease {}{}; busy-retry {}",
        commands(|c| c.redlease),
        t.commands_spread
            .map_or_else(String::new, |s| format!(" (most / fewest {s:.2}x)")),
        commands(|c| c.busy_retry),
    )
}
