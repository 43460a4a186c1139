//! The renewal scheduler (watchdog): one task per [`Client`](crate::Client) keeps every
//! auto-renewed lease of that client alive.
//!
//! A lease of length `ttl` falls due for renewal `ttl/4` after it was last set ([`period`]).
//! When the scheduler wakes for the earliest due lease, it also takes every lease that
//! falls due within the next `ttl/8` of its own (renewing a little early costs nothing),
//! and renews
//! them in **pipelined round trips** of up to `ROUND_TRIP_LEASES`, a few in flight at once:
//! batches of
//! up to `BATCH` (in `scripts`) leases per `EVALSHA` of `scripts/lock_renew.lua`. Ten thousand
//! locks acquired within a few seconds of each other therefore cost ten round trips (and a
//! few dozen script calls) per interval, not ten thousand. A lock's renewal runs two calls
//! in Redis (`GET`, `PEXPIRE`); its holder details are kept several leases at a time
//! (`Lease::details_due`).
//!
//! A renewal that gets no answer within `ttl/15` ([`patience`]) shows as `Retrying` in the
//! lease's health at once (a silent network is told within a third of the ttl), and is
//! still waited for until `ttl/4`; one that meets a connection error, or gets no answer
//! by then, is retried every `ttl/10` (5 ms to 1 s) until the lease's
//! `valid_until`; only then is the lease declared lost (`valid_until` keeps a twentieth of
//! the ttl, plus the drift allowance, before Redis can expire the lease: `ttl::claim`).
//!
//! A renewal and an extend of one lease never overlap (`Lease::step`): a lease whose
//! extend is in flight is left out of a sweep and looked at again shortly, so every reply
//! is applied in the order Redis ran the requests. A renewal that finds
//! another token (or none) declares it lost at once. The task ends when no lease has been
//! left for [`IDLE_LINGER`] and starts again with the next one: a client that takes and
//! releases locks one after another keeps one task rather than spawning one per lease.

use hashbrown::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backend::Deployment;
use crate::lease::{Lease, State};
use crate::scripts::RenewItem;
use crate::ttl::ttl_millis;

/// The most leases one renewal round trip carries, and how many round trips of a sweep
/// are in flight at once. A lease's renewal costs Redis about 2-3 µs inside a script call
/// of up to `BATCH` leases, and Redis serves other clients between two calls; one round
/// trip after the other, a sweep would wait a round trip per thousand leases (50,000
/// leases of 3 s then outran the renewer on a loaded 2-vCPU machine: about 24,000
/// renewals/s); a few in flight keep Redis busy without one client's writes piling up.
const ROUND_TRIP_LEASES: usize = 1000;
const IN_FLIGHT: usize = 8;

/// How long after a renewal (or the grant, or an extend) was sent the next renewal of a
/// lease of `ttl` falls due: a quarter of the ttl. With the renewals' patience (how long
/// one is waited for before the lease's health says `Retrying`), whatever moment the
/// link to Redis goes silent, a renewal sent after it, or in flight then, has the lease
/// reported [`Retrying`](crate::LeaseHealth::Retrying) within `ttl/4 + ttl/15`, under a
/// third of the ttl; the rest of that third (`ttl/60`) is the scheduler's own slack. The
/// price is a renewal every quarter of the ttl rather than every third. A renewal
/// unanswered for a whole period is given up and retried.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// let every = redlease::diagnostics::renewal_period(Duration::from_secs(30));
/// assert_eq!(every, Duration::from_millis(7500));
/// ```
pub fn period(ttl: Duration) -> Duration {
    ttl / 4
}

/// How long a renewal round trip waits for its answer before the lease's health says
/// [`Retrying`](crate::LeaseHealth::Retrying): a fifteenth of the lease's ttl (see
/// [`period`]). The renewal is not given up then: an answer that comes later still renews
/// the lease (a loaded machine or a slow link is not a silent one), and only one that does
/// not come within [`period`] is a failed renewal, retried.
fn patience(ttl: Duration) -> Duration {
    ttl / 15
}

/// How long the scheduler task waits, with no lease left, for the next one before it ends.
const IDLE_LINGER: Duration = Duration::from_secs(1);

/// Renews every auto-renewed lease of one client.
pub(crate) struct Renewer {
    deployment: Arc<Deployment>,
    book: Mutex<Book>,
    wake: Notify,
    round_trips: AtomicU64,
    starts: AtomicU64,
}

