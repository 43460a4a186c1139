//! Waiting for an external state that announces itself with no event.
//!
//! Replication links, cluster gossip and sentinel discovery can only be observed by asking;
//! [`until`] asks with a short, growing delay and gives up at a deadline, reporting the last
//! state it saw.

use std::time::{Duration, Instant};

use crate::Error;

/// The longest pause between two checks.
const MAX_DELAY: Duration = Duration::from_millis(200);

/// Calls `check` until it returns `Ok`, or fails with [`Error::Timeout`] after `timeout`.
///
/// `check` returns `Err(state)` while the wait goes on; the last `state` ends up in the
/// error, to say what never happened.
pub(crate) fn until<T>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> Result<T, Error> {
    let started = Instant::now();
    let mut delay = Duration::from_millis(10);
    loop {
        let last = match check() {
            Ok(value) => return Ok(value),
            Err(last) => last,
        };
        if started.elapsed() >= timeout {
            return Err(Error::Timeout {
                what: what.to_owned(),
                waited: started.elapsed(),
                last,
            });
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(MAX_DELAY);
    }
}
