//! The cancellation storm (`redlease-chaos worker --storm`): a worker that drops its
//! `acquire` and `run` futures at random points, the way `tokio::time::timeout` or
//! `select!` do in applications.
//!
//! Every round picks, at random:
//! - `acquire()` then `release()`, or `run(work)`;
//! - the lock's wait: 200 ms (one round in four) or the worker's `--wait`;
//! - when to drop the future: never; at a random deadline 0-60 ms after the wait began
//!   (during the wait, the work, or the release); or right after the work, while the
//!   release is in flight (the future is polled once more after the work ended, so the
//!   release has been sent or queued, then dropped).
//!
//! The judge must still see a consistent history when a future is dropped half-way. Its
//! pipe runs on a task of its own ([`Pipe`]): a send whose future is dropped still
//! completes, so a cancelled section never leaves the pipe mid-line. The worker tracks
//! what it told the judge ([`Told`]); when it drops a future that had acquired, it first
//! sends the `END` and `REL` the section did not get to send, and only then drops the
//! future (which drops the guard): the next holder's `ACQ` cannot be stamped before them.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::anyhow;
use redlease_chaos::{Kind, Verdict};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::Instant;

use crate::link::{Jitter, Link, claim};

type Reply = oneshot::Sender<anyhow::Result<Option<Verdict>>>;

/// One line for the pipe's task: its kind, token, bound (a `WAIT`'s), claim (a `BEGIN`'s)
/// and where the answer goes.
type Request = (Kind, u64, Option<Duration>, Option<Duration>, Reply);

/// The pipe to the judge, served by a task of its own.
#[derive(Clone)]
struct Pipe {
    tx: mpsc::UnboundedSender<Request>,
    stop: Arc<AtomicBool>,
}

impl Pipe {
    fn start(mut link: Link) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<Request>();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        tokio::spawn(async move {
            while let Some((kind, token, bound, until, reply)) = rx.recv().await {
                link.until = until;
                let answer = link.send_bounded(kind, token, bound).await;
                if link.stop() {
                    stopped.store(true, Ordering::SeqCst);
                }
                let failed = answer.is_err();
                let _ = reply.send(answer);
                if failed {
                    break;
                }
            }
        });
        Self { tx, stop }
    }

    /// Sends one event; the line goes out (and is answered) even if this future is dropped.
    async fn send(&self, kind: Kind, token: u64) -> anyhow::Result<Option<Verdict>> {
        self.line(kind, token, None, None).await
    }

    async fn send_bounded(
        &self,
        kind: Kind,
        token: u64,
        bound: Option<Duration>,
    ) -> anyhow::Result<Option<Verdict>> {
        self.line(kind, token, bound, None).await
    }

    /// Sends a `BEGIN` with the guard's claim (see [`crate::link::claim`]).
    async fn begin(&self, token: u64, until: Option<Duration>) -> anyhow::Result<()> {
        self.line(Kind::Begin, token, None, until).await.map(drop)
    }

    async fn line(
        &self,
        kind: Kind,
        token: u64,
        bound: Option<Duration>,
        until: Option<Duration>,
    ) -> anyhow::Result<Option<Verdict>> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send((kind, token, bound, until, reply))
            .map_err(|_| anyhow!("the pipe to the judge is closed"))?;
        answer
            .await
            .map_err(|_| anyhow!("the pipe to the judge is closed"))?
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

/// What the judge was told of the current round.
#[derive(Debug, Default, Clone, Copy)]
struct Told {
    /// `ACQ` was sent this round.
    acquired: bool,
    /// The token of the hold the judge believes in (`ACQ` sent, no `REL`/`LOST` yet).
    holding: Option<u64>,
    /// `BEGIN` sent without its `END`.
    inside: bool,
}

type Shared = Arc<Mutex<Told>>;

