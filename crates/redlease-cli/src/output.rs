//! How every command of `redlease` writes for people and scripts: durations, token
//! prefixes, lines on stdout. A leaf: it uses no other module of the binary.

use std::io::Write as _;
use std::time::Duration;

use anyhow::Context as _;

/// A duration for people: whole seconds from 10 s up, else milliseconds.
pub(crate) fn human(d: Duration) -> String {
    let d = if d >= Duration::from_secs(10) {
        Duration::from_secs(d.as_secs())
    } else {
        Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    };
    humantime::format_duration(d).to_string()
}

/// `12s 300ms left`, or `no expiry`.
pub(crate) fn time_left(ttl_ms: Option<u64>) -> String {
    match ttl_ms {
        Some(ms) => format!("{} left", human(Duration::from_millis(ms))),
        None => "no expiry".into(),
    }
}

/// A token prefix as text shows it: the hex digits, then `…` (the token goes on). JSON
/// carries the digits alone, in ASCII.
pub(crate) fn shown(prefix: &str) -> String {
    format!("{prefix}…")
}

/// Writes `text` and a newline on stdout.
pub(crate) fn print(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}").context("writing to stdout")?;
    out.flush().context("writing to stdout")
}
