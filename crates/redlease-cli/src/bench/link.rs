//! `--link-delay`: a link's latency between the benchmark's clients and every private
//! redis-server, as users on a real network have it. A [`DelayLine`] in front of a server
//! delays every chunk by the same time in both directions without serialising pipelined
//! traffic; both sides of every comparison (and the worker processes) connect through it,
//! so both pay the same link. A leaf of `bench/`.

use std::time::Duration;

use anyhow::Context as _;
use redlease_local::{DelayLine, RedisServer};

/// The longest `--link-delay` accepted.
pub(super) const MAX_DELAY: Duration = Duration::from_secs(1);

/// The URL to reach `server` by: through a new delay line of `delay` each way (kept alive
/// in `lines`: drop them before the server), or directly when `delay` is `None`.
pub(super) fn url(
    server: &RedisServer,
    delay: Option<Duration>,
    lines: &mut Vec<DelayLine>,
) -> anyhow::Result<String> {
    let Some(delay) = delay else {
        return Ok(server.url());
    };
    let line = DelayLine::start(server.port(), delay)
        .context("starting a delay line in front of a private redis-server")?;
    let url = line.url();
    lines.push(line);
    Ok(url)
}

/// How the report's header names the link: no delay line, or the delay each way.
pub(super) fn shown(delay: Option<Duration>) -> String {
    match delay {
        None => "no link delay (no delay line)".to_owned(),
        Some(d) => format!(
            "link delay {} each way (a delay line in front of Redis)",
            humantime::format_duration(d)
        ),
    }
}
