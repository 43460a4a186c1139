//! What one demo run is given (`DemoArgs`) and the names it works under: the lock and the
//! Redis keys of the coupon stock, the sales and the fenced resource. A leaf of `demo/`:
//! the driver, its worker processes and the report use it.

use std::time::Duration;

/// The demo's lock name (under the run's namespace prefix).
pub(super) const LOCK: &str = "coupon";

/// Arguments of `redlease demo`.
#[derive(Debug, clap::Args)]
pub(crate) struct DemoArgs {
    /// The Redis to use (`--redis`, global); by default a private redis-server on a free
    /// loopback port, removed afterwards. Set by `main`.
    #[arg(skip)]
    pub(crate) redis: crate::connect::RedisArgs,

    /// Worker processes
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub(super) workers: u16,

    /// Buyer tasks per worker process
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub(super) tasks: u16,

    /// Coupons in stock
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub(super) coupons: u32,

    /// Lease of the holders that crash and pause in steps 3 and 4 (how long the lock stays
    /// taken after they stop)
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_crash_ttl)]
    pub(super) crash_ttl: Duration,
}

fn parse_crash_ttl(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if d < Duration::from_millis(100) || d > Duration::from_secs(60) {
        return Err("out of range; use 100ms to 60s".into());
    }
    Ok(d)
}

/// The Redis keys of one demo run, all under its namespace.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    pub(super) ns: String,
    /// The coupon stock (an integer).
    pub(super) stock: String,
    /// The sales: one fencing token per coupon sold (0 without a lock).
    pub(super) sold: String,
    /// The highest fencing token the fenced resource accepted.
    pub(super) fence_seen: String,
    /// Set by a crashing or pausing holder once it is inside its section.
    pub(super) in_section: String,
}

impl Keys {
    pub(crate) fn new(ns: &str) -> Self {
        Self {
            ns: ns.to_owned(),
            stock: format!("{ns}stock"),
            sold: format!("{ns}sold"),
            fence_seen: format!("{ns}fence-seen"),
            in_section: format!("{ns}in-section"),
        }
    }

    pub(super) fn report(&self, name: &str) -> String {
        format!("{}report:{name}", self.ns)
    }
}
