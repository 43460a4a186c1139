//! Contenders spread over OS processes (`--processes N`, and each point of the scaling
//! scenario): this binary re-executed as `redlease bench-worker` processes (see
//! [`super::worker`]), driven in slices over their stdin and stdout.
//!
//! At one point (a number of contenders over a number of processes), the same processes
//! and tasks run a warm-up slice of each side, then `--pairs` pairs of measured slices,
//! redlease then busy-retry, so that both sides see the same machine. Every slice starts in
//! all processes at one wall-clock instant sent by the parent; before it the parent resets
//! the counter and snapshots `INFO commandstats`, after it checks that the counter equals
//! the number of sections (else sections overlapped: a failure, exit code 1).

use std::fmt::Write as _;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::env::Env;
use super::pairs::SliceSpread;
use super::render::{duration, fewest_most, table};
use super::section::SECTION_COMMANDS;
use super::stats::{CommandCost, CommandDelta, Summary, per_second, ratio, share};
use super::waits::{Waits, nanos};
use super::worker::{ProcessReport, READY, Side, Slice, unix_ns};

/// Time between sending a slice and its start, so that every process has read it.
const START_MARGIN: Duration = Duration::from_millis(20);
/// How long a worker may take to connect, or to finish a slice past its end.
const WORKER_PATIENCE: Duration = Duration::from_secs(60);

/// How one point is measured.
#[derive(Debug, Clone, Copy)]
pub(super) struct Setup {
    pub(super) contenders: usize,
    pub(super) processes: usize,
    pub(super) pairs: usize,
    pub(super) slice: Duration,
}

impl Setup {
    /// The unmeasured slice of each side that runs first.
    fn warm_up(&self) -> Duration {
        super::env::warm_up(self.slice)
    }
}

/// One side (redlease or busy-retry) at one point, over all its measured slices.
#[derive(Debug, Clone, Serialize)]
pub(super) struct SideResult {
    pub(super) side: Side,
    /// Sections per second of each slice.
    pub(super) sections_per_sec: SliceSpread,
    pub(super) sections: u64,
    /// Sections of each task (by global id), over all slices.
    pub(super) per_task: Vec<u64>,
    /// Time inside one acquire; its max is the longest wait of any task.
    pub(super) wait: Summary,
    /// Mean time inside one critical section (the GET + SET).
    #[serde(rename = "mean_section_us", serialize_with = "super::stats::micros")]
    pub(super) mean_section: Duration,
    /// Per section; absent when `INFO commandstats` is not allowed.
    pub(super) commands: Option<CommandCost>,
    /// `SET NX` tries per section (busy-retry only).
    pub(super) attempts_per_section: Option<f64>,
    /// Slices whose final counter equalled their sections.
    pub(super) counters_matched: usize,
    /// The most that the processes' starts of one slice lay apart.
    #[serde(rename = "start_skew_max_us", serialize_with = "super::stats::micros")]
    pub(super) start_skew_max: Duration,
    /// Failed correctness checks and worker errors.
    pub(super) failures: Vec<String>,
}

/// One point: both sides at one number of contenders.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Point {
    pub(super) contenders: usize,
    pub(super) processes: usize,
    pub(super) pairs: usize,
    #[serde(rename = "slice_us", serialize_with = "super::stats::micros")]
    pub(super) slice: Duration,
    pub(super) redlease: SideResult,
    pub(super) busy_retry: SideResult,
    /// redlease / busy-retry sections per second, one value per pair.
    pub(super) ratio: SliceSpread,
}

impl Point {
    /// Every failed check of both sides.
    pub(super) fn failures(&self) -> impl Iterator<Item = &String> {
        self.redlease
            .failures
            .iter()
            .chain(&self.busy_retry.failures)
    }
}

/// One measured slice of one side, summed over the processes.
struct SliceResult {
    sections: u64,
    attempts: u64,
    elapsed: Duration,
    /// Last process's start minus first process's start.
    start_skew: Duration,
    per_task: Vec<(usize, u64)>,
    waits: Waits,
    section_ns: u64,
    delta: Option<CommandDelta>,
    counter: u64,
    errors: Vec<String>,
}