fn told(shared: &Shared) -> std::sync::MutexGuard<'_, Told> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// When to drop the round's future.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Abandon {
    Never,
    At(Instant),
    /// After this many polls that left the future pending.
    AfterPolls(u32),
    /// Right after the work, during the release.
    InRelease,
}

/// Runs the storm until the judge says stop or `deadline`.
pub(crate) async fn storm(
    link: Link,
    lock: &redlease::Lock,
    wait: Duration,
    mut rng: Jitter,
    deadline: Instant,
) -> anyhow::Result<ExitCode> {
    let pipe = Pipe::start(link);
    let shared: Shared = Arc::default();
    while !pipe.stopped() && Instant::now() < deadline {
        let wait = if rng.below(4) == 0 {
            Duration::from_millis(200)
        } else {
            wait
        };
        let lock = lock.clone().wait(wait);
        let drop = match rng.below(4) {
            0 => Abandon::Never,
            1 => Abandon::At(Instant::now() + Duration::from_millis(rng.below(61))),
            2 => Abandon::AfterPolls(1 + u32::try_from(rng.below(6)).unwrap_or(0)),
            _ => Abandon::InRelease,
        };
        let work = rng.work();
        *told(&shared) = Told::default();
        pipe.send_bounded(Kind::Wait, 0, Some(wait)).await?;
        if rng.below(2) == 0 {
            acquire_round(&pipe, &lock, drop, work).await?;
        } else {
            run_round(&pipe, &lock, drop, work, &shared).await?;
        }
    }
    pipe.send(Kind::Bye, 0).await?;
    Ok(ExitCode::SUCCESS)
}

