//! How every command of `redlease` writes for people and scripts: durations, token
//! prefixes, lines on stdout. A leaf: it uses no other module of the binary.

use std::fmt::Write as _;
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
pub(crate) fn time_left(remaining_ms: Option<u64>) -> String {
    match remaining_ms {
        Some(ms) => format!("{} left", human(Duration::from_millis(ms))),
        None => "no expiry".into(),
    }
}

/// A token prefix as text shows it: the hex digits, then `…` (the token goes on). JSON
/// carries the digits alone, in ASCII.
pub(crate) fn shown(prefix: &str) -> String {
    format!("{}…", echo(prefix))
}

/// The longest echo of a name, key or path in a message, in characters.
const ECHO_CHARS: usize = 120;

/// Text from outside (a lock name or key, holder details, a program's path) as a message
/// shows it: control characters escaped (`\n`, `\u{1b}`), so that a name cannot end a line
/// or drive the terminal, and at most [`ECHO_CHARS`] characters, then `…` and how long it
/// was (cron mails whatever a job prints).
pub(crate) fn echo(text: &str) -> String {
    let mut out = String::new();
    for (n, c) in text.chars().enumerate() {
        if n == ECHO_CHARS {
            let _ = write!(out, "… ({} bytes in all)", text.len());
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Writes `text` and a newline on stdout.
pub(crate) fn print(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}").context("writing to stdout")?;
    out.flush().context("writing to stdout")
}

#[cfg(test)]
mod tests {
    use super::echo;

    #[test]
    fn echoes_escape_control_characters_and_stop_at_their_length() {
        assert_eq!(echo("job"), "job");
        assert_eq!(echo("a\nb\u{1b}[31m"), "a\\nb\\u{1b}[31m");
        let long = "x".repeat(100_000);
        let shown = echo(&long);
        assert!(shown.starts_with(&"x".repeat(120)), "{shown}");
        assert!(shown.ends_with("… (100000 bytes in all)"), "{shown}");
    }
}