#[derive(Default)]
struct Book {
    entries: HashMap<u64, Entry>,
    next_id: u64,
    /// Whether the scheduler task runs (changed only with the book locked).
    running: bool,
    /// When the sleeping task will wake by itself; `None` while it works. A new lease due
    /// earlier than this wakes it; others wait for the sweep (no wake-up per acquisition).
    wake_at: Option<Instant>,
}

struct Entry {
    lease: Weak<Lease>,
    /// When the next renewal is due.
    due: Instant,
    /// The `max_hold` budget: no renewal is sent after this.
    stop_at: Option<Instant>,
    /// The last renewal failed: send the next one when due, not early with others.
    retrying: bool,
}

/// What a sweep found.
struct Sweep {
    /// The leases to renew now.
    batch: Vec<Due>,
    /// When to look again.
    next: Instant,
    /// No lease is left.
    idle: bool,
}

/// A lease a sweep decided to renew.
struct Due {
    id: u64,
    lease: Arc<Lease>,
    ttl: Duration,
    /// How long this renewal keeps a lock's holder details, when it does.
    details: Option<Duration>,
    /// The lease's step, held until the renewal's outcome was applied.
    _step: tokio::sync::OwnedMutexGuard<()>,
}

impl Renewer {
    pub(crate) fn new(deployment: Arc<Deployment>) -> Arc<Self> {
        Arc::new(Self {
            deployment,
            book: Mutex::new(Book::default()),
            wake: Notify::new(),
            round_trips: AtomicU64::new(0),
            starts: AtomicU64::new(0),
        })
    }

