//! The one error type of the library.

use std::time::Duration;

/// Everything that can go wrong with a lock.
///
/// Messages say what happened and what to do next; the Redis error behind
/// [`Error::Redis`] is available through [`std::error::Error::source`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lock stayed busy for the whole wait.
    #[error("lock `{name}` is held by another owner and stayed busy for {waited:?}{}; wait longer or retry later", holder_hint(*.holder_ttl))]
    #[non_exhaustive]
    Timeout {
        /// The lock's name.
        name: String,
        /// How long we waited.
        waited: Duration,
        /// The holder's remaining lease when we last looked, if it has one.
        holder_ttl: Option<Duration>,
    },
    /// The lock no longer holds our token: the lease expired or another owner took it, so
    /// mutual exclusion may have been broken for the work done under it.
    #[error(
        "lock `{name}` was lost (its lease expired or another owner holds it); the work done under it may have overlapped with another holder"
    )]
    #[non_exhaustive]
    Lost {
        /// The lock's name.
        name: String,
    },
    /// The lease was given back by [`Client::shutdown`](crate::Client::shutdown) while it
    /// was held (work under [`Lock::run`](crate::Lock::run) was cancelled), or while it
    /// was waited for (the acquisition ended, and its queue place was withdrawn).
    #[error(
        "lock `{name}` was given back because its client was shut down; shut the client down only after the work under its locks ended"
    )]
    #[non_exhaustive]
    ShutDown {
        /// The lock's name.
        name: String,
    },
    /// The first connection of a client was not made within its connect timeout (every
    /// try of it, the sentinels' answer and the handshake together).
    #[error(
        "no connection to {endpoints} within {after:?} (the connect timeout); check the host and port, that the server is up and reachable from here (firewall, security group), that the URL's scheme matches the port (rediss:// only where the server speaks TLS), or raise the connect timeout"
    )]
    #[non_exhaustive]
    ConnectTimeout {
        /// The endpoints, passwords redacted.
        endpoints: String,
        /// The connect timeout.
        after: Duration,
    },
    /// The server refused this client's credentials: it wants a password and none was
    /// given (`NOAUTH`), or the user name or password is wrong (`WRONGPASS`). Trying again
    /// does not help; the message carries the server's words, never the password.
    #[error(
        "{endpoints} refused the credentials ({detail}); give the user and password in the URL ({form})"
    )]
    #[non_exhaustive]
    Auth {
        /// The endpoints, passwords redacted.
        endpoints: String,
        /// What the server answered (`NOAUTH ...`, `WRONGPASS ...`).
        detail: String,
        /// Where the user and password go, in the scheme the endpoints were given with
        /// (`rediss://USER:PASSWORD@host:port`, `redis+sentinel://USER:PASSWORD@...`).
        form: String,
    },
    /// Too few independent nodes granted the lock (or answered: a quorum client's `PING`
    /// when it connected, a read of the leader or an inspection).
    #[error(
        "only {acquired} of the {needed} nodes needed for a majority {what}{}; check that most nodes are reachable",
        node_errors(errors)
    )]
    #[non_exhaustive]
    NoQuorum {
        /// What the nodes were asked: `granted the lock`, or `answered` (a connection's
        /// `PING`, a read).
        what: &'static str,
        /// Nodes that granted it (or answered).
        acquired: usize,
        /// The majority needed.
        needed: usize,
        /// Why each failed node failed: its error, or a timeout when it did not answer in
        /// time. Nodes that answered that another owner holds the lock are not listed.
        errors: Vec<NodeError>,
    },
    /// Fewer replicas than asked acknowledged the lock's write.
    #[error(
        "only {acked} of {wanted} replicas acknowledged the lock in time; the lock was given back"
    )]
    #[non_exhaustive]
    Replication {
        /// Replicas that acknowledged.
        acked: usize,
        /// Replicas asked for.
        wanted: usize,
    },
    /// The lock name cannot be used.
    #[error("invalid lock name: {reason}")]
    #[non_exhaustive]
    InvalidName {
        /// Why.
        reason: String,
    },
    /// A [`LeaseHandle`](crate::LeaseHandle) string could not be read, or a handle was
    /// given to a [`Lock`](crate::Lock) of another name or key prefix.
    #[error(
        "invalid lease handle: {reason}; pass the whole string `LeaseHandle` wrote, to a lock of its name and prefix"
    )]
    #[non_exhaustive]
    InvalidHandle {
        /// What is wrong with it.
        reason: String,
    },
    /// A [`LeaseHandle`](crate::LeaseHandle) could not be adopted: its lease is gone
    /// (released, expired before it was adopted, or another owner holds the lock). Nothing
    /// ran under it in this process and nothing was changed in Redis.
    #[error(
        "lock `{name}` cannot be adopted: the handle's lease is gone (released, expired, or another owner holds the lock); nothing ran under it here: acquire the lock anew"
    )]
    #[non_exhaustive]
    HandleGone {
        /// The lock's name.
        name: String,
    },
    /// An option is out of range.
    #[error("invalid option `{option}`: {reason}")]
    #[non_exhaustive]
    InvalidOption {
        /// The option.
        option: &'static str,
        /// Why.
        reason: String,
    },
    /// The key holds a value of another type: another primitive of the same name (a lock,
    /// a semaphore and a read-write lock of one name exclude each other), or something
    /// that is no lock at all.
    #[error(
        "key `{key}` holds a value of another type (WRONGTYPE): another primitive (lock, semaphore or read-write lock) of the same name, or no lock at all; choose another name or key prefix"
    )]
    #[non_exhaustive]
    WrongType {
        /// The Redis key.
        key: String,
    },
    /// A semaphore was asked for with another permit count than the one in use, which no
    /// [`resize`](crate::Semaphore::resize) set.
    #[error(
        "semaphore `{key}` is in use with {in_use} permits, not the number asked for; ask with the same count, resize it (Semaphore::resize), or change it once nothing holds or waits for it"
    )]
    #[non_exhaustive]
    PermitsMismatch {
        /// The semaphore's key.
        key: String,
        /// The permit count in use.
        in_use: u32,
    },
    /// A semaphore was asked for a number of permits at once that it can never grant:
    /// none, or more than its permit count in force (the one stored by a
    /// [`resize`](crate::Semaphore::resize), else the one asked with).
    #[error(
        "semaphore `{name}` was asked for {asked} permits at once, but it has {permits}; ask for 1 to {permits}"
    )]
    #[non_exhaustive]
    PermitsAsked {
        /// The semaphore's name (its Redis key when Redis refused the request).
        name: String,
        /// How many permits were asked for.
        asked: u32,
        /// The semaphore's permit count in force.
        permits: u32,
    },
    /// An owner holding a read lock asked for the write lock of the same read-write lock.
    #[error(
        "read-write lock `{name}` is held for reading by this owner, and a read lock cannot be upgraded to write (two upgrading readers would wait for each other forever); release the read lock, then acquire the write lock"
    )]
    #[non_exhaustive]
    Upgrade {
        /// The read-write lock's name.
        name: String,
    },
    /// A write hold shared by nested acquisitions of its owner was asked to downgrade.
    #[error(
        "write lock `{name}` is also held by nested acquisitions of this owner, which still write; release them before downgrading"
    )]
    #[non_exhaustive]
    NestedDowngrade {
        /// The read-write lock's name.
        name: String,
    },
    /// The primitive cannot be made sound on this deployment.
    #[error("{what} is not available here: {reason}")]
    #[non_exhaustive]
    Unsupported {
        /// What was asked for.
        what: &'static str,
        /// Why it is refused, and what to use instead.
        reason: &'static str,
    },
    /// The blocking API could not drive its runtime: it was called from inside an async
    /// task (whose thread it would block; a `spawn_blocking` thread is fine), or the
    /// runtime could not start.
    #[error("{reason}")]
    #[non_exhaustive]
    Runtime {
        /// What happened.
        reason: String,
    },
    /// The operating system's random source failed, so no owner token could be made
    /// (tokens are never derived from anything weaker).
    #[error(
        "the operating system's random source failed ({reason}); check that this process may use it (getrandom(2) or /dev/urandom, e.g. allowed by its seccomp or sandbox profile)"
    )]
    #[non_exhaustive]
    Randomness {
        /// What the random source reported.
        reason: String,
    },
    /// A default client was set a second time; the first one stays.
    #[error("a default client is already set; call `{setter}` once, at start-up")]
    #[non_exhaustive]
    DefaultClientSet {
        /// The function that was called twice.
        setter: &'static str,
    },
    /// The [`blocking::Guard`](crate::blocking::Guard) was already released (or dropped).
    #[error(
        "the guard of lock `{name}` was already released; acquire the lock again for another hold"
    )]
    #[non_exhaustive]
    Released {
        /// The lock's name.
        name: String,
    },
    /// [`Lock::run`](crate::Lock::run) would have re-entered a lease of its owner that is
    /// not renewed (acquired with [`Renewal::Fixed`](crate::Renewal::Fixed)), while `run`
    /// promises a renewed lease. Nothing was run.
    #[error(
        "`run` of lock `{name}` would re-enter a lease its owner holds without renewal (Renewal::Fixed); acquire the outer lock with Renewal::Auto, or do the work under the outer guard instead of a nested `run`"
    )]
    #[non_exhaustive]
    FixedLeaseReentered {
        /// The lock's name.
        name: String,
    },
    /// A `#[locked]` function has no `client = ...` and no default client was set.
    #[error(
        "no redlease client: call `{setter}` once at start-up, or pass `client = ...` to `#[redlease::locked]`"
    )]
    #[non_exhaustive]
    NoDefaultClient {
        /// The function that sets the default client this call needed.
        setter: &'static str,
    },
    /// The server lacks a command (or a command's option) that a script of this operation
    /// calls: it is older than redlease supports (Redis 6.2), or the command was renamed
    /// away (`rename-command`). Nothing was changed.
    #[error("{server} lacks {lacks}, which {action} needs; {advice}")]
    ServerLacks {
        /// What we were doing (`acquiring a lock`).
        action: &'static str,
        /// The server and its version as it reported them at connect (`Redis 6.2.14`,
        /// `Valkey 8.1.1`), or `the server` when it did not say.
        server: String,
        /// What it lacks (`` the command `SPUBLISH` (called by acquire.lua) ``).
        lacks: String,
        /// What to do.
        advice: &'static str,
        /// The server's error, when one was met.
        #[source]
        source: Option<redis::RedisError>,
    },
    /// A Redis connection, protocol or server error.
    ///
    /// A permission the Redis ACL user lacks (`NOPERM`, or a command a script may not
    /// call) says so, and names the script. A script reply that the library does not
    /// expect (a short array, an unknown status, a negative fencing token) is one too,
    /// of kind `UnexpectedReturnType`: never taken for a busy lock or a zero token.
    #[error("redis error while {action}; {}", redis_hint(action, source))]
    #[non_exhaustive]
    Redis {
        /// What we were doing.
        action: &'static str,
        /// The underlying error.
        #[source]
        source: redis::RedisError,
    },
}

