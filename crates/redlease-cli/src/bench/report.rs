//! The benchmark's report: aligned tables for people, JSON for tools.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use super::contended::Contended;
use super::pairs::Comparison;
use super::processes::Point;
use super::quorum::Quorum;
use super::render::{duration, fewest_most, table};
use super::scale::Scale;
use super::scaling::Scaling;
use super::shared::Shared;
use super::stats::{CommandCost, LoopChecks, Summary};
use super::uncontended::Uncontended;

/// Everything one `redlease bench` run measured.
#[derive(Debug, Serialize)]
pub(super) struct Report {
    pub(super) redis_version: String,
    /// `private redis-server on 127.0.0.1:PORT`, or `external` for `--redis`.
    pub(super) server: String,
    #[serde(rename = "duration_us", serialize_with = "super::stats::micros")]
    pub(super) duration: Duration,
    /// Interleaved slice pairs per comparison (`--pairs`).
    pub(super) pairs: u32,
    pub(super) workers: usize,
    /// `SCHED_IDLE` spinners that kept CPUs out of idle states (`--hot-cpus`).
    pub(super) hot_cpus: u16,
    /// The tokio runtime flavour (`--runtime`).
    pub(super) runtime: super::flavor::Flavor,
    /// `--link-delay`: the delay each way between the clients and Redis (`None`: loopback,
    /// no delay line).
    #[serde(rename = "link_delay_us", serialize_with = "link_delay_micros")]
    pub(super) link_delay: Option<Duration>,
    pub(super) uncontended: Vec<Uncontended>,
    pub(super) contended: Vec<Contended>,
    /// The redlease quorum of 5 and the bare parallel Redlock.
    pub(super) quorum: Vec<Quorum>,
    /// The contended group across OS processes (`--processes` above 1), instead of
    /// `contended`.
    pub(super) contended_processes: Option<Point>,
    /// The semaphore and read-write lock scenarios.
    pub(super) shared: Vec<Shared>,
    /// The scaling scenario (`--only scaling`).
    pub(super) scaling: Option<Scaling>,
    /// The scale scenario (`--only scale`).
    pub(super) scale: Option<Scale>,
    /// Each redlease scenario against its floor, over interleaved slice pairs.
    pub(super) comparisons: Vec<Comparison>,
    /// Failed correctness checks (empty when all passed).
    pub(super) failures: Vec<String>,
}

/// `--link-delay` as fractional microseconds, `null` when there is no delay line.
#[allow(clippy::ref_option)] // serde's `serialize_with` passes `&Option<_>`
fn link_delay_micros<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => super::stats::micros(d, s),
        None => s.serialize_none(),
    }
}

impl Report {
    /// The failed correctness checks of every scenario.
    pub(super) fn check(
        uncontended: &[Uncontended],
        contended: &[Contended],
        quorum: &[Quorum],
        shared: &[Shared],
    ) -> Vec<String> {
        let mut failures: Vec<String> = uncontended
            .iter()
            .filter_map(|u| u.checks.failure(u.scenario))
            .chain(quorum.iter().filter_map(|q| q.checks.failure(q.scenario)))
            .collect();
        for c in contended {
            if c.counter != c.sections {
                failures.push(format!(
                    "{}: the counter is {} after {} critical sections: sections overlapped",
                    c.scenario, c.counter, c.sections
                ));
            }
            if !c.errors.is_empty() {
                failures.push(format!("{}: {} worker errors", c.scenario, c.errors.len()));
            }
        }
        for s in shared {
            if s.violations > 0 {
                failures.push(format!(
                    "{}: {} sections began beside a hold they must exclude",
                    s.scenario, s.violations
                ));
            }
            if s.counter != s.expected_counter {
                failures.push(format!(
                    "{}: the counter is {}, expected {}",
                    s.scenario, s.counter, s.expected_counter
                ));
            }
            if !s.errors.is_empty() {
                failures.push(format!("{}: {} task errors", s.scenario, s.errors.len()));
            }
        }
        failures
    }

