//! [`Client`], the handle: the primitives it makes, its counters, its shutdown.

use std::fmt;
use std::sync::Arc;

use crate::clock::ClockWatch;
use crate::connection::{ConnectionState, ConnectionStates};
use crate::election::Election;
use crate::engine::Engine;
use crate::error::Result;
use crate::latch::Latch;
use crate::lock::Lock;
use crate::multilock::MultiLock;
use crate::rwlock::RwLock;
use crate::semaphore::Semaphore;

/// A handle to one Redis deployment, shared by every lock and task that uses it.
///
/// Cheap to clone (an `Arc`): clone it into tasks rather than connecting again. It
/// multiplexes all commands over one connection that reconnects by itself, and carries
/// all waiters' notifications over one more pub/sub connection.
///
/// # Runtime
/// A client needs a Tokio runtime (with the `time` driver) and belongs to the runtime
/// that created it: its connections' tasks, the renewal scheduler and background releases
/// run there. Use it from that runtime. A client that outlives its runtime (a `static`
/// shared by several `#[tokio::test]`s, each with a runtime of its own) recovers in the
/// next one: connections reconnect and the renewal scheduler starts again; but whatever
/// the old runtime was doing when it ended was dropped with it.
///
/// Before a program ends, call [`Client::shutdown`]: it gives back every lease the
/// client still holds and waits for releases running in the background, which a runtime
/// that shuts down would otherwise drop (leaving locks held until their TTL).
///
/// # Names
/// Every method that takes a name takes any string (`&str`, `String`, `&String`): the
/// builders ([`lock`](Client::lock), [`semaphore`](Client::semaphore), ...) keep it
/// (`impl Into<String>`), one-shot calls ([`inspect`](Client::inspect),
/// [`force_release`](Client::force_release)) borrow it (`impl AsRef<str>`).
#[derive(Clone)]
pub struct Client {
    pub(crate) engine: Arc<Engine>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

impl Client {
    /// A lock named `name` on this deployment, with default options; set others with the
    /// [`Lock`] builder methods. Nothing is sent to Redis until it is acquired.
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Lock::new(Arc::clone(&self.engine), name.into())
    }