    fn book(&self) -> MutexGuard<'_, Book> {
        // Every critical section leaves the book consistent, so a poisoned lock is usable.
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `lease` renewed until it is released, dropped or lost, or until `max_hold`
    /// has passed since `acquired`. Returns the entry's id for [`Renewer::remove`].
    pub(crate) fn add(
        self: &Arc<Self>,
        lease: &Arc<Lease>,
        acquired: Instant,
        max_hold: Option<Duration>,
    ) -> u64 {
        let mut book = self.book();
        let id = book.next_id;
        book.next_id += 1;
        let due = acquired + period(lease.ttl());
        book.entries.insert(
            id,
            Entry {
                lease: Arc::downgrade(lease),
                due,
                stop_at: max_hold.map(|m| acquired + m),
                retrying: false,
            },
        );
        if book.running {
            self.wake_for(&mut book, due);
        } else {
            book.running = true;
            // Made before the task, so that a task dropped before its first poll (its
            // runtime shutting down) also marks the scheduler stopped.
            let mut running = Running(Arc::clone(self), true);
            self.starts.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                let Running(renewer, armed) = &mut running;
                renewer.run_loop(armed).await;
            });
        }
        id
    }

    /// Wakes the scheduler for a lease due at `due`, unless it sleeps until earlier. While
    /// it is not asleep (`wake_at` unset: sweeping, renewing, or between its sweep and its
    /// sleep) the wake is stored as a permit, so a due moment set in that gap is not
    /// missed: the scheduler sweeps once more before it sleeps.
    fn wake_for(&self, book: &mut Book, due: Instant) {
        if book.wake_at.is_none_or(|wake| due < wake) {
            book.wake_at = None;
            self.wake.notify_one();
        }
    }

    /// Stops renewing the entry `id` (a released lease).
    pub(crate) fn remove(&self, id: u64) {
        self.book().entries.remove(&id);
    }

    /// Moves the next renewal of entry `id` to `due` (an extension set a new lease
    /// length), waking the scheduler when that is earlier than it planned to look.
    pub(crate) fn reschedule(&self, id: u64, due: Instant) {
        let mut book = self.book();
        let Some(entry) = book.entries.get_mut(&id) else {
            return;
        };
        entry.due = due;
        entry.retrying = false;
        self.wake_for(&mut book, due);
    }

    /// Scheduler tasks started so far (diagnostics and tests).
    pub(crate) fn starts(&self) -> u64 {
        self.starts.load(Ordering::Relaxed)
    }

    /// Renewal round trips sent so far (diagnostics and tests).
    pub(crate) fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    /// The scheduler task's work. The task may end without returning: its runtime shut
    /// down while it slept or waited for a reply (a client shared by several runtimes,
    /// one after the other). Its [`Running`] guard then marks the scheduler stopped, so
    /// that the next lease starts it again in the runtime it is acquired in, instead of
    /// never being renewed; `armed` is cleared when the loop itself stops it.
    async fn run_loop(&self, armed: &mut bool) {
        // Since when no lease has been left, if none is.
        let mut idle_since: Option<Instant> = None;
        loop {
            let now = Instant::now();
            let may_end = idle_since.is_some_and(|since| now >= since + IDLE_LINGER);
            let Some(sweep) = self.sweep(now, may_end) else {
                // `sweep` marked the scheduler stopped, with the book locked.
                *armed = false;
                return;
            };
            let next = if sweep.idle {
                *idle_since.get_or_insert(now) + IDLE_LINGER
            } else {
                idle_since = None;
                sweep.next
            };
            if sweep.batch.is_empty() {
                self.book().wake_at = Some(next);
                tokio::select! {
                    () = tokio::time::sleep_until(next) => {}
                    () = self.wake.notified() => {}
                }
                self.book().wake_at = None;
                continue;
            }
            self.renew(sweep.batch, next).await;
        }
    }

    /// Drops finished entries and, when at least one lease is due, picks it together with
    /// every lease that falls due soon after; also says when to look again. With nothing
    /// left, `None` when `may_end` (the scheduler is then marked stopped and its task
    /// ends), else an idle sweep.
    fn sweep(&self, now: Instant, may_end: bool) -> Option<Sweep> {
        let mut book = self.book();
        let mut next = now + Duration::from_secs(3600);
        let mut any_due = false;
        book.entries.retain(|_, entry| {
            let Some(lease) = entry.lease.upgrade() else {
                return false;
            };
            let State::Held(until) = lease.state() else {
                return false;
            };
            if until <= now {
                lease.lose("the lease ran out without a successful renewal");
                return false;
            }
            if entry.stop_at.is_some_and(|stop| entry.due >= stop) {
                tracing::info!(lock = %lease.name, "max_hold reached; renewal stops and the lease will expire");
                return false;
            }
            any_due |= entry.due <= now;
            // Wake when it is due, or at the latest when it would run out, to report the
            // loss then.
            next = next.min(entry.due).min(until);
            true
        });
        if book.entries.is_empty() {
            if may_end {
                book.running = false;
                return None;
            }
            return Some(Sweep {
                batch: Vec::new(),
                next,
                idle: true,
            });
        }
        let mut batch = Vec::new();
        if any_due {
            for (&id, entry) in &mut book.entries {
                let Some(lease) = entry.lease.upgrade() else {
                    continue;
                };
                let early = if entry.retrying {
                    Duration::ZERO
                } else {
                    period(lease.ttl()) / 2
                };
                if entry.due > now + early {
                    continue;
                }
                // An extend of this lease is in flight: it sets the next renewal when it
                // is answered; look again shortly in case it is dropped instead.
                let Some(step) = lease.try_step() else {
                    if entry.due <= now {
                        entry.due = now + retry_pause(lease.ttl());
                    }
                    continue;
                };
                // Read under the step: an extend may have changed it.
                let ttl = lease.ttl();
                let details = lease
                    .kind()
                    .is_lock()
                    .then(|| lease.details_due(now, ttl))
                    .flatten();
                batch.push(Due {
                    id,
                    lease,
                    ttl,
                    details,
                    _step: step,
                });
            }
        }
        Some(Sweep {
            batch,
            next,
            idle: false,
        })
    }

    /// Sends one round trip for `batch` and records the outcome of each lease.
    async fn renew(&self, batch: Vec<Due>, next: Instant) {
        let sent = Instant::now();
        // Never wait for a reply past the moment the first of these leases runs out, nor
        // longer than the shortest lease's period (then it is retried, on a new connection
        // if this one went silent). A silent network (packets dropped, no reset) shows as
        // `Retrying` after the shortest lease's patience, within a third of the ttl (see
        // `period`), while the reply is still waited for.
        let warn_at = sent
            + batch
                .iter()
                .map(|d| patience(d.ttl))
                .min()
                .unwrap_or(Duration::ZERO);
        let bound = batch
            .iter()
            .map(|d| period(d.ttl))
            .min()
            .unwrap_or(Duration::ZERO);
        let deadline = batch
            .iter()
            .filter_map(|d| match d.lease.state() {
                State::Held(until) => Some(until),
                _ => None,
            })
            .min()
            .unwrap_or(next)
            .min(sent + bound);
        // Each lease is credited as soon as its outcome is known (in a cluster, when its
        // primary answers), not when the whole batch is: a slow or silent primary costs
        // the others nothing.
        let answered: Vec<std::sync::atomic::AtomicBool> = batch
            .iter()
            .map(|_| std::sync::atomic::AtomicBool::new(false))
            .collect();
        let credit = |i: usize, outcome: Option<bool>| {
            let (Some(due), Some(answered)) = (batch.get(i), answered.get(i)) else {
                return;
            };
            if outcome.is_none() || answered.swap(true, Ordering::AcqRel) {
                return;
            }
            let mut book = self.book();
            if outcome == Some(true) {
                due.lease.renewed(sent, due.ttl);
                if let Some(span) = due.details {
                    due.lease.details_kept(sent, span);
                }
                if let Some(entry) = book.entries.get_mut(&due.id) {
                    entry.due = sent + period(due.ttl);
                    entry.retrying = false;
                }
            } else {
                due.lease
                    .lose("a renewal found another token (or none) at the key");
                book.entries.remove(&due.id);
            }
        };
        let mut request = std::pin::pin!(self.send(&batch, &credit));
        let mut warned = false;
        let mut outcome = tokio::time::timeout_at(warn_at.min(deadline), &mut request).await;
        if outcome.is_err() && warn_at < deadline {
            // No answer yet: say so (the early warning of a silent link), and keep waiting.
            warned = true;
            for (due, answered) in batch.iter().zip(&answered) {
                if !answered.load(Ordering::Acquire) {
                    due.lease.renewal_failed(&"no answer yet");
                }
            }
            outcome = tokio::time::timeout_at(deadline, &mut request).await;
        }
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        let failed: Vec<&Due> = batch
            .iter()
            .zip(&answered)
            .filter(|(_, answered)| !answered.load(Ordering::Acquire))
            .map(|(due, _)| due)
            .collect();
        if failed.is_empty() {
            return;
        }
        let why = if outcome.is_err() {
            "no answer in time"
        } else {
            "redis could not be reached or did not answer"
        };
        tracing::debug!(
            leases = failed.len(),
            why,
            "renewal failed; retrying until the leases run out"
        );
        if !warned {
            for due in &failed {
                due.lease.renewal_failed(&why);
            }
        }
        retry_later(&mut self.book(), &failed);
    }

    /// Renews `batch` in round trips of at most [`ROUND_TRIP_LEASES`] leases per node, one
    /// after the other, telling `credit` each lease's outcome (renewed, lost, or unknown)
    /// as soon as it is known.
    async fn send(&self, batch: &[Due], credit: &(dyn Fn(usize, Option<bool>) + Sync)) {
        let items: Vec<RenewItem<'_>> = batch
            .iter()
            .map(|due| RenewItem {
                keys: &due.lease.keys,
                kind: due.lease.kind(),
                token: due.lease.token.secret(),
                ttl_ms: ttl_millis(due.ttl),
                details_ms: due.details.map(ttl_millis),
            })
            .collect();
        let round_trips =
            items
                .chunks(ROUND_TRIP_LEASES)
                .enumerate()
                .map(|(n, chunk)| async move {
                    let offset = n * ROUND_TRIP_LEASES;
                    let credit = |i: usize, outcome: Option<bool>| credit(offset + i, outcome);
                    self.deployment.renew(chunk, &credit).await;
                });
        futures_util::StreamExt::for_each_concurrent(
            futures_util::stream::iter(round_trips),
            IN_FLIGHT,
            |round_trip| round_trip,
        )
        .await;
    }
}

