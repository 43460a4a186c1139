//! Correct distributed locks on Redis.
//!
//! ```no_run
//! # async fn example() -> redlease::Result<()> {
//! let client = redlease::Client::connect("redis://127.0.0.1:6379").await?;
//! client
//!     .lock("coupon-stock")
//!     .run(async |guard| {
//!         // Only one holder at a time runs this, however long it takes: the lease is
//!         // renewed, and this future is dropped the moment the lock is lost. Pass the
//!         // fencing token to the resource, so that it can refuse a stale holder's write.
//!         println!("holding with fencing token {}", guard.fencing_token());
//!         Ok::<_, redlease::Error>(())
//!     })
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! [`Lock::run`] is the recommended API. [`Lock::acquire`] returns a [`Guard`] for code
//! that needs to hold a lock across a structure `run` does not fit; [`blocking`] has the
//! same locks for synchronous code.
//!
//! # What a lock is here
//! A lock named `N` is the Redis key `redlease:N` holding a random 128-bit owner token,
//! set with `SET NX PX` semantics inside one script that also bumps a *fencing counter*.
//! Only the owner's token can release or extend it (atomic compare-and-delete scripts), a
//! crashed owner's lock frees itself after its TTL, and every acquisition gets a fencing
//! token larger than all earlier ones: `max(last + 1, Redis' clock in µs)`, which keeps
//! growing when Redis loses its data, under the clock assumptions that
//! [`FencingToken`] states.
//!
//! # Leases, renewal and loss
//! A lock is a *lease*: it is ours for its TTL (default 30 s) unless renewed. While a
//! guard lives, one scheduler per [`Client`] renews it every `ttl/4`, all leases that are
//! due together in one pipelined round trip, so that a critical section may take longer
//! than the TTL while a crashed process still frees its locks within one TTL. Ask for
//! [`Renewal::Fixed`] to get a lease that simply expires; set [`Lock::max_hold`] to stop
//! renewing after a total time.
//!
//! A lease can still be **lost**: the process was paused longer than the TTL (a GC pause,
//! `SIGSTOP`, a swapped-out VM), Redis was unreachable for that long, or someone deleted
//! the key. redlease never hides it:
//! - [`Guard::valid_until`] is measured from when the request that last set the lease
//!   was *sent*, minus a drift margin (`ttl/100 + 2ms`) and a loss margin (`ttl/20`), so
//!   the guard never claims more than Redis grants and reports a loss with time to stop;
//! - a renewal that finds another token (or none) marks the lease lost at once; one that
//!   cannot reach Redis, or gets no answer within `ttl/15` (a silent network), is
//!   retried until `valid_until` ([`Guard::health`] says `Retrying` meanwhile, within a
//!   third of the ttl of the link going silent), then the lease is lost;
//! - [`Guard::lost`] resolves then, [`Guard::is_held`] turns false, a warning is logged,
//!   [`Lock::run`] drops the work's future and returns [`Error::Lost`], and
//!   [`Guard::release`] returns [`Error::Lost`].
//!
//! **What a guard claims is true in Redis.** [`Guard::is_held`], [`Guard::remaining`],
//! [`Guard::valid_until`] and an `Ok` from `acquire` are claims, and the library's
//! guarantee is that **a guard's `valid_until` is never later than the moment its lease
//! ends in Redis**, whatever happens in between: the waiter paused (`SIGSTOP`, a VM stall,
//! a runtime thread blocked by synchronous code), pub/sub messages delayed, lost or
//! reordered against replies, reconnects, cancellation, failovers and failbacks. Every
//! primitive hands off the same way: a lock, permits or a read or write hold handed to a
//! waiter over pub/sub are its for a short claim window only (a tenth of its ttl, at most
//! 1 s) until the waiter confirms them with an attempt on the server that decides, from
//! whose send time the lease is dated; a pushed grant is never proof by itself (a demoted
//! primary relays grants its new primary gave nobody, and may be the primary again by
//! the time anyone asks it). So a waiter cut off silently costs the others that window,
//! not a ttl. A lock handed to a waiter of the releasing client itself is granted for its
//! whole ttl, told from the release's reply (as an attempt's reply, it comes from the
//! server that ran the script), and dated from the later of the release's send time and
//! the waiter's latest busy attempt's. `acquire` never returns a lease with
//! less than a tenth of its TTL left: one read too late is confirmed by another attempt
//! (which sets the lease's expiry again), or waited on. The same holds for every primitive
//! and deployment, async and blocking (Redis' clock and ours may drift apart by at most
//! the margin above: [`Client::server_clock_rate`] estimates it, and a faster Redis clock
//! is logged as a warning).
//!
//! The claim holds for the lease's whole life. [`Guard::extend`] to a shorter ttl lowers
//! the claim before it is sent (dropped or failed, it may still run in Redis); a lease's
//! renewals and extends never overlap, so their replies are applied in the order Redis ran
//! them, also when a `NOSCRIPT` or a retry sends one again later. The holder's
//! fencing token is kept with its lease, so a hold of weeks outlives its fencing counter.
//!
//! What a lost lease cannot undo is a write the old holder already sent. That is what the
//! [fencing token](Guard::fencing_token) is for: the resource remembers the highest token
//! it has accepted and refuses older ones.
//!
//! # Owners and reentrancy
//! A nested acquisition of a lock the same *owner* already holds succeeds at once, with no
//! round trip, and shares the outer lease; the lock is given back when the last hold ends.
//! In async Rust a thread is not an owner, and a task is not one by itself: an owner is an
//! explicit [`Owner`] handle ([`Lock::owner`]) or the task-local scope of
//! [`Owner::scope`]. [`Lock::run`] opens such a scope for its work, so nested `run`s of the
//! same lock re-enter. A task spawned inside a scope is a *different* owner unless it is
//! handed the handle. Without an owner, every acquisition is a fresh one, and a second
//! acquisition of a held lock waits like anyone else.
//!
//! # Which primitive
//! Every primitive is built on the same lease engine and has every guarantee above: owner
//! tokens, leases renewed while held and reported when lost (`run` cancels the work),
//! fencing tokens on every grant, FIFO waiting (with hand-off on a single Redis or
//! Sentinel; each primitive's docs say what other deployments keep), reentrancy per
//! [`Owner`], give-back on every path, async and [`blocking`] APIs.
//!
//! Fencing with shared holds: permit holders and readers hold at the same time, each
//! with its own token, so a resource that accepts only tokens at least the highest it has
//! seen fits exclusive writers (a lock, a write hold). Fence a semaphore's holders per
//! resource each writes, and a read-write lock's writes with the write hold's token
//! (readers' tokens order them after the writes before them).
//!
//! | you need | use | deployments |
//! |---|---|---|
//! | one holder at a time | [`Client::lock`] | all |
//! | at most N holders at a time (3 backups, 10 calls to a partner) | [`Client::semaphore`] | single, Sentinel, Cluster (refused over a quorum: a majority count is not sound for N >= 2) |
//! | many readers or one writer (config reload, cache rebuild) | [`Client::rwlock`] | all (over a quorum a majority rule is sound: a reader and a writer conflict on every node, and two majorities share one) |
//! | several locks at once, all or nothing (a transfer between two accounts) | [`Client::multi_lock`] | all: one script on one node or Cluster slot, else one by one in canonical order |
//! | exactly one active instance, and everyone can see which | [`Client::election`] | all |
//! | wait until N parties are done, without hanging on one that died (a count-down latch) | [`Client::latch`] | single, Sentinel, Cluster (refused over a quorum) |
//!
//! ```no_run
//! # async fn example(client: redlease::Client) -> redlease::Result<()> {
//! // At most 3 at once; a crashed holder's permit comes back after its ttl.
//! let permit = client.semaphore("nightly-backup", 3).acquire().await?;
//! permit.release().await?;
//!
//! // Readers share, a writer is alone; a queued writer stops later readers.
//! let config = client.rwlock("config");
//! config.read().run(async |_| Ok::<_, redlease::Error>(())).await?;
//! let write = config.write().acquire().await?;
//! let read = write.downgrade().await?; // atomically, no writer in between
//! read.release().await?;
//!
//! // Both accounts or neither; never a deadlock, whatever order others name them in.
//! let both = client.multi_lock(["account:7", "account:3"]).acquire().await?;
//! both.release().await?;
//!
//! // Lead until resigning or losing the lease; everyone can ask who leads.
//! let leadership = client.election("scheduler").campaign("host-a:8080").await?;
//! let leader = client.election("scheduler").leader().await?;
//! leadership.resign().await?;
//! # Ok(()) }
//! ```
//!
//! # Declarative locking
//! With the `macros` feature (on by default), [`#[locked]`](locked) runs a function under a
//! lock named from its arguments, the way [`Lock::run`] runs a closure:
//!
//! ```
//! # #[derive(Debug)] struct AppError;
//! # impl From<redlease::Error> for AppError { fn from(_: redlease::Error) -> Self { AppError } }
//! # struct User { id: u64 } struct Coupon;
//! #[redlease::locked(key = "coupon:{user.id}", ttl = "10s", wait = "5s")]
//! async fn grab_coupon(user: &User) -> Result<Coupon, AppError> {
//!     Ok(Coupon)
//! }
//! ```
//! The client is `client = expr` or the process-wide default of [`set_default_client`].
//! With `permits = N` the function holds one of the `N` permits of a [`Semaphore`] instead,
//! and with `read` or `write` a side of an [`RwLock`]:
//!
//! ```
//! # #[derive(Debug)] struct AppError;
//! # impl From<redlease::Error> for AppError { fn from(_: redlease::Error) -> Self { AppError } }
//! #[redlease::locked(key = "backups", permits = 3)]
//! async fn back_up() -> Result<(), AppError> {
//!     Ok(()) // at most 3 at once, across every machine
//! }
//!
//! #[redlease::locked(key = "config", write, client = client)]
//! fn reload(client: &redlease::blocking::Client) -> Result<(), AppError> {
//!     Ok(()) // alone: no reader and no other writer; synchronous, so through `blocking`
//! }
//! ```
//!
//! With `keys = [...]` it holds a [`MultiLock`] of every key instead, all or nothing (taken
//! in one sorted order, so `A,B` and `B,A` never deadlock; duplicate keys are one lock):
//!
//! ```
//! # #[derive(Debug)] struct AppError;
//! # impl From<redlease::Error> for AppError { fn from(_: redlease::Error) -> Self { AppError } }
//! # struct Account { id: u64 }
//! #[redlease::locked(keys = ["account:{from.id}", "account:{to.id}"])]
//! async fn transfer(from: &Account, to: &Account, amount: u64) -> Result<(), AppError> {
//!     # let _ = amount;
//!     Ok(()) // both accounts are ours
//! }
//! ```
//!
//! # Waiting
//! [`Lock::acquire`] waits in a FIFO queue kept in Redis; a release hands the lock straight
//! to the oldest waiter that still listens, over one pub/sub connection per [`Client`]. See
//! [`wait`] for details, and [`Notifications::Polling`] to poll instead.
//!
//! # Liveness, and ending a program
//! Nothing redlease does leaves a lock held by nobody: an `acquire` or `run` dropped at any
//! `.await`, a release cut short or meeting a killed connection, and a dropped [`Guard`]
//! all give back what they took, in a background task of the [`Client`]. A runtime that
//! shuts down drops such tasks, so call [`Client::shutdown`] before returning from
//! `main`: it gives back every lease still held and waits for those tasks. A
//! [`blocking::Guard`] releases before its `Drop` returns. A [`Client`] belongs to the
//! runtime that created it (see its docs).
//!
//! # Operating it
//! - **Who holds it**: [`Client::inspect`] returns a name's holders (details, time left,
//!   fencing token), its queued waiters (how long each has waited) and its fencing
//!   counter, for every primitive, by plain reads; [`Client::force_release`] removes a
//!   stuck holder's hold. The `redlease status`, `list` and `release --force` commands are
//!   these calls.
//! - **Renewal health**: [`Guard::health`] and [`Guard::health_changes`] report
//!   [`LeaseHealth::Retrying`] (with the time left) while renewals fail, *before* the lease
//!   is lost, and [`LeaseHealth::Renewed`] when they recover.
//! - **Traces**: each hold is one `redlease.hold` span (lock name, kind, fencing token,
//!   owner-token prefix) holding its events: acquired, renewed, renewal failing (warn),
//!   renewal recovered, lock lost (warn), released.
//! - **Metrics** (feature `metrics`, off by default; nothing is compiled in without it):
//!   through the [`metrics`](https://docs.rs/metrics) facade, for every primitive,
//!   histograms `redlease_acquire_wait_seconds` (label `outcome`: `acquired`, `busy`,
//!   `timeout`, `failed`, `cancelled`) and `redlease_hold_seconds` (`released`, `lost`,
//!   `closed`), counters `redlease_acquired_total`, `redlease_timeouts_total`,
//!   `redlease_lost_total`, `redlease_renewal_failures_total`, gauges `redlease_held` and
//!   `redlease_waiting`; label `kind` (`lock`, `election`, `semaphore`, `read`, `write`,
//!   `latch`, `multi_lock`), and `name` only for builders given `name_in_metrics()`. No exporter
//!   is bundled: install a recorder (`examples/prometheus.rs` serves them for Prometheus).
//!
//! # With the code you already have
//! [`Client::from_redis`] takes the application's own [`redis::Client`],
//! [`Client::from_connection_manager`] its connection manager too (redlease's commands go
//! over it), and [`Client::cluster_from`] its cluster connection; redlease still opens its
//! own pub/sub connection. Options all locks of a client share go on its builder once
//! ([`ClientBuilder::prefix`], [`ttl`](ClientBuilder::ttl), [`wait`](ClientBuilder::wait),
//! [`renewal`](ClientBuilder::renewal)); each primitive's builder may override them.
//! [`Guard::owned`] asks Redis whether a lease still holds, where [`Guard::is_held`]
//! answers from what the guard knows. Only the lock key and its plain owner token are a
//! stable Redis format (see [`LockKeys`]).
//!
//! # Cargo features
//! `tls` (`rediss://`), `macros` (`#[locked]`, implies `blocking`), `cluster`
//! ([`Client::cluster`]), `sentinel` ([`Client::sentinel`], `redis+sentinel://` and `rediss+sentinel://` URLs) and
//! `blocking` ([`blocking`]) are on by default; `metrics` is off. Without default features a
//! client reaches one Redis or a quorum, with every primitive and guarantee.
//!
//! # Errors
//! Every failure is one [`Error`]. A release or extend that finds another token (or none)
//! is [`Error::Lost`]: the caller learns that mutual exclusion may have been broken.