    /// Several locks held together, all or nothing (see [`MultiLock`]), with default
    /// options. Duplicate names are one name. Nothing is sent to Redis until it is
    /// acquired.
    pub fn multi_lock<I, S>(&self, names: I) -> MultiLock
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        MultiLock::new(
            Arc::clone(&self.engine),
            names.into_iter().map(Into::into).collect(),
        )
    }

    /// The leader election named `name` (see [`Election`]), with default options.
    /// Nothing is sent to Redis until someone campaigns or asks who leads.
    pub fn election(&self, name: impl Into<String>) -> Election {
        Election::new(Arc::clone(&self.engine), name.into())
    }

    /// A semaphore named `name` admitting `permits` holders at once, with default options;
    /// set others with the [`Semaphore`] builder methods. Nothing is sent to Redis until a
    /// permit is acquired.
    pub fn semaphore(&self, name: impl Into<String>, permits: u32) -> Semaphore {
        Semaphore::new(Arc::clone(&self.engine), name.into(), permits)
    }

    /// A count-down latch named `name` (see [`Latch`]), with default options; set others
    /// with the [`Latch`] builder methods. Nothing is sent to Redis until a count is
    /// registered or someone waits.
    pub fn latch(&self, name: impl Into<String>) -> Latch {
        Latch::new(Arc::clone(&self.engine), name.into())
    }

    /// A read-write lock named `name`, with default options; take it with
    /// [`RwLock::read`] or [`RwLock::write`]. Nothing is sent to Redis until it is
    /// acquired.
    pub fn rwlock(&self, name: impl Into<String>) -> RwLock {
        RwLock::new(Arc::clone(&self.engine), name.into())
    }

    /// Whether the client's Redis answers now, as the latest request to each node found
    /// (see [`ConnectionState`]: it says nothing about leases, which each guard reports).
    pub fn connection_state(&self) -> ConnectionState {
        crate::connection::now(&self.engine)
    }

    /// Every change of the client's [`ConnectionState`], starting with the current one
    /// (one stream per client, for all its leases: Curator's connection state listener
    /// without its `LOST`). While the stream is polled, every node is sent a `PING` each
    /// [`PROBE`](crate::PROBE) that passes without a change, so that an idle client
    /// notices a Redis that stopped answering within about a probe and a response
    /// timeout. The stream ends only when dropped.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example(client: redlease::Client) {
    /// use futures_util::StreamExt as _;
    ///
    /// let mut states = client.connection_states();
    /// while let Some(state) = states.next().await {
    ///     if !state.is_usable() {
    ///         // Stop taking new work; held leases report their own fate.
    ///     }
    /// }
    /// # }
    /// ```
    pub fn connection_states(&self) -> ConnectionStates {
        crate::connection::follow(Arc::clone(&self.engine))
    }

    /// What this client (and its clones) is doing and has done so far: counters for
    /// diagnostics and tests, read at the call (call again for new values).
    pub fn stats(&self) -> ClientStats {
        ClientStats {
            waiting: self.engine.waiting(),
            renewal_round_trips: self.engine.renewer.round_trips(),
            renewal_tasks_started: self.engine.renewer.starts(),
        }
    }

    /// How fast the Redis server's clock runs against this process' monotonic clock, as
    /// estimated from fresh grants (each grant's fencing token is the server's time): a
    /// lower bound, `None` until two grants were a second apart, and always `None` on a
    /// Cluster or quorum (many clocks). Claims assume it stays below 1.01 (the drift
    /// allowance, a hundredth of the ttl); above that the client logs a warning, since a
    /// guard may then claim a lease Redis already expired: check the server's time
    /// synchronisation.
    pub fn server_clock_rate(&self) -> Option<f64> {
        self.engine.clock.as_ref().and_then(ClockWatch::rate)
    }

    /// Gives back every lease this client (and its clones) still holds, ends every
    /// acquisition of theirs that is waiting (it returns
    /// [`Error::ShutDown`](crate::Error::ShutDown)) and withdraws its place in the
    /// queue, so that no hand-off goes to a waiter that is gone, and waits until
    /// every release running in the background is done: call it before the program
    /// returns from `main`, so that no lock stays held by nobody until its TTL. Over a
    /// quorum that includes the requests to the nodes that had not answered when a
    /// majority had (each bounded by the per-node bound), so that no node keeps the lock.
    ///
    /// Guards still alive afterwards report their lease ended ([`Guard::is_held`] is
    /// false, [`Guard::release`] returns `Ok`), and work under [`Lock::run`] is cancelled
    /// with [`Error::ShutDown`](crate::Error::ShutDown). The client stays usable: locks acquired later are held as
    /// usual.
    ///
    /// # Errors
    /// The first error of a give-back that could not reach Redis (that lease then expires
    /// by itself after its TTL); every other lease is still given back.
    ///
    /// # Cancel safety
    /// Cancel safe: leases already ended stay given back, and background releases go on.
    ///
    /// # Examples
    /// ```no_run
    /// #[tokio::main]
    /// async fn main() -> redlease::Result<()> {
    ///     let client = redlease::Client::connect("redis://127.0.0.1:6379").await?;
    ///     let _guard = client.lock("nightly-report").acquire().await?;
    ///     // ... returning early, by `?` or otherwise, drops the guard ...
    ///     client.shutdown().await
    /// }
    /// ```
    ///
    /// [`Guard::is_held`]: crate::Guard::is_held
    /// [`Guard::release`]: crate::Guard::release
    pub async fn shutdown(&self) -> Result<()> {
        self.engine.shutdown().await
    }
}

/// Counters of one [`Client`] and its clones, from [`Client::stats`]: for diagnostics and
/// tests, not for deciding anything about a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientStats {
    /// Tasks waiting for a busy lock right now, queued for a hand-off or listening for a
    /// release.
    pub waiting: usize,
    /// Renewal round trips sent so far: one per sweep of the renewal scheduler, however
    /// many leases it renewed.
    pub renewal_round_trips: u64,
    /// How many times the renewal scheduler task was started so far: once, and again
    /// after it ended for want of leases (a second without one) or with its runtime.
    pub renewal_tasks_started: u64,
}

/// The holder details a client records beside its locks, for operators who ask who holds
/// one: `host=<hostname> pid=<pid>`, then `note` when given. Also a ready note for
/// [`Election::campaign`] that names the campaigning process the same way.
///
/// # Examples
/// ```
/// let note = redlease::diagnostics::holder_details(Some("cmd=backup"));
/// assert!(note.starts_with("host=") && note.ends_with(" cmd=backup"));
/// ```
pub fn holder_details(note: Option<&str>) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "unknown".into());
    let pid = std::process::id();
    match note {
        Some(note) => format!("host={host} pid={pid} {note}"),
        None => format!("host={host} pid={pid}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_details_name_the_process_then_the_note() {
        assert!(holder_details(Some("cmd=x")).ends_with(" cmd=x"));
        assert!(holder_details(None).starts_with("host="));
    }
}
