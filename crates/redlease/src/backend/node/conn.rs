//! A node's connection ([`Conn`]): multiplexed, and watched for a request left unanswered
//! (then the node replaces it, see the parent module).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, Pipeline, RedisFuture, Value};

/// One connection to one deployment or node, cheap to clone, multiplexed.
#[derive(Clone)]
pub(crate) enum Conn {
    /// A single Redis, reconnecting by itself when closed, watched for requests left
    /// unanswered.
    Single(Watched),
    /// A cluster, routing each command by its first key's slot (MOVED/ASK followed).
    /// Type-erased: the cluster connection's type is so deep that every future holding
    /// it would overflow the compiler's recursion limit when checked for `Send`, in the
    /// callers' crates too.
    #[cfg(feature = "cluster")]
    Cluster(ErasedConn),
}

/// A cloneable, type-erased connection.
#[cfg(feature = "cluster")]
pub(crate) struct ErasedConn(Box<dyn DynConn>);

#[cfg(feature = "cluster")]
trait DynConn: ConnectionLike + Send + Sync {
    fn boxed_clone(&self) -> Box<dyn DynConn>;
}

#[cfg(feature = "cluster")]
impl<T: ConnectionLike + Clone + Send + Sync + 'static> DynConn for T {
    fn boxed_clone(&self) -> Box<dyn DynConn> {
        Box::new(self.clone())
    }
}

#[cfg(feature = "cluster")]
impl Clone for ErasedConn {
    fn clone(&self) -> Self {
        Self(self.0.boxed_clone())
    }
}

#[cfg(feature = "cluster")]
impl ErasedConn {
    /// `conn`, type-erased.
    pub(crate) fn new<C: ConnectionLike + Clone + Send + Sync + 'static>(conn: C) -> Self {
        Self(Box::new(conn))
    }
}

impl Conn {
    /// `manager`, watched: a request on it that goes unanswered for `stale_after` (it
    /// times out, or is given up after waiting that long) marks it stale.
    pub(crate) fn watched(manager: ConnectionManager, stale_after: Duration) -> Self {
        Self::Single(Watched {
            manager,
            stale: Arc::default(),
            unanswered_since: Arc::default(),
            stale_after,
        })
    }

    /// Whether a request on this connection went unanswered for the response timeout.
    pub(super) fn is_stale(&self) -> bool {
        match self {
            Self::Single(c) => c.stale.load(Ordering::Acquire),
            #[cfg(feature = "cluster")]
            Self::Cluster(_) => false,
        }
    }
}

/// A single Redis' connection, and whether a request on it went unanswered (shared by
/// its clones).
#[derive(Clone)]
pub(crate) struct Watched {
    manager: ConnectionManager,
    stale: Arc<AtomicBool>,
    /// When the earliest of the requests given up unanswered since the connection's last
    /// answer was sent (`None` after an answer): callers that give up sooner than the
    /// response timeout (a renewal waits a fraction of its ttl) and try again, each time
    /// unanswered, leave it silent for that long together.
    unanswered_since: Arc<std::sync::Mutex<Option<tokio::time::Instant>>>,
    stale_after: Duration,
}

impl Watched {
    /// Sends `request` on the connection, marking it stale when the request times out or
    /// is dropped unanswered after [`Watched::stale_after`].
    fn watch<'a, T: Send + 'a>(
        &self,
        request: RedisFuture<'a, T>,
        on_replica: fn(&T) -> bool,
    ) -> RedisFuture<'a, T> {
        let mut watch = Watch {
            stale: Arc::clone(&self.stale),
            unanswered_since: Arc::clone(&self.unanswered_since),
            since: tokio::time::Instant::now(),
            after: self.stale_after,
            answered: false,
        };
        let after = self.stale_after;
        Box::pin(async move {
            // Bounded here, not only by the connection's own response timeout: while the
            // connection reconnects, a request waits for its tries, each a whole connect
            // timeout against a silent address (six of 5 s each: 30 s per call).
            let result = match tokio::time::timeout(after, request).await {
                Ok(result) => result,
                Err(_) => Err(redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no reply within the response timeout",
                ))),
            };
            watch.answered = true;
            // A timeout: the link may be silent. READONLY: the connection is on a
            // replica, a primary demoted behind a failover endpoint whose new
            // connections reach the new primary. Either way, the next request goes on a
            // new connection.
            let replace = match &result {
                Err(e) => e.is_timeout() || crate::error::error_code(e) == Some("READONLY"),
                Ok(value) => on_replica(value),
            };
            if replace {
                watch.mark();
            }
            if !matches!(&result, Err(e) if e.is_timeout()) {
                *watch.unanswered() = None;
            }
            result
        })
    }
}

/// Whether a reply is a `READONLY` error: the connection is on a replica.
fn is_readonly(value: &Value) -> bool {
    matches!(value, Value::ServerError(e) if e.code() == "READONLY")
}

/// One request on a [`Watched`] connection; marks it stale when dropped unanswered after
/// waiting `after` (its caller gave up on it, as a quorum's node bound does), or when the
/// requests given up unanswered in a row since the connection's last answer span `after`.
struct Watch {
    stale: Arc<AtomicBool>,
    unanswered_since: Arc<std::sync::Mutex<Option<tokio::time::Instant>>>,
    since: tokio::time::Instant,
    after: Duration,
    answered: bool,
}

impl Watch {
    fn unanswered(&self) -> std::sync::MutexGuard<'_, Option<tokio::time::Instant>> {
        // One assignment per critical section: a poisoned lock is consistent.
        self.unanswered_since
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn mark(&self) {
        if !self.stale.swap(true, Ordering::AcqRel) {
            tracing::debug!(
                "a request went unanswered for the response timeout; the connection will be replaced"
            );
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        let since = *self.unanswered().get_or_insert(self.since);
        if since.elapsed() >= self.after {
            self.mark();
        }
    }
}

impl ConnectionLike for Watched {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let watch = self.clone();
        watch.watch(self.manager.req_packed_command(cmd), is_readonly)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let watch = self.clone();
        watch.watch(
            self.manager.req_packed_commands(cmd, offset, count),
            |values: &Vec<Value>| values.iter().any(is_readonly),
        )
    }

    fn get_db(&self) -> i64 {
        self.manager.get_db()
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            #[cfg(feature = "cluster")]
            Self::Cluster(c) => c.0.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(cmd, offset, count),
            #[cfg(feature = "cluster")]
            Self::Cluster(c) => c.0.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            #[cfg(feature = "cluster")]
            Self::Cluster(c) => c.0.get_db(),
        }
    }
}
