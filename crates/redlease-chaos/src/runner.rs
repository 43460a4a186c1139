//! The parent side of a scenario: worker processes, the judge they report to, and the
//! events the fault schedule waits on.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use anyhow::Context as _;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use redlease_chaos::{Judge, Kind, Mode, Primitive, Verdict, WorkerLine};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::Child;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::link::Next;
use crate::worker::{Deployment, ShortenHow};

/// How to start a worker of this scenario.
#[derive(Debug, Clone)]
pub(crate) struct WorkerSpec {
    pub(crate) deployment: Deployment,
    pub(crate) urls: Vec<String>,
    pub(crate) ttl: Duration,
    /// The workers' response timeout (`worker --response-timeout`), if not the default.
    pub(crate) response_timeout: Option<Duration>,
    pub(crate) min_replicas: usize,
    /// The lock's wait in every worker.
    pub(crate) wait: Duration,
    /// Workers run the cancellation storm (`worker --storm`).
    pub(crate) storm: bool,
    /// What the workers hold (`worker --permits N`, `worker --rwlock`, `worker --multi N`,
    /// `worker --elect`).
    pub(crate) primitive: Primitive,
    /// Every section extends its lease to this shorter ttl (`worker --shorten`), and how
    /// the extend goes wrong.
    pub(crate) shorten: Option<(Duration, ShortenHow)>,
}

/// Worker processes and their judge.
pub(crate) struct Runner {
    judge: Arc<Mutex<Judge>>,
    changed: watch::Sender<u64>,
    stop: Arc<AtomicBool>,
    workers: HashMap<u32, Child>,
    next_id: u32,
    spec: WorkerSpec,
    hold: Arc<Mutex<Hold>>,
    /// What each worker's next attempt is to be (`next=WHAT`), sent with the next answer
    /// to it.
    next: Arc<Mutex<HashMap<u32, Next>>>,
    /// Every answer says `reads` (see [`reads_only`](Self::reads_only)).
    reads: Arc<AtomicBool>,
}

/// A request to keep the next critical section open (see [`Runner::hold_next_section`]).
#[derive(Debug, Default)]
struct Hold {
    /// How long the next section to begin stays open, at most.
    armed: Option<Duration>,
    /// The worker that was told to hold.
    given_to: Option<u32>,
    /// Only a section of this mode (a read-write lock's side) takes the hold.
    mode: Option<Mode>,
    /// The holder ends its process right after the section's release.
    exit: bool,
}

fn locked(judge: &Mutex<Judge>) -> MutexGuard<'_, Judge> {
    judge.lock().unwrap_or_else(PoisonError::into_inner)
}

