//! Real `redis-server` processes on free loopback ports, for tests, benchmarks and demos.
//!
//! Every server binds `127.0.0.1` only, keeps no data on disk (`--save ""`, no AOF), lives
//! in its own temporary directory, and is stopped by PID when its [`RedisServer`] is
//! dropped, including when a test panics. Nothing here talks to a Redis it did not start.
//!
//! Beyond one server: [`Nodes`] starts N independent primaries (a Redlock quorum),
//! [`Cluster`] a Redis Cluster (3 primaries, 3 replicas by default) with slot migration and
//! failover, and [`Sentinel`] a primary with 2 replicas watched by 3 sentinels. All are
//! synchronous and wait, with generous timeouts, until the deployment has settled.
//!
//! ```no_run
//! # fn main() -> Result<(), redlease_local::Error> {
//! let server = redlease_local::RedisServer::start()?;
//! println!("redis at {}", server.url());
//! // dropped here: the process is killed and its directory removed
//! # Ok(())
//! # }
//! ```

mod cluster;
mod delay_line;
mod error;
mod nodes;
mod proxy;
mod resp;
mod sentinel;
mod server;
mod wait;

pub use cluster::{Cluster, DEFAULT_CLUSTER_TIMEOUT};
pub use delay_line::DelayLine;
pub use error::Error;
pub use nodes::Nodes;
pub use proxy::Proxy;
pub use resp::Reply;
pub use sentinel::{DEFAULT_MASTER_NAME, DEFAULT_SENTINEL_TIMEOUT, Sentinel};
pub use server::{
    DEFAULT_SERVER_BINARY, DEFAULT_START_TIMEOUT, REDLEASE_ACL_RULES, RedisServer, ServerOptions,
    TEST_ACL_ENV, TEST_ACL_PASSWORD, TEST_ADMIN_PASSWORD, free_port,
};

// The README's Rust example, compiled as a doc test so that it cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