    /// The report as aligned text tables.
    pub(super) fn render(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        writeln!(
            out,
            "redlease bench: redis {} ({}), {} per side in {} interleaved slice pairs, \
             {} workers when contended, {} runtime{}, {}\n",
            self.redis_version,
            self.server,
            humantime::format_duration(self.duration),
            self.pairs,
            self.workers,
            match self.runtime {
                super::flavor::Flavor::MultiThread => "multi-thread (2 workers)",
                super::flavor::Flavor::CurrentThread => "current-thread",
            },
            match self.hot_cpus {
                0 => String::new(),
                n => format!(", hot CPUs: {n}"),
            },
            super::link::shown(self.link_delay)
        )?;
        if !self.uncontended.is_empty() {
            self.render_uncontended(&mut out)?;
        }
        if !self.contended.is_empty() {
            self.render_contended(&mut out)?;
        }
        if !self.quorum.is_empty() {
            self.render_quorum(&mut out)?;
        }
        if let Some(p) = &self.contended_processes {
            writeln!(
                out,
                "\nContended: {} workers over {} processes, one key, acquire -> GET + SET counter -> release;\n\
                 {} alternating slice pairs (redlease, busy-retry) of {}",
                p.contenders,
                p.processes,
                p.pairs,
                humantime::format_duration(p.slice)
            )?;
            super::processes::render_points(&mut out, std::slice::from_ref(p))?;
        }
        if !self.shared.is_empty() {
            self.render_shared(&mut out)?;
        }
        if let Some(s) = &self.scaling {
            super::scaling::render(&mut out, s)?;
        }
        if let Some(s) = &self.scale {
            super::scale::render(&mut out, s)?;
        }
        if self.failures.is_empty() {
            writeln!(out)?;
            for (group, sides) in [
                (
                    "uncontended",
                    self.uncontended
                        .iter()
                        .map(|u| (u.ops, &u.checks))
                        .collect::<Vec<_>>(),
                ),
                (
                    "quorum of 5",
                    self.quorum.iter().map(|q| (q.ops, &q.checks)).collect(),
                ),
            ] {
                render_loop_checks(&mut out, group, &sides)?;
            }
            if !self.contended.is_empty()
                || !self.shared.is_empty()
                || self.contended_processes.is_some()
                || self.scaling.is_some()
            {
                writeln!(out, "correctness: every counter matches its section count")?;
            }
        } else {
            writeln!(out, "\nCORRECTNESS CHECKS FAILED:")?;
            for f in &self.failures {
                writeln!(out, "  {f}")?;
            }
        }
        Ok(out)
    }

    fn render_uncontended(&self, out: &mut String) -> std::fmt::Result {
        writeln!(
            out,
            "Uncontended: one task, one key, acquire + release per op (latency of the pair)"
        )?;
        let sides: Vec<LoopRow<'_>> = self
            .uncontended
            .iter()
            .map(|u| (u.scenario, u.ops_per_sec, u.latency, u.commands.as_ref()))
            .collect();
        render_loops(out, ("op", "op"), &sides)?;
        if let [ours, bare] = &self.uncontended[..] {
            writeln!(
                out,
                "  all slices together: p50 {:+.1}%, p99 {:+.1}% against the floor",
                change(ours.latency.p50, bare.latency.p50),
                change(ours.latency.p99, bare.latency.p99),
            )?;
        }
        self.render_comparisons(out, |c| c.name.starts_with("uncontended"))
    }

    /// The comparisons `which` selects.
    fn render_comparisons(
        &self,
        out: &mut String,
        which: impl Fn(&Comparison) -> bool,
    ) -> std::fmt::Result {
        for c in self.comparisons.iter().filter(|c| which(c)) {
            c.render(out)?;
        }
        Ok(())
    }

    fn render_quorum(&self, out: &mut String) -> std::fmt::Result {
        writeln!(
            out,
            "\nQuorum of {} private redis-servers: one task, acquire + release per op",
            super::quorum::NODES
        )?;
        let sides: Vec<LoopRow<'_>> = self
            .quorum
            .iter()
            .map(|q| {
                let commands = q.commands_per_node.as_ref();
                (q.scenario, q.ops_per_sec, q.latency, commands)
            })
            .collect();
        render_loops(out, ("op/node", "op and node"), &sides)?;
        self.render_comparisons(out, |c| c.name.starts_with("quorum"))
    }