fn locked_hold(hold: &Mutex<Hold>) -> MutexGuard<'_, Hold> {
    hold.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The hold armed for the next section, now given to `worker` (whose section is of
/// `mode`), and whether it is to exit after its release.
fn take_hold(hold: &Mutex<Hold>, worker: u32, mode: Option<Mode>) -> Option<(Duration, bool)> {
    let mut hold = locked_hold(hold);
    if hold.mode.is_some() && hold.mode != mode {
        return None;
    }
    let armed = hold.armed.take()?;
    hold.given_to = Some(worker);
    Some((armed, hold.exit))
}

impl Runner {
    pub(crate) fn new(spec: WorkerSpec) -> Self {
        Self {
            judge: Arc::new(Mutex::new(Judge::of(spec.primitive))),
            changed: watch::Sender::new(0),
            stop: Arc::new(AtomicBool::new(false)),
            workers: HashMap::new(),
            next_id: 1,
            spec,
            hold: Arc::new(Mutex::new(Hold::default())),
            next: Arc::new(Mutex::new(HashMap::new())),
            reads: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Starts one more worker process; returns its id.
    pub(crate) fn spawn(&mut self) -> anyhow::Result<u32> {
        let urls = self.spec.urls.clone();
        self.spawn_with(&urls)
    }

    /// Starts one more worker process that reaches Redis through `urls` instead of the
    /// spec's (e.g. proxies of its own, to partition it alone); returns its id.
    pub(crate) fn spawn_with(&mut self, urls: &[String]) -> anyhow::Result<u32> {
        let id = self.next_id;
        self.next_id += 1;
        let exe = std::env::current_exe().context("finding the redlease-chaos binary")?;
        let deployment = clap::ValueEnum::to_possible_value(&self.spec.deployment)
            .map(|v| v.get_name().to_owned())
            .unwrap_or_default();
        let mut cmd = tokio::process::Command::new(exe);
        cmd.args([
            "worker",
            "--id",
            &id.to_string(),
            "--deployment",
            &deployment,
        ])
        .arg("--ttl")
        .arg(humantime::format_duration(self.spec.ttl).to_string())
        .args(["--min-replicas", &self.spec.min_replicas.to_string()])
        .arg("--wait")
        .arg(humantime::format_duration(self.spec.wait).to_string());
        if let Some(timeout) = self.spec.response_timeout {
            cmd.arg("--response-timeout")
                .arg(humantime::format_duration(timeout).to_string());
        }
        self.primitive_args(&mut cmd);
        for url in urls {
            cmd.args(["--url", url]);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("starting a worker process")?;
        let (Some(stdout), Some(mut stdin)) = (child.stdout.take(), child.stdin.take()) else {
            anyhow::bail!("a worker has no pipes");
        };
        let (judge, changed, stop, hold, next, reads) = (
            Arc::clone(&self.judge),
            self.changed.clone(),
            Arc::clone(&self.stop),
            Arc::clone(&self.hold),
            Arc::clone(&self.next),
            Arc::clone(&self.reads),
        );
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(text)) = lines.next_line().await {
                let Ok(line) = text.parse::<WorkerLine>() else {
                    tracing::warn!(%text, "bad worker line");
                    continue;
                };
                let mut hold_for = (line.kind == Kind::Begin)
                    .then(|| take_hold(&hold, line.worker, line.mode))
                    .flatten()
                    .map(|(d, exit)| {
                        format!(" hold={}{}", d.as_millis(), if exit { " exit" } else { "" })
                    })
                    .unwrap_or_default();
                if let Some(what) = next
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&line.worker)
                {
                    hold_for.push_str(" next=");
                    hold_for.push_str(what.word());
                }
                if reads.load(Ordering::SeqCst) {
                    hold_for.push_str(" reads");
                }
                let verdict = locked(&judge).receive(line);
                changed.send_modify(|n| *n += 1);
                let word = match verdict {
                    Some(Verdict::Accepted) => "acc",
                    Some(Verdict::Rejected) => "rej",
                    None => "ok",
                };
                let stop = if stop.load(Ordering::SeqCst) {
                    " stop"
                } else {
                    ""
                };
                if stdin
                    .write_all(format!("{word}{stop}{hold_for}\n").as_bytes())
                    .await
                    .is_err()
                {
                    break;
                }
            }
        });
        self.workers.insert(id, child);
        Ok(id)
    }

    /// The worker arguments of the spec's storm, primitive and shortening extends.
    fn primitive_args(&self, cmd: &mut tokio::process::Command) {
        if self.spec.storm {
            cmd.arg("--storm");
        }
        if let Some((short, how)) = self.spec.shorten {
            cmd.arg("--shorten")
                .arg(humantime::format_duration(short).to_string())
                .arg("--shorten-fault")
                .arg(match how {
                    ShortenHow::Dropped => "dropped",
                    ShortenHow::Slow => "slow",
                });
        }
        match self.spec.primitive {
            Primitive::Mutex => {}
            Primitive::Semaphore { permits } => {
                cmd.args(["--permits", &permits.to_string()]);
            }
            Primitive::RwLock => {
                cmd.arg("--rwlock");
            }
            Primitive::Election => {
                cmd.arg("--elect");
            }
            Primitive::MultiLock { names } => {
                cmd.args(["--multi", &names.to_string()]);
            }
        }
    }

    /// What the workers hold.
    pub(crate) fn primitive(&self) -> Primitive {
        self.spec.primitive
    }

    /// Records a runner event.
    pub(crate) fn record(&self, kind: Kind, worker: u32) {
        locked(&self.judge).record(kind, worker);
        self.changed.send_modify(|n| *n += 1);
    }

    /// Reads the judge.
    pub(crate) fn with_judge<T>(&self, f: impl FnOnce(&Judge) -> T) -> T {
        f(&locked(&self.judge))
    }

    /// Waits until `done` holds of the judge, or `timeout`; says whether it held.
    pub(crate) async fn wait_for(&self, timeout: Duration, done: impl Fn(&Judge) -> bool) -> bool {
        let mut rx = self.changed.subscribe();
        let deadline = Instant::now() + timeout;
        loop {
            if self.with_judge(&done) {
                return true;
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                _ => return self.with_judge(&done),
            }
        }
    }

    /// Waits until `n` more sections have ended (or `timeout`).
    pub(crate) async fn sections(&self, n: usize, timeout: Duration) -> bool {
        // A multi-lock section ends once per name (two: see `worker --multi`).
        let ends = match self.spec.primitive {
            Primitive::MultiLock { .. } => n * 2,
            Primitive::Mutex
            | Primitive::Election
            | Primitive::Semaphore { .. }
            | Primitive::RwLock => n,
        };
        let target = self.with_judge(|j| j.count(Kind::End)) + ends;
        self.wait_for(timeout, |j| j.count(Kind::End) >= target)
            .await
    }

    /// Tells the next worker to begin a critical section to keep it open for up to
    /// `hold`, or until it learns its lease was lost: a holder that stays a holder while a
    /// fault is injected. See [`held_by`](Self::held_by).
    pub(crate) fn hold_next_section(&self, hold: Duration) {
        self.hold_next_section_of(hold, None, false);
    }

    /// [`hold_next_section`](Self::hold_next_section) for the next section of `mode` only
    /// (a read-write lock's side; `None`: any), whose holder ends its process right after
    /// its release if `exit`.
    pub(crate) fn hold_next_section_of(&self, hold: Duration, mode: Option<Mode>, exit: bool) {
        *locked_hold(&self.hold) = Hold {
            armed: Some(hold),
            given_to: None,
            mode,
            exit,
        };
    }

    /// While `on`, every worker's attempts take the read side of a read-write lock unless
    /// asked otherwise ([`direct`](Self::direct)): from the next answer to each.
    pub(crate) fn reads_only(&self, on: bool) {
        self.reads.store(on, Ordering::SeqCst);
    }

    /// Asks `worker`'s next attempt to be `what` (sent with the next answer to it).
    pub(crate) fn direct(&self, worker: u32, what: Next) {
        self.next
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(worker, what);
    }

    /// Waits (at most `timeout`) until a worker was told to hold its section after
    /// [`hold_next_section`](Self::hold_next_section), and returns it; `None` on timeout,
    /// when the request is withdrawn.
    pub(crate) async fn held_by(&self, timeout: Duration) -> Option<u32> {
        let mut rx = self.changed.subscribe();
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(worker) = locked_hold(&self.hold).given_to {
                return Some(worker);
            }
            if !matches!(
                tokio::time::timeout_at(deadline, rx.changed()).await,
                Ok(Ok(()))
            ) {
                let mut hold = locked_hold(&self.hold);
                hold.armed = None;
                return hold.given_to;
            }
        }
    }

    fn pid(&self, worker: u32) -> anyhow::Result<Pid> {
        let pid = self
            .workers
            .get(&worker)
            .and_then(Child::id)
            .context("worker gone")?;
        Ok(Pid::from_raw(i32::try_from(pid)?))
    }

    /// SIGKILLs a worker (recording it first) and reaps it.
    pub(crate) async fn kill(&mut self, worker: u32) -> anyhow::Result<()> {
        let pid = self.pid(worker)?;
        self.record(Kind::Kill, worker);
        kill(pid, Signal::SIGKILL).context("killing a worker")?;
        if let Some(mut child) = self.workers.remove(&worker) {
            let _ = child.wait().await;
        }
        Ok(())
    }

    /// Makes a waiting worker give up its wait (SIGUSR1: it drops its `acquire` future and
    /// reports `CANCEL`).
    pub(crate) fn give_up(&self, worker: u32) -> anyhow::Result<()> {
        kill(self.pid(worker)?, Signal::SIGUSR1).context("signalling a worker")
    }

    /// How many worker processes run.
    pub(crate) fn len(&self) -> usize {
        self.workers.len()
    }

    /// The running workers, by id.
    pub(crate) fn ids(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = self.workers.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// The worker whose process is `pid`.
    pub(crate) fn worker_of_pid(&self, pid: u32) -> Option<u32> {
        self.workers
            .iter()
            .find(|(_, child)| child.id() == Some(pid))
            .map(|(&id, _)| id)
    }

    /// Reaps the workers whose processes ended (asked to exit after a release), recording
    /// each departure (`BYE`); returns how many.
    pub(crate) fn reap_exited(&mut self) -> usize {
        let ended: Vec<u32> = self
            .workers
            .iter_mut()
            .filter_map(|(&id, child)| matches!(child.try_wait(), Ok(Some(_))).then_some(id))
            .collect();
        for &id in &ended {
            self.workers.remove(&id);
            self.record(Kind::Bye, id);
        }
        ended.len()
    }

    /// Waits (at most `timeout`) for a worker that was asked to exit after its release to
    /// end, reaps it and records its departure (`BYE`); kills it if it did not end.
    pub(crate) async fn reap(&mut self, worker: u32, timeout: Duration) {
        if let Some(mut child) = self.workers.remove(&worker) {
            if tokio::time::timeout(timeout, child.wait()).await.is_err() {
                let _ = child.start_kill();
                let _ = child.wait().await;
            }
            self.record(Kind::Bye, worker);
        }
    }

    /// SIGSTOPs (`Kind::Pause`) or SIGCONTs (`Kind::Resume`) a worker, recording it.
    pub(crate) fn signal(&self, worker: u32, kind: Kind) -> anyhow::Result<()> {
        let pid = self.pid(worker)?;
        let signal = if kind == Kind::Pause {
            Signal::SIGSTOP
        } else {
            Signal::SIGCONT
        };
        if kind == Kind::Resume {
            // Stamped before the signal: detection time includes the wake-up.
            self.record(kind, worker);
        }
        kill(pid, signal).context("signalling a worker")?;
        if kind == Kind::Pause {
            self.record(kind, worker);
        }
        Ok(())
    }

    /// Tells every worker to stop after its current hold, waits for them (bounded), kills
    /// the rest, and returns the history.
    pub(crate) async fn finish(mut self) -> Vec<redlease_chaos::Event> {
        self.stop.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(15);
        for (_, mut child) in self.workers.drain() {
            if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
            }
            if tokio::time::timeout_at(deadline, child.wait())
                .await
                .is_err()
            {
                let _ = child.start_kill();
                let _ = child.wait().await;
            }
        }
        self.with_judge(|j| j.history().to_vec())
    }
}