// docs.rs builds with every feature and `--cfg docsrs` (Cargo.toml's
// `[package.metadata.docs.rs]`): each feature-gated item then says which feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

// Layers, each importing only from those listed before it (see `tests/layers.rs`):
// leaves; where commands go; notifications; a lease and its renewal; the engine; the API.
mod clock;
mod error;
mod handle;
mod keys;
mod lua;
mod observe;
mod replies;
mod rows;
mod script_args;
mod scripts;
mod server;
mod snapshot;
mod token;
mod ttl;
pub mod wait;

mod conn;

mod backend;

mod notify;

mod lease;
mod renew;

mod acquire;
mod builder;
mod engine;
mod waiters;

#[cfg(feature = "blocking")]
#[cfg_attr(docsrs, doc(cfg(feature = "blocking")))]
pub mod blocking;
mod client;
mod connection;
mod default_client;
mod election;
mod guard;
mod inspect;
mod latch;
mod lock;
mod multilock;
mod owner;
pub mod resource;
mod rwlock;
mod semaphore;

/// Helpers for operators, logs and tests, beside the locks themselves: what a client has
/// done, who holds a lock, a URL fit for a log, and the drift margin a claim leaves out.
pub mod diagnostics {
    pub use crate::client::{ClientStats, holder_details};
    pub use crate::conn::redact_url;
    pub use crate::renew::period as renewal_period;
    pub use crate::ttl::drift;
}