    fn render_contended(&self, out: &mut String) -> std::fmt::Result {
        writeln!(
            out,
            "\nContended: {} workers, one key, acquire -> GET + SET counter -> release",
            self.workers
        )?;
        let timing: Vec<Vec<String>> = self
            .contended
            .iter()
            .map(|c| {
                vec![
                    c.scenario.to_owned(),
                    format!("{:.0}", c.sections_per_sec),
                    duration(c.handoff_gap.p50),
                    duration(c.handoff_gap.p99),
                    duration(c.wait.p50),
                    duration(c.wait.p99),
                    duration(c.wait.max),
                ]
            })
            .collect();
        table(
            out,
            &[
                "scenario",
                "sections/s",
                "gap p50",
                "gap p99",
                "wait p50",
                "wait p99",
                "max wait",
            ],
            &timing,
        )?;
        writeln!(out)?;
        self.render_contended_cost(out)?;
        for c in &self.contended {
            for e in &c.errors {
                writeln!(out, "  error ({}): {e}", c.scenario)?;
            }
        }
        self.render_comparisons(out, |c| c.name.starts_with("contended"))
    }

    fn render_shared(&self, out: &mut String) -> std::fmt::Result {
        writeln!(
            out,
            "\nShared holds: {} tasks, one name, acquire -> section -> release",
            super::shared::CONTENDERS
        )?;
        let rows: Vec<Vec<String>> = self
            .shared
            .iter()
            .map(|s| {
                vec![
                    s.scenario.to_owned(),
                    format!("{:.0}", s.sections_per_sec),
                    if s.permits.is_some() {
                        "-".to_owned()
                    } else {
                        format!("{}/{}", s.reads, s.writes)
                    },
                    duration(s.wait.p50),
                    duration(s.wait.p99),
                    duration(s.wait.max),
                    s.most_inside.to_string(),
                    s.violations.to_string(),
                    cost(s.commands.as_ref(), |k| k.total),
                    cost(s.commands.as_ref(), |k| k.lock_round_trips),
                    counter(s.counter, s.expected_counter),
                ]
            })
            .collect();
        table(
            out,
            &[
                "scenario",
                "sections/s",
                "reads/writes",
                "wait p50",
                "wait p99",
                "max wait",
                "most inside",
                "exclusion broken",
                "cmds/section",
                "lock RT/section",
                "counter",
            ],
            &rows,
        )?;
        for s in &self.shared {
            for e in &s.errors {
                writeln!(out, "  error ({}): {e}", s.scenario)?;
            }
        }
        writeln!(
            out,
            "  semaphore section: INCR; rwlock: a read (GET) with probability 0.9, else a write\n  \
             (GET + SET); most inside: tasks in their sections at once; exclusion broken: a 5th\n  \
             permit holder, or a writer beside anyone; counter: every permit section, every write"
        )
    }

    fn render_contended_cost(&self, out: &mut String) -> std::fmt::Result {
        let cost_rows: Vec<Vec<String>> = self
            .contended
            .iter()
            .map(|c| {
                vec![
                    c.scenario.to_owned(),
                    fewest_most(&c.per_worker),
                    format!(
                        "{:.1}%",
                        super::stats::ratio(c.same_worker_reacquired, c.sections) * 100.0
                    ),
                    cost(c.commands.as_ref(), |k| k.total),
                    cost(c.commands.as_ref(), |k| k.lock_round_trips),
                    c.attempts_per_section
                        .map_or_else(|| "-".to_owned(), |a| format!("{a:.2}")),
                    counter(c.counter, c.sections),
                ]
            })
            .collect();
        table(
            out,
            &[
                "scenario",
                "per worker",
                "same worker",
                "cmds/section",
                "lock RT/section",
                "SET NX tries",
                "counter",
            ],
            &cost_rows,
        )?;
        writeln!(
            out,
            "  gap: release sent -> next acquire returned; wait: time inside one acquire;\n  \
             per worker: fewest..most sections of one worker; same worker: sections whose lock\n  \
             went back to the worker that had just released it; cmds: all commands Redis ran\n  \
             (scripts' inner calls and the section's GET + SET included); lock RT: client round\n  \
             trips for the lock alone"
        )
    }
}

/// One side of an acquire + release loop in [`render_loops`]: its scenario, operations per
/// second, latency of one pair, and command counts.
type LoopRow<'a> = (&'a str, f64, Summary, Option<&'a CommandCost>);