/// One worker process and its pipes.
struct WorkerProcess {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl WorkerProcess {
    async fn next_line(&mut self, patience: Duration) -> anyhow::Result<String> {
        match tokio::time::timeout(patience, self.stdout.next_line()).await {
            Ok(Ok(Some(line))) => Ok(line),
            Ok(Ok(None)) => {
                let status = self.child.wait().await?;
                bail!("a bench worker process exited ({status}); its error is above")
            }
            Ok(Err(e)) => Err(e).context("reading a bench worker's report"),
            Err(_) => bail!(
                "a bench worker process did not answer within {}",
                humantime::format_duration(patience)
            ),
        }
    }
}

/// The worker processes of one point, and the keys they work on.
pub(super) struct Workers {
    processes: Vec<WorkerProcess>,
    contenders: usize,
    counter: String,
}

impl Workers {
    /// Starts `setup.processes` workers (at most one per contender) sharing
    /// `setup.contenders` tasks, and waits until all have connected.
    pub(super) async fn start(env: &Env, setup: &Setup, name: &str) -> anyhow::Result<Self> {
        let lock = env.name(name);
        if let Ok(keys) = redlease::LockKeys::new(redlease::DEFAULT_PREFIX, &lock) {
            env.clean_up_keys(&keys);
        }
        let bare_key = env.key(name);
        let counter = env.key(&format!("{name}:counter"));
        env.clean_up(&bare_key);
        env.clean_up(&counter);
        let exe = std::env::current_exe().context("finding the redlease binary")?;
        let count = setup.processes.clamp(1, setup.contenders.max(1));
        let mut processes = Vec::with_capacity(count);
        let mut first_task = 0;
        for i in 0..count {
            // The first `contenders % count` processes take one task more.
            let tasks = setup.contenders / count + usize::from(i < setup.contenders % count);
            let mut child = tokio::process::Command::new(&exe)
                .arg("bench-worker")
                .args(["--tasks", &tasks.to_string()])
                .args(["--first-task", &first_task.to_string()])
                .args([
                    "--lock",
                    &lock,
                    "--bare-key",
                    &bare_key,
                    "--counter",
                    &counter,
                ])
                .env("REDIS_URL", &env.url)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .kill_on_drop(true)
                .spawn()
                .context("starting a bench worker process")?;
            first_task += tasks;
            let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
                bail!("a bench worker process has no stdin or stdout");
            };
            processes.push(WorkerProcess {
                child,
                stdin,
                stdout: BufReader::new(stdout).lines(),
            });
        }
        for p in &mut processes {
            let line = p.next_line(WORKER_PATIENCE).await?;
            if line != READY {
                bail!("a bench worker process said {line:?} instead of {READY:?}");
            }
        }
        Ok(Self {
            processes,
            contenders: setup.contenders,
            counter,
        })
    }

    /// Runs one slice of `side` in every process; `measured` takes command counts and
    /// checks the counter.
    async fn slice(
        &mut self,
        env: &Env,
        side: Side,
        length: Duration,
    ) -> anyhow::Result<SliceResult> {
        env.reset_counter(&self.counter).await?;
        let (reports, delta) = env.counting(self.run_slice(side, length)).await;
        let reports = reports?;
        let counter = env.read_counter(&self.counter).await?;
        Ok(SliceResult::sum(reports, delta, counter))
    }

    /// Sends one slice of `side` to every process and collects their reports.
    async fn run_slice(
        &mut self,
        side: Side,
        length: Duration,
    ) -> anyhow::Result<Vec<ProcessReport>> {
        let start = unix_ns() + nanos(START_MARGIN);
        let slice = Slice {
            side,
            start_unix_ns: start,
            end_unix_ns: start + nanos(length),
        };
        let mut line = serde_json::to_string(&slice)?;
        line.push('\n');
        for p in &mut self.processes {
            p.stdin
                .write_all(line.as_bytes())
                .await
                .context("sending a slice to a bench worker process")?;
            p.stdin.flush().await?;
        }
        let mut reports = Vec::with_capacity(self.processes.len());
        for p in &mut self.processes {
            let line = p.next_line(length + START_MARGIN + WORKER_PATIENCE).await?;
            let report: ProcessReport =
                serde_json::from_str(&line).context("reading a bench worker's report")?;
            reports.push(report);
        }
        Ok(reports)
    }