/// Reports a failed acquisition; sleeps a little after an error other than a timeout.
async fn failed(pipe: &Pipe, e: &redlease::Error) -> anyhow::Result<()> {
    if matches!(e, redlease::Error::Timeout { .. }) {
        pipe.send(Kind::Timeout, 0).await?;
    } else {
        pipe.send(Kind::Error, 0).await?;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// `acquire()` and `release()`, each under the round's deadline.
async fn acquire_round(
    pipe: &Pipe,
    lock: &redlease::Lock,
    drop: Abandon,
    work: Duration,
) -> anyhow::Result<()> {
    let acquired = match drop {
        Abandon::At(at) => tokio::time::timeout_at(at, lock.acquire()).await.ok(),
        Abandon::AfterPolls(n) => Polls::new(Box::pin(lock.acquire()), n).await,
        Abandon::Never | Abandon::InRelease => Some(lock.acquire().await),
    };
    let guard = match acquired {
        None => {
            pipe.send(Kind::Cancel, 0).await?;
            return Ok(());
        }
        Some(Err(e)) => return failed(pipe, &e).await,
        Some(Ok(guard)) => guard,
    };
    let token = guard.fencing_token().get();
    pipe.send(Kind::Acquire, token).await?;
    // The section borrows the guard (for its claim); it ends before the release.
    let lost = {
        let section = async {
            pipe.begin(token, claim(|| guard.remaining())).await?;
            tokio::time::sleep(work).await;
            pipe.send(Kind::Write, token).await?;
            pipe.send(Kind::End, token).await?;
            anyhow::Ok(())
        };
        tokio::pin!(section);
        // A loss is reported the moment it is seen; the pipe's task never waits on us.
        tokio::select! {
            done = &mut section => {
                done?;
                false
            }
            () = guard.lost() => {
                pipe.send(Kind::Lost, token).await?;
                section.await?;
                true
            }
        }
    };
    pipe.send(Kind::Release, token).await?;
    let release = guard.release();
    let released = match drop {
        Abandon::Never => Some(release.await),
        Abandon::At(at) => tokio::time::timeout_at(at, release).await.ok(),
        // Polled once (the release is sent or queued), then dropped.
        Abandon::InRelease | Abandon::AfterPolls(_) => {
            tokio::time::timeout(Duration::ZERO, release).await.ok()
        }
    };
    match released {
        None => {
            pipe.send(Kind::Cancel, token).await?;
        }
        Some(Err(redlease::Error::Lost { .. })) if !lost => {
            pipe.send(Kind::Lost, token).await?;
        }
        Some(_) => {}
    }
    Ok(())
}

/// `run(work)` under the round's deadline, or dropped during its release.
async fn run_round(
    pipe: &Pipe,
    lock: &redlease::Lock,
    drop: Abandon,
    work: Duration,
    shared: &Shared,
) -> anyhow::Result<()> {
    let worked = Arc::new(Notify::new());
    let mut run = Box::pin(lock.run(async |guard| {
        let token = guard.fencing_token().get();
        *told(shared) = Told {
            acquired: true,
            holding: Some(token),
            inside: false,
        };
        pipe.send(Kind::Acquire, token).await?;
        told(shared).inside = true;
        pipe.begin(token, claim(|| guard.remaining())).await?;
        tokio::time::sleep(work).await;
        pipe.send(Kind::Write, token).await?;
        told(shared).inside = false;
        pipe.send(Kind::End, token).await?;
        told(shared).holding = None;
        pipe.send(Kind::Release, token).await?;
        worked.notify_one();
        anyhow::Ok(())
    }));
    let at = match drop {
        Abandon::At(at) => Some(at),
        Abandon::Never | Abandon::InRelease | Abandon::AfterPolls(_) => None,
    };
    let polls = match drop {
        Abandon::AfterPolls(n) => n,
        _ => u32::MAX,
    };
    let outcome = tokio::select! {
        biased;
        out = Polls::new(&mut run, polls) => out,
        () = async {
            match at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        } => None,
        () = worked.notified(), if drop == Abandon::InRelease => {
            // The work is over and `run` is releasing: one more poll, then drop it.
            tokio::time::timeout(Duration::ZERO, &mut run).await.ok()
        }
    };
    let now = *told(shared);
    match outcome {
        None => {
            // Tell the judge the section and the hold are over before the guard goes.
            if let Some(token) = now.holding {
                if now.inside {
                    pipe.send(Kind::End, token).await?;
                }
                pipe.send(Kind::Release, token).await?;
            }
            *told(shared) = Told::default();
            pipe.send(Kind::Cancel, now.holding.unwrap_or(0)).await?;
            std::mem::drop(run);
        }
        Some(Ok(())) => {}
        Some(Err(e)) => {
            let Some(error) = e.downcast_ref::<redlease::Error>() else {
                return Err(e);
            };
            match (error, now) {
                (
                    redlease::Error::Lost { .. },
                    Told {
                        holding, inside, ..
                    },
                ) => {
                    let token = holding.unwrap_or(0);
                    if inside {
                        pipe.send(Kind::End, token).await?;
                    }
                    pipe.send(Kind::Lost, token).await?;
                }
                (
                    e,
                    Told {
                        acquired: false, ..
                    },
                ) => failed(pipe, e).await?,
                // Another error after the work (the release could not reach Redis): the
                // hold already ended for the judge.
                _ => {}
            }
        }
    }
    Ok(())
}

/// Polls a future until it finishes (`Some`) or has been left pending `n` times (`None`;
/// the caller then drops it where it stands).
struct Polls<F> {
    future: F,
    left: u32,
}

impl<F: Future + Unpin> Polls<F> {
    fn new(future: F, n: u32) -> Self {
        Self { future, left: n }
    }
}

impl<F: Future + Unpin> Future for Polls<F> {
    type Output = Option<F::Output>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        if let std::task::Poll::Ready(out) = std::pin::Pin::new(&mut self.future).poll(cx) {
            return std::task::Poll::Ready(Some(out));
        }
        self.left = self.left.saturating_sub(1);
        if self.left == 0 {
            std::task::Poll::Ready(None)
        } else {
            std::task::Poll::Pending
        }
    }
}