/// One node's failure in a quorum operation (see [`Error::NoQuorum`]).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{node}: {error}")]
#[non_exhaustive]
pub struct NodeError {
    /// The node's address, password redacted.
    pub node: String,
    /// What went wrong there.
    #[source]
    pub error: redis::RedisError,
}

/// ` (node a: error; node b: error)`, or nothing when no node failed.
fn node_errors(errors: &[NodeError]) -> String {
    if errors.is_empty() {
        return String::new();
    }
    let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
    format!(" (failed: {})", list.join("; "))
}

fn holder_hint(ttl: Option<Duration>) -> String {
    match ttl {
        Some(ttl) => format!(" (the holder's lease has {ttl:?} left)"),
        None => String::new(),
    }
}

/// The action of the errors met while connecting ([`Error::Redis`]).
pub(crate) const CONNECTING: &str = "connecting";
/// What to do about a reply that did not come within the response timeout.
const STOPPED_ANSWERING: &str = "Redis stopped answering: no reply within the response timeout, on a connection that worked (a stopped or overloaded server, or a network that drops packets); the outcome is unknown, and a retry may succeed once Redis answers again";
/// The action of an inspection's errors ([`Error::Redis`]).
pub(crate) const INSPECTING: &str = "inspecting a lock";
/// The action of a forced release's errors.
pub(crate) const REMOVING_HOLDS: &str = "removing a lock's holds";