    /// Closes the workers' stdin and waits for them to exit.
    pub(super) async fn stop(self) {
        for p in self.processes {
            let WorkerProcess {
                mut child, stdin, ..
            } = p;
            drop(stdin);
            match tokio::time::timeout(WORKER_PATIENCE, child.wait()).await {
                Ok(Ok(status)) if status.success() => {}
                Ok(Ok(status)) => tracing::warn!(%status, "a bench worker process failed"),
                Ok(Err(e)) => tracing::warn!(error = %e, "waiting for a bench worker process"),
                // Dropped with kill_on_drop: killed by PID.
                Err(_) => tracing::warn!("a bench worker process did not exit; killing it"),
            }
        }
    }
}

impl SliceResult {
    fn sum(reports: Vec<ProcessReport>, delta: Option<CommandDelta>, counter: u64) -> Self {
        let started = reports.iter().map(|r| r.started_unix_ns).min().unwrap_or(0);
        let last_started = reports.iter().map(|r| r.started_unix_ns).max().unwrap_or(0);
        let ended = reports.iter().map(|r| r.ended_unix_ns).max().unwrap_or(0);
        let mut sum = Self {
            sections: 0,
            attempts: 0,
            elapsed: Duration::from_nanos(ended.saturating_sub(started)),
            start_skew: Duration::from_nanos(last_started.saturating_sub(started)),
            per_task: Vec::new(),
            waits: Waits::default(),
            section_ns: 0,
            delta,
            counter,
            errors: Vec::new(),
        };
        for r in reports {
            for t in &r.tasks {
                sum.sections += t.sections;
                sum.attempts += t.attempts;
                sum.per_task.push((t.id, t.sections));
            }
            sum.waits.merge(&r.waits);
            sum.section_ns += r.section_ns;
            sum.errors.extend(r.errors);
        }
        sum
    }
}

/// Sums up the measured slices of one side.
fn side_result(side: Side, contenders: usize, slices: &[SliceResult], label: &str) -> SideResult {
    let sections: u64 = slices.iter().map(|s| s.sections).sum();
    let attempts: u64 = slices.iter().map(|s| s.attempts).sum();
    let mut per_task = vec![0; contenders];
    let mut waits = Waits::default();
    let mut failures = Vec::new();
    let mut delta = Some(CommandDelta::default());
    for (i, s) in slices.iter().enumerate() {
        for &(id, n) in &s.per_task {
            if let Some(slot) = per_task.get_mut(id) {
                *slot += n;
            }
        }
        waits.merge(&s.waits);
        delta = delta.zip(s.delta.clone()).map(|(mut a, b)| {
            a += b;
            a
        });
        if s.counter != s.sections {
            failures.push(format!(
                "{label}, slice {}: the counter is {} after {} critical sections: sections overlapped",
                i + 1,
                s.counter,
                s.sections
            ));
        }
        if !s.errors.is_empty() {
            failures.push(format!(
                "{label}, slice {}: {} worker errors, the first: {}",
                i + 1,
                s.errors.len(),
                s.errors[0]
            ));
        }
    }
    let section_ns: u64 = slices.iter().map(|s| s.section_ns).sum();
    let plain = SECTION_COMMANDS * sections + attempts;
    SideResult {
        side,
        sections_per_sec: SliceSpread::of(
            slices
                .iter()
                .map(|s| per_second(s.sections, s.elapsed))
                .collect(),
        ),
        sections,
        per_task,
        wait: waits.summary(),
        mean_section: Duration::from_nanos(section_ns.checked_div(sections).unwrap_or(0)),
        commands: delta.map(|d| CommandCost::new(d, plain, SECTION_COMMANDS * sections, sections)),
        attempts_per_section: (side == Side::BusyRetry).then(|| ratio(attempts, sections)),
        counters_matched: slices.iter().filter(|s| s.counter == s.sections).count(),
        start_skew_max: slices
            .iter()
            .map(|s| s.start_skew)
            .max()
            .unwrap_or_default(),
        failures,
    }
}