/// Marks the scheduler stopped when its task is dropped unfinished (armed while `.1`).
struct Running(Arc<Renewer>, bool);

impl Drop for Running {
    fn drop(&mut self) {
        if self.1 {
            let mut book = self.0.book();
            book.running = false;
            book.wake_at = None;
            tracing::debug!("the renewal scheduler's runtime ended; the next lease restarts it");
        }
    }
}

/// How long to wait before trying a lease's renewal again: a tenth of its ttl, 5 ms to 1 s.
fn retry_pause(ttl: Duration) -> Duration {
    (ttl / 10).clamp(Duration::from_millis(5), Duration::from_secs(1))
}

fn retry_later(book: &mut Book, batch: &[&Due]) {
    let now = Instant::now();
    for due in batch {
        if let Some(entry) = book.entries.get_mut(&due.id) {
            entry.due = now + retry_pause(due.ttl);
            entry.retrying = true;
        }
    }
}

impl std::fmt::Debug for Renewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Renewer")
            .field("leases", &self.book().entries.len())
            .finish_non_exhaustive()
    }
}

/// Whether [`Lock::acquire`](crate::Lock::acquire) keeps the lease renewed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Renewal {
    /// Renew every `ttl/4` for as long as the guard lives (the default; what
    /// [`Lock::run`](crate::Lock::run) always does).
    #[default]
    Auto,
    /// A fixed lease: never renewed, it simply expires after its TTL unless released or
    /// [extended](crate::Guard::extend) first.
    Fixed,
}