/// What to do about a Redis error met while doing `action`.
fn redis_hint(action: &str, source: &redis::RedisError) -> String {
    let text = source.to_string();
    // Redis 7.0: "The user executing the script can't run this command"; Redis 7.2+ and
    // Valkey: "ACL failure in script: ... no permissions to run the 'time' command".
    let in_script = text.contains("user executing the script can't run")
        || text.contains("ACL failure in script");
    if error_code(source) == Some("NOPERM") || in_script {
        let script = crate::lua::named_in(&text)
            .map(|name| format!(" (in {name})"))
            .unwrap_or_default();
        if action == INSPECTING || action == REMOVING_HOLDS {
            return "the Redis ACL user lacks a permission that inspecting needs; grant it the operator rules of redlease's docs/SECURITY.md".into();
        }
        format!(
            "the Redis ACL user lacks a permission that redlease needs{script}; grant it the least-privilege ACL line of redlease's docs/SECURITY.md"
        )
    } else if let Some((script, _)) = crate::lua::lacking(&text) {
        let script = script.unwrap_or("a redlease script");
        format!("the server lacks a command that {script} calls; {SCRIPT_COMMANDS}")
    } else if source.kind() == redis::ErrorKind::UnexpectedReturnType {
        "a redlease script answered something it never sends; check that no proxy rewrites replies and that the server runs redlease's own scripts".into()
    } else {
        match error_code(source) {
            Some("BUSY") => {
                "Redis is busy running a long script (BUSY); retry later, or end the script with SCRIPT KILL".into()
            }
            Some("LOADING") => "Redis is still loading its dataset (LOADING); retry later".into(),
            Some(code @ ("TRYAGAIN" | "CLUSTERDOWN" | "MASTERDOWN")) => {
                format!("the deployment is not ready ({code}); retry later")
            }
            Some(code) if !is_connection_error(source) => {
                format!("the server refused it ({code}); see the cause for what it said")
            }
            _ if action == CONNECTING => {
                "check that Redis is reachable (its address, TLS and credentials)".into()
            }
            // A connection that worked went silent: a stopped or overloaded server, or a
            // network that drops packets; not a wrong address.
            _ if source.is_timeout() => STOPPED_ANSWERING.into(),
            _ => "the connection to Redis was closed, reset or refused; check that Redis is up and reachable from here".into(),
        }
    }
}

