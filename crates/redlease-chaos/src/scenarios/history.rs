//! What a run's history says beyond the checker's findings: the clock rates the workers
//! saw, the first idle acquire after a point, whether a victim came back.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::time::Duration;

use redlease_chaos::{Kind, Primitive};

/// The workers' estimates of the server's clock rate (`Client::server_clock_rate`, sent
/// in millionths as their `BYE`'s token), for the row's note.
pub(super) fn describe_rates(history: &[redlease_chaos::Event], note: &mut String) {
    let rates: Vec<f64> = history
        .iter()
        .filter(|e| e.kind == Kind::Bye && e.token > 0)
        .filter_map(|e| u32::try_from(e.token).ok())
        .map(|ppm| f64::from(ppm) / 1e6)
        .collect();
    let warned = rates.iter().filter(|&&r| r > 1.01).count();
    let shown: Vec<String> = rates.iter().map(|r| format!("x{r:.4}")).collect();
    let _ = write!(
        note,
        "the workers' clients estimated the server's clock at {} ({} of {} above the 1.01 \
         allowance, where the client warns). ",
        if shown.is_empty() {
            "nothing".to_owned()
        } else {
            shown.join(", ")
        },
        warned,
        rates.len()
    );
}

/// The index of the first `ACQ` at or after `from` at which no worker holds any lock (by
/// the history: each `ACQ` until the worker's `REL` or `LOST` of that lock, or its death
/// or departure).
pub(super) fn first_idle_acquire(
    history: &[redlease_chaos::Event],
    from: Duration,
) -> Option<usize> {
    let mut holding = BTreeSet::new();
    for (i, e) in history.iter().enumerate() {
        match e.kind {
            Kind::Acquire if e.at >= from && holding.is_empty() => return Some(i),
            Kind::Acquire => {
                holding.insert((e.worker, e.lock));
            }
            Kind::Release | Kind::Lost => {
                holding.remove(&(e.worker, e.lock));
            }
            Kind::Kill | Kind::Bye => holding.retain(|&(w, _)| w != e.worker),
            _ => {}
        }
    }
    None
}

/// Whether the hold of `victim`, killed last, has come back (the history shows it): for a
/// lock, someone else acquired it since; for a semaphore, as many workers held a permit at
/// once since as there are permits; for a read-write lock, a write was granted since (any
/// grant, if the victim was a writer); for a multi-lock, each name the victim held was
/// acquired by another worker since.
pub(super) fn back(history: &[redlease_chaos::Event], victim: u32, primitive: Primitive) -> bool {
    let Some(killed) = history
        .iter()
        .rposition(|e| e.kind == Kind::Kill && e.worker == victim)
    else {
        return false;
    };
    let after = &history[killed + 1..];
    match primitive {
        Primitive::Mutex | Primitive::Election => after
            .iter()
            .any(|e| e.kind == Kind::Acquire && e.worker != victim),
        Primitive::Semaphore { permits } => {
            let mut holding = std::collections::BTreeSet::new();
            for (i, e) in history.iter().enumerate() {
                crate::handoff::step_holders(&mut holding, e);
                if i > killed && holding.len() >= permits {
                    return true;
                }
            }
            false
        }
        Primitive::MultiLock { .. } => {
            // The names of the victim's last acquisition it had not released.
            let (mut held, mut gone) = (BTreeSet::new(), BTreeSet::new());
            for e in history[..killed]
                .iter()
                .rev()
                .filter(|e| e.worker == victim)
            {
                match e.kind {
                    Kind::Release | Kind::Lost => {
                        gone.insert(e.lock);
                    }
                    Kind::Acquire if !gone.contains(&e.lock) => {
                        held.insert(e.lock);
                    }
                    Kind::Wait => break,
                    _ => {}
                }
            }
            let taken: BTreeSet<_> = after
                .iter()
                .filter(|e| e.kind == Kind::Acquire && e.worker != victim)
                .map(|e| e.lock)
                .collect();
            if held.is_empty() {
                !taken.is_empty()
            } else {
                held.is_subset(&taken)
            }
        }
        Primitive::RwLock => {
            let writer = history[..killed]
                .iter()
                .rev()
                .find(|e| e.kind == Kind::Acquire && e.worker == victim)
                .is_some_and(|e| e.mode != Some(redlease_chaos::Mode::Read));
            after.iter().any(|e| {
                e.kind == Kind::Acquire && (writer || e.mode != Some(redlease_chaos::Mode::Read))
            })
        }
    }
}
