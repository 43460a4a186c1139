//! What can go wrong starting, stopping or querying a server or a deployment.

use std::time::Duration;

/// What went wrong while starting or driving a server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `redis-server` could not be run at all.
    #[error(
        "could not run `{binary}`: install Redis (Debian: apt-get install redis-server) or set REDLEASE_REDIS_SERVER"
    )]
    Spawn {
        /// The binary that was run.
        binary: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// The server started but never answered `PING` in time.
    #[error("redis-server on port {port} did not answer PING within {waited:?}; its log:\n{log}")]
    NotReady {
        /// The port it was given.
        port: u16,
        /// How long we waited.
        waited: Duration,
        /// The server's log, to show why.
        log: String,
    },
    /// An I/O error on the temporary directory, a port or a control connection.
    #[error("i/o error while managing a local redis-server")]
    Io(#[from] std::io::Error),
    /// A server answered a set-up command with an error or an unexpected reply.
    #[error("redis-server on port {port} answered `{command}` with {reply}")]
    Reply {
        /// The server's port.
        port: u16,
        /// The command, space-separated.
        command: String,
        /// What it answered.
        reply: String,
    },
    /// A cluster, a replica or a sentinel did not reach the state waited for in time.
    #[error(
        "{what}: not reached within {waited:?} (the machine may be overloaded); last seen: {last}"
    )]
    Timeout {
        /// The state waited for.
        what: String,
        /// How long we waited.
        waited: Duration,
        /// The last state observed, to say what was missing.
        last: String,
    },
    /// A signal could not be delivered to the server process.
    #[error("could not signal redis-server (pid {pid})")]
    Signal {
        /// The process id.
        pid: u32,
        /// Why.
        #[source]
        source: nix::Error,
    },
}
