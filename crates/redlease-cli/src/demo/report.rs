//! The closing table of `redlease demo`.

use std::fmt::Write as _;

use super::outcome::{Sale, Step};
use super::setup::DemoArgs;
use crate::output::human;

/// The closing table and notes; false when a check failed.
pub(super) fn render(
    args: &DemoArgs,
    unlocked: &Sale,
    locked: &Sale,
    crash: &Step,
    pause: &Step,
) -> (String, bool) {
    let coupons = u64::from(args.coupons);
    let locked_ok = locked.sold == coupons && locked.increasing();
    let crash_ok = crash.next_fence > crash.old_fence && crash.next_applied;
    let refused = pause.stale_refused == Some(true);
    let pause_ok = refused && pause.next_applied && pause.next_fence > pause.old_fence;
    let rows = [
        (
            "1. without a lock",
            unlocked.sold,
            unlocked.stock,
            unlocked.took,
            if unlocked.sold > coupons {
                format!("OVERSOLD: {} sales of {coupons} coupons", unlocked.sold)
            } else {
                "no oversell this time (the race is real; this run was lucky)".to_owned()
            },
        ),
        (
            "2. with redlease",
            locked.sold,
            locked.stock,
            locked.took,
            if locked_ok {
                format!(
                    "exactly {coupons}; {} fencing tokens, strictly increasing",
                    locked.tokens.len()
                )
            } else {
                format!(
                    "FAILED: tokens strictly increasing: {}",
                    locked.increasing()
                )
            },
        ),
        (
            "3. holder SIGKILLed",
            crash.sold,
            crash.stock,
            crash.next_waited,
            if crash_ok {
                format!(
                    "lock freed by its TTL; next holder's token {} > {}",
                    crash.next_fence, crash.old_fence
                )
            } else {
                "FAILED: the next holder did not sell with a larger token".to_owned()
            },
        ),
        (
            "4. holder paused",
            pause.sold,
            pause.stock,
            pause.next_waited,
            if pause_ok {
                format!(
                    "stale write with token {} REFUSED ({} wrote first)",
                    pause.old_fence, pause.next_fence
                )
            } else {
                format!(
                    "FAILED: stale write with token {} got through",
                    pause.old_fence
                )
            },
        ),
    ];
    let mut out = format!(
        "\n  {:<20} {:>5} {:>10} {:>9}  result\n",
        "step", "sold", "stock left", "time"
    );
    for (step, sold, stock, took, result) in rows {
        let _ = writeln!(
            out,
            "  {step:<20} {sold:>5} {stock:>10} {:>9}  {result}",
            human(took)
        );
    }
    let ok = locked_ok && crash_ok && pause_ok;
    out.push_str(&notes(args, crash, pause, ok));
    (out, ok)
}

/// What steps 1 to 4 did, in words, and the verdict.
fn notes(args: &DemoArgs, crash: &Step, pause: &Step, ok: bool) -> String {
    format!(
        "
  1: every buyer GETs the stock, thinks 1ms, SETs stock-1: buyers that read the same
     stock sell the same coupon, and late writes put sold coupons back on sale.
  2: the same code under lock.run(): one buyer at a time, across {workers} processes.
  3: a holder was SIGKILLed mid-section with {crash_left} of its {ttl} lease left; the lock
     stayed taken until the lease ran out; the next holder waited {crash_wait}.
  4: a holder stopped (SIGSTOP, like a long GC pause) with {pause_left} of lease left; the
     next holder got the lock after {pause_wait} and sold the last coupon; woken up, the
     old holder sent its write with its old fencing token and the resource refused it
     (without fencing, the last coupon would have been sold twice); its release said:
     lock {released}.

  {verdict}",
        workers = args.workers,
        crash_left = human(crash.lease_left),
        ttl = human(args.crash_ttl),
        crash_wait = human(crash.next_waited),
        pause_left = human(pause.lease_left),
        pause_wait = human(pause.next_waited),
        released = if pause.stale_release_lost == Some(true) {
            "lost"
        } else {
            "still held (!)"
        },
        verdict = if ok {
            "every check held: no oversell under the lock, no stale write got through"
        } else {
            "a check FAILED (see above)"
        },
    )
}
