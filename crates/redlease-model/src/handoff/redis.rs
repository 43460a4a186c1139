//! Redis' side of the hand-off model: `acquire.lua`, `release.lua` and `handoff.lua`'s
//! `hand_on`, each one atomic step on the [`State`].

use super::model::HandoffModel;
use super::state::{Handed, Key, Reply, SEEN_JUMP, State};

impl HandoffModel {
    /// `acquire.lua`, atomically: take a free lock (under [`Rule::ConfirmInWindow`] once
    /// the queue was served up to our own place), answer `Ours` for our own token
    /// (refreshing the expiry under the fix), else join the queue once and answer busy.
    pub(super) fn script(&self, s: &mut State, i: usize) -> Reply {
        let me = client_id(i);
        let ttl = self.config.ttl;
        // The waiters queued before the caller (all of them when it is not queued).
        let mine = s.queue.iter().position(|&q| q == me);
        let older: Vec<u8> = s.queue[..mine.unwrap_or(s.queue.len())].to_vec();
        if s.key.is_none() && self.rule().serves_queue_first() && !s.queue.is_empty() {
            self.hand_on(s, me, Own::Take, Maker::Attempt);
        }
        match s.key {
            None => {
                let listening =
                    |q: &u8| s.queue.contains(q) && s.clients[usize::from(*q)].subscribed;
                if self.tracks() && older.iter().any(listening) {
                    s.seen |= SEEN_JUMP;
                }
                s.counter += 1;
                s.key = Some(Key {
                    holder: me,
                    left: ttl,
                    handed: None,
                });
                s.queue.retain(|&q| q != me);
                Reply::Fresh(s.counter)
            }
            Some(k) if k.holder == me => {
                if self.rule().refreshes() {
                    s.key = Some(Key {
                        left: ttl,
                        handed: None,
                        ..k
                    });
                }
                Reply::Ours(s.counter)
            }
            Some(_) => {
                if s.clients[i].subscribed && !s.queue.contains(&me) {
                    s.queue.push(me);
                }
                Reply::Busy(if self.rule().voids_stale() {
                    s.counter
                } else {
                    0
                })
            }
        }
    }

    /// `release.lua` with client `i`'s token: if the key holds it, hand the lock on
    /// ([`Self::hand_on`]), or delete the key when no one takes it; otherwise withdraw the
    /// token from the queue, and under the claim-window rules serve the queue if the lock
    /// is free. Whether the lock was handed on.
    pub(super) fn release(&self, s: &mut State, i: usize) -> bool {
        let me = client_id(i);
        if s.key.is_none_or(|k| k.holder != me) {
            s.queue.retain(|&q| q != me);
            if s.key.is_none() && self.rule().confirms_every_grant() {
                return self.hand_on(s, me, Own::Drop, Maker::Release);
            }
            return false;
        }
        s.key = None;
        self.hand_on(s, me, Own::Drop, Maker::Release)
    }

    /// `hand_on` (`handoff.lua`): pop the queue's head until one takes the lock (a new
    /// fence each, PUBLISH of the grant). A head whose subscription is down is skipped: it
    /// loses its place, or under the claim-window rules keeps it at the head. The key is
    /// set for the claim window under [`Rule::ConfirmInWindow`], else for the ttl. The
    /// caller's own place is dropped, and with [`Own::Take`] the popping stops there (the
    /// caller takes the free lock). Whether a waiter was handed the lock.
    fn hand_on(&self, s: &mut State, own: u8, at_own: Own, maker: Maker) -> bool {
        let mut kept = Vec::new();
        let mut granted = false;
        while !s.queue.is_empty() {
            let head = s.queue.remove(0);
            if head == own {
                if at_own == Own::Take {
                    break;
                }
                continue;
            }
            s.counter += 1;
            let waiter = &mut s.clients[usize::from(head)];
            if waiter.subscribed {
                if self.rule().confirms_every_grant() {
                    // A wake-up only: any grant unread makes the waiter attempt, so the
                    // latest stands for all (more attempts are re-checks).
                    waiter.grants.clear();
                }
                waiter.grants.push(s.counter);
                waiter.grants.sort_unstable();
                let left = if self.rule().hands_off_for_window() {
                    self.config.window
                } else {
                    self.config.ttl
                };
                s.key = Some(Key {
                    holder: head,
                    left,
                    handed: self.tracks().then_some(Handed {
                        by_release: maker == Maker::Release,
                        silent_for: 0,
                    }),
                });
                granted = true;
                break;
            }
            if self.rule().confirms_every_grant() {
                kept.push(head);
            }
        }
        kept.append(&mut s.queue);
        s.queue = kept;
        granted
    }
}

/// How [`HandoffModel::hand_on`] treats the caller's own place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Own {
    /// Dropped, and the popping goes on (a release).
    Drop,
    /// Dropped, and the popping stops: the caller takes the free lock (an attempt).
    Take,
}

/// Which script makes a hand-off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Maker {
    /// `release.lua`: its client follows the hand-off up (under the rules that do).
    Release,
    /// `acquire.lua`, serving the queue of a free lock: its client only re-checks.
    Attempt,
}

/// Client `i`'s token.
pub(super) fn client_id(i: usize) -> u8 {
    u8::try_from(i).unwrap_or(u8::MAX)
}