/// The table of the acquire + release loops `sides` and their commands by name; `per` is
/// what the command counts are per: in the header (`op/node`) and in words (`op and node`).
fn render_loops(out: &mut String, per: (&str, &str), sides: &[LoopRow<'_>]) -> std::fmt::Result {
    let rows: Vec<Vec<String>> = sides
        .iter()
        .map(|(scenario, ops_per_sec, latency, commands)| {
            vec![
                (*scenario).to_owned(),
                format!("{ops_per_sec:.0}"),
                duration(latency.p50),
                duration(latency.p99),
                duration(latency.max),
                cost(*commands, |c| c.total),
                cost(*commands, |c| c.round_trips),
            ]
        })
        .collect();
    let (cmds, round_trips) = (format!("cmds/{}", per.0), format!("round trips/{}", per.0));
    table(
        out,
        &[
            "scenario",
            "ops/s",
            "p50",
            "p99",
            "max",
            &cmds,
            &round_trips,
        ],
        &rows,
    )?;
    render_by_command(
        out,
        per.1,
        sides
            .iter()
            .map(|(scenario, _, _, commands)| (*scenario, *commands)),
    )
}

/// One line per side: its commands per unit by name, e.g. `evalsha 2.00, set 1.00`.
fn render_by_command<'a>(
    out: &mut String,
    unit: &str,
    sides: impl IntoIterator<Item = (&'a str, Option<&'a CommandCost>)>,
) -> std::fmt::Result {
    for (scenario, cost) in sides {
        let Some(cost) = cost else { continue };
        let by: Vec<String> = cost
            .by_command
            .iter()
            .map(|(name, calls)| format!("{name} {calls:.2}"))
            .collect();
        writeln!(out, "  {scenario}, commands per {unit}: {}", by.join(", "))?;
    }
    Ok(())
}

/// The correctness line of the acquire + release loops of `group` (none when it did not
/// run).
fn render_loop_checks(
    out: &mut String,
    group: &str,
    sides: &[(u64, &LoopChecks)],
) -> std::fmt::Result {
    if sides.is_empty() || sides.iter().any(|(_, c)| !c.passed()) {
        return Ok(());
    }
    let ops: Vec<String> = sides.iter().map(|(ops, _)| ops.to_string()).collect();
    writeln!(
        out,
        "correctness ({group}): every acquire succeeded and every release released ({} pairs)",
        ops.join(" + ")
    )
}

/// A per-unit command cost, or `n/a` when `INFO commandstats` was not available.
fn cost(c: Option<&CommandCost>, field: impl Fn(&CommandCost) -> f64) -> String {
    c.map_or_else(|| "n/a".to_owned(), |c| format!("{:.2}", field(c)))
}

/// A counter cell: `N ok` when it is `expected`, else `N != expected FAIL`.
fn counter(counter: u64, expected: u64) -> String {
    if counter == expected {
        format!("{counter} ok")
    } else {
        format!("{counter} != {expected} FAIL")
    }
}

/// Relative change of `ours` against `base`, in percent.
fn change(ours: Duration, base: Duration) -> f64 {
    let base = base.as_secs_f64();
    if base > 0.0 {
        (ours.as_secs_f64() / base - 1.0) * 100.0
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failed acquire or release of an uncontended or quorum loop fails the run (exit
    /// code 1), as a counter mismatch does.
    #[test]
    fn loop_failures_fail_the_run() {
        let mut checks = LoopChecks::default();
        let side = |checks: LoopChecks| Uncontended {
            scenario: "redlease acquire + release",
            ops: 10,
            elapsed: Duration::from_millis(1),
            ops_per_sec: 1.0,
            latency: super::super::stats::Summary::default(),
            commands: None,
            checks,
        };
        assert!(Report::check(&[side(checks.clone())], &[], &[], &[]).is_empty());
        checks.release_failed("release: the lock was lost".to_owned());
        let failures = Report::check(&[side(checks.clone())], &[], &[], &[]);
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(
            failures[0].contains("1 releases did not release")
                && failures[0].contains("the lock was lost"),
            "{failures:?}"
        );
        for _ in 0..19 {
            checks.acquire_failed("acquire: timeout".to_owned());
        }
        assert!(checks.stop(), "a loop stops measuring after 20 failures");
    }
}