/// What to do about a command the scripts call that the server lacks.
const SCRIPT_COMMANDS: &str = "redlease's scripts need Redis >= 6.2 or Valkey >= 7.2 with every command of the least-privilege ACL line of docs/SECURITY.md; check that no rename-command removed it";

/// Result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn redis(action: &'static str, key: &str, source: redis::RedisError) -> Self {
        if error_code(&source) == Some("WRONGTYPE") {
            Self::WrongType {
                key: key.to_owned(),
            }
        } else if source.code() == Some("REDLEASE_PERMITS")
            && let Some(in_use) = source
                .detail()
                .and_then(|d| d.split_whitespace().next())
                .and_then(|n| n.parse().ok())
        {
            Self::PermitsMismatch {
                key: key.to_owned(),
                in_use,
            }
        } else if source.code() == Some("REDLEASE_ASKED")
            && let Some((asked, permits)) = source.detail().and_then(|d| {
                let mut words = d.split_whitespace().map(str::parse::<u32>);
                Some((words.next()?.ok()?, words.next()?.ok()?))
            })
        {
            Self::PermitsAsked {
                name: key.to_owned(),
                asked,
                permits,
            }
        } else {
            Self::Redis { action, source }
        }
    }

    /// This error, as [`Error::ServerLacks`] naming `server` when it is a command a script
    /// called that the server does not know.
    pub(crate) fn on_server(self, server: Option<&crate::server::Server>) -> Self {
        let Self::Redis { action, source } = self else {
            return self;
        };
        let Some((script, commands)) = crate::lua::lacking(&source.to_string()) else {
            return Self::Redis { action, source };
        };
        let lacks = if let Some(script) = script.filter(|_| commands.is_empty()) {
            format!("a command that {script} calls")
        } else if commands.is_empty() {
            // Valkey 9's message names neither the script nor the command.
            "a command that a redlease script calls".to_owned()
        } else {
            let names: Vec<String> = commands.iter().map(|c| format!("`{c}`")).collect();
            let script = script.unwrap_or("a redlease script");
            format!("the command {} (called by {script})", names.join(" or "))
        };
        Self::ServerLacks {
            action,
            server: server.map_or_else(|| "the server".to_owned(), ToString::to_string),
            lacks,
            advice: SCRIPT_COMMANDS,
            source: Some(source),
        }
    }

    /// True when the lock was held by another owner for the whole wait
    /// ([`Error::Timeout`]): with [`Wait::No`](crate::Wait::No), "skip if busy". Nothing
    /// went wrong; the work may be skipped, or tried again later.
    pub fn is_busy(&self) -> bool {
        matches!(self, Self::Timeout { .. })
    }

    /// True when the error comes from the connection (refused, dropped, timed out), so
    /// that the outcome of the command is unknown and a retry may succeed.
    pub fn is_connection(&self) -> bool {
        matches!(self, Self::ConnectTimeout { .. })
            || matches!(self, Self::Redis { source, .. } if is_connection_error(source))
    }

    /// True when trying again later may succeed: a connection error (the outcome is
    /// unknown), a passing refusal ([`is_transient`](Self::is_transient)), a replica's
    /// refusal ([`is_on_replica`](Self::is_on_replica)), or a quorum that did not answer.
    pub(crate) fn is_worth_retrying(&self) -> bool {
        self.is_connection()
            || self.is_transient()
            || self.is_on_replica()
            || matches!(self, Self::NoQuorum { .. })
    }

    /// True when a replica refused the command as a write (`READONLY`): nothing was
    /// written, and the connection that met it is replaced by a new one, which a failover
    /// endpoint sends to the new primary. Not a passing refusal for callers
    /// ([`is_transient`](Self::is_transient)): a client pointed at a replica by mistake
    /// meets it every time.
    pub(crate) fn is_on_replica(&self) -> bool {
        matches!(self, Self::Redis { source, .. } if error_code(source) == Some("READONLY"))
    }

    /// True when Redis refused the command for a passing reason, so that it did not run
    /// and trying again later may succeed: a script keeps the server busy (`BUSY`), it is
    /// loading its dataset (`LOADING`), or a cluster or replicated primary is not ready
    /// (`TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`). A waiting acquisition retries these
    /// until its wait runs out.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Redis { source, .. }
                if matches!(
                    error_code(source),
                    Some("BUSY" | "LOADING" | "TRYAGAIN" | "CLUSTERDOWN" | "MASTERDOWN")
                )
        )
    }
}

