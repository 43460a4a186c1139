//! [`Client`]: one cheap-to-clone handle per Redis deployment.
//!
//! `builder` holds the options a client is built with ([`ClientBuilder`], [`Notifications`],
//! the timeouts' defaults) and the ways to start one (`Client::builder`, `Client::quorum`...);
//! its `connect` wires a built client to its deployment (the connections, the
//! notifications, the lease engine); `handle` is the [`Client`] itself, which makes the
//! primitives.

mod builder;
mod handle;

pub use builder::{
    ClientBuilder, DEFAULT_CONNECT_TIMEOUT, DEFAULT_FENCE_KEEP, DEFAULT_RESPONSE_TIMEOUT,
    Notifications,
};
pub use handle::{Client, ClientStats, holder_details};