#[cfg(feature = "macros")]
#[doc(hidden)]
#[path = "macro_support.rs"]
pub mod __private;

pub use backend::quorum;
pub use builder::{DEFAULT_PREFIX, DEFAULT_TTL, DEFAULT_WAIT, MAX_NOTE};
pub use client::{
    Client, ClientBuilder, DEFAULT_CONNECT_TIMEOUT, DEFAULT_FENCE_KEEP, DEFAULT_RESPONSE_TIMEOUT,
    Notifications,
};
pub use connection::{ConnectionState, ConnectionStates, PROBE};
pub use default_client::{default_client, set_default_client};
pub use election::{Election, Leader, LeaderChanges, Leadership};
pub use error::{Error, NodeError, Result, is_connection_error};
pub use guard::Guard;
pub use handle::LeaseHandle;
pub use keys::{LockKeys, MAX_NAME_LEN, Primitive};
pub use latch::{Count, Latch, Opened};
pub use lease::LeaseHealth;
pub use lock::Lock;
pub use multilock::{MultiGuard, MultiLock};
pub use owner::Owner;
pub use renew::Renewal;
pub use rwlock::{ReadGuard, ReadLock, RwLock, WriteGuard, WriteLock};
pub use semaphore::{Permit, RESIZE_KEEP, Semaphore};
pub use snapshot::{Access, Holding, Inspection, NodeSnapshot, Snapshot, Waiting};
pub use token::FencingToken;
pub use ttl::{MAX_TTL, MIN_TTL, validate_ttl};
pub use wait::{Retry, Wait};