/// The error code of `e` (`WRONGTYPE`, `READONLY`...), also where a script raised it on
/// Redis 6.2, which wraps it as `ERR Error running script (call to f_<sha1>):
/// @user_script:<line>: <CODE> <message>` (Redis 7.0 and later pass the code through).
pub(crate) fn error_code(e: &redis::RedisError) -> Option<&str> {
    let code = e.code()?;
    if code != "ERR" {
        return Some(code);
    }
    let inner = e
        .detail()
        .filter(|d| d.starts_with("Error running script"))
        .and_then(|d| d.split_once("@user_script:"))
        .map(|(_, rest)| rest.trim_start_matches(|c: char| c.is_ascii_digit()))
        .and_then(|rest| rest.strip_prefix(": "))
        .and_then(|rest| rest.split_whitespace().next())
        .filter(|word| word.len() > 1 && word.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'));
    Some(inner.unwrap_or(code))
}

/// True when `e` is the server refusing the credentials (`NOAUTH`, `WRONGPASS`, or the
/// handshake's authentication failure).
pub(crate) fn is_auth_refusal(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(error_code(e), Some("NOAUTH" | "WRONGPASS"))
}

/// Whether a redis-rs error means that Redis could not be reached (refused, dropped, timed
/// out, or otherwise unrecoverable on this connection), the test behind
/// [`Error::is_connection`]; for code that also talks to Redis directly.
pub fn is_connection_error(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_unrecoverable_error()
}