/// Measures one point: starts the workers, warms both sides up, runs `setup.pairs`
/// alternating pairs of slices, stops the workers. `label` names the point in progress
/// lines and failures.
pub(super) async fn point(
    env: &Env,
    setup: &Setup,
    name: &str,
    label: &str,
) -> anyhow::Result<Point> {
    env.progress(&format!(
        "{label}: starting {} worker processes",
        setup.processes
    ));
    let mut workers = Workers::start(env, setup, name).await?;
    let outcome = async {
        for side in [Side::Redlease, Side::BusyRetry] {
            workers.slice(env, side, setup.warm_up()).await?;
        }
        let mut ours = Vec::with_capacity(setup.pairs);
        let mut bare = Vec::with_capacity(setup.pairs);
        for pair in 1..=setup.pairs {
            env.progress(&format!("{label}: slice pair {pair}/{}", setup.pairs));
            ours.push(workers.slice(env, Side::Redlease, setup.slice).await?);
            bare.push(workers.slice(env, Side::BusyRetry, setup.slice).await?);
        }
        anyhow::Ok((ours, bare))
    }
    .await;
    let contenders = workers.contenders;
    let processes = workers.processes.len();
    workers.stop().await;
    let (ours, bare) = outcome?;
    let ratio = ours
        .iter()
        .zip(&bare)
        .map(|(o, b)| {
            share(
                per_second(o.sections, o.elapsed),
                per_second(b.sections, b.elapsed),
            )
        })
        .collect();
    Ok(Point {
        contenders,
        processes,
        pairs: setup.pairs,
        slice: setup.slice,
        redlease: side_result(
            Side::Redlease,
            contenders,
            &ours,
            &format!("{label}, redlease"),
        ),
        busy_retry: side_result(
            Side::BusyRetry,
            contenders,
            &bare,
            &format!("{label}, busy-retry"),
        ),
        ratio: SliceSpread::of(ratio),
    })
}

/// Appends the table of `points`: a row per point and side.
pub(super) fn render_points(out: &mut String, points: &[Point]) -> std::fmt::Result {
    let mut rows = Vec::with_capacity(points.len() * 2);
    for p in points {
        for side in [&p.redlease, &p.busy_retry] {
            let slices = side.sections_per_sec.slices.len();
            rows.push(vec![
                p.contenders.to_string(),
                match side.side {
                    Side::Redlease => "redlease".to_owned(),
                    Side::BusyRetry => "busy-retry".to_owned(),
                },
                format!("{:.0}", side.sections_per_sec.spread.median),
                format!(
                    "{:.0}..{:.0}",
                    side.sections_per_sec.spread.min, side.sections_per_sec.spread.max
                ),
                duration(side.wait.p50),
                duration(side.wait.p99),
                duration(side.wait.max),
                duration(side.mean_section),
                side.commands
                    .as_ref()
                    .map_or_else(|| "n/a".to_owned(), |c| format!("{:.2}", c.total)),
                fewest_most(&side.per_task),
                if side.counters_matched == slices {
                    format!("{slices}/{slices} ok")
                } else {
                    format!("{}/{slices} FAIL", side.counters_matched)
                },
            ]);
        }
    }
    table(
        out,
        &[
            "contenders",
            "side",
            "sections/s",
            "min..max",
            "wait p50",
            "wait p99",
            "max wait",
            "section",
            "cmds/section",
            "per task",
            "counters",
        ],
        &rows,
    )?;
    for p in points {
        writeln!(
            out,
            "  {} contenders: redlease / busy-retry sections/s {:.2}x (median of {} pairs; {:.2}..{:.2}); \
             processes started within {} of each other",
            p.contenders,
            p.ratio.spread.median,
            p.pairs,
            p.ratio.spread.min,
            p.ratio.spread.max,
            duration(p.redlease.start_skew_max.max(p.busy_retry.start_skew_max)),
        )?;
    }
    for failure in points.iter().flat_map(Point::failures) {
        writeln!(out, "  FAILED: {failure}")?;
    }
    writeln!(
        out,
        "  sections/s: median and min..max over the slices; wait: time inside one acquire (max =\n  \
         the longest wait of any task); section: mean time inside one critical section (GET +\n  \
         SET); cmds: all commands Redis ran per section (scripts' inner calls, the section's\n  \
         GET + SET and busy-retry's SET NX tries included); per task: fewest..most sections of\n  \
         one task over all slices; counters: slices whose counter equalled their sections"
    )
}