#[cfg(feature = "macros")]
#[cfg_attr(docsrs, doc(cfg(feature = "macros")))]
pub use redlease_macros::locked;

/// The redis-rs crate this version of redlease is built on, re-exported on purpose:
/// its types are part of redlease's API ([`Error::Redis`]'s source, [`NodeError`]'s
/// error, [`is_connection_error`], the connections [`resource::fenced_set`] takes, the
/// client and connection manager [`Client::from_redis`] takes). Name them through
/// `redlease::redis` (or depend on the same version) so that your types and redlease's are
/// one and the same; a redis-rs upgrade is a breaking change of redlease.
pub use redis;

// The READMEs' Rust examples compiled as doc tests, so that they cannot drift from the API:
// the workspace's (its "Getting started" first) and this crate's own, the one `cargo package`
// ships and crates.io shows. A `cfg(doctest)` item is removed before its `include_str!` is
// expanded, so a build from the packaged sources, which lack the workspace's README, works.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct WorkspaceReadmeDoctests;

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

#[cfg(test)]
mod send_sync {
    fn send_sync<T: Send + Sync>() {}

    /// Every public handle can be shared between tasks and threads.
    #[test]
    fn public_types_are_send_and_sync() {
        send_sync::<crate::Client>();
        send_sync::<crate::Lock>();
        send_sync::<crate::Guard>();
        send_sync::<crate::LeaseHandle>();
        send_sync::<crate::Owner>();
        send_sync::<crate::Error>();
        #[cfg(feature = "blocking")]
        send_sync::<crate::blocking::Client>();
        #[cfg(feature = "blocking")]
        send_sync::<crate::blocking::Lock>();
        #[cfg(feature = "blocking")]
        send_sync::<crate::blocking::Guard>();
        send_sync::<crate::Semaphore>();
        send_sync::<crate::Latch>();
        send_sync::<crate::Count>();
        send_sync::<crate::Opened>();
        send_sync::<crate::RwLock>();
        send_sync::<crate::ReadLock>();
        send_sync::<crate::WriteLock>();
        send_sync::<crate::WriteGuard>();
        #[cfg(feature = "blocking")]
        send_sync::<crate::blocking::Semaphore>();
        #[cfg(feature = "blocking")]
        send_sync::<crate::blocking::Permit>();
        #[cfg(feature = "blocking")]
        send_sync::<crate::blocking::RwLock>();
        #[cfg(feature = "blocking")]
        send_sync::<crate::blocking::ReadLock>();
        #[cfg(feature = "blocking")]
        send_sync::<crate::blocking::WriteLock>();
        #[cfg(feature = "blocking")]
        send_sync::<crate::blocking::ReadGuard>();
        #[cfg(feature = "blocking")]
        send_sync::<crate::blocking::WriteGuard>();
        send_sync::<crate::MultiLock>();
        send_sync::<crate::MultiGuard>();
        send_sync::<crate::Inspection>();
        send_sync::<crate::Snapshot>();
        #[cfg(feature = "blocking")]
        send_sync::<crate::blocking::MultiLock>();
        #[cfg(feature = "blocking")]
        send_sync::<crate::blocking::MultiGuard>();
        #[cfg(feature = "blocking")]
        send_sync::<crate::blocking::Election>();
        #[cfg(feature = "blocking")]
        send_sync::<crate::blocking::Leadership>();
        send_sync::<crate::Election>();
        send_sync::<crate::Leadership>();
        send_sync::<crate::Leader>();
        send_sync::<crate::ClientBuilder>();
        #[cfg(feature = "blocking")]
        send_sync::<crate::blocking::ClientBuilder>();
    }

    /// The election's stream of changes can be awaited without pinning, and spawned.
    #[allow(dead_code)]
    async fn leader_changes_are_unpin_and_send(election: crate::Election) {
        fn unpin_send<T: Unpin + Send + 'static>(_: &T) {}
        use futures_util::StreamExt as _;
        let mut changes = election.observe();
        unpin_send(&changes);
        let _ = changes.next().await;
    }

    /// The futures of the async API can be spawned.
    #[allow(dead_code, clippy::unused_async)]
    async fn futures_are_send(lock: crate::Lock) {
        fn send<T: Send>(_: &T) {}
        let acquire = lock.acquire();
        send(&acquire);
        let run = lock.run(async |_| Ok::<_, crate::Error>(()));
        send(&run);
    }
}
