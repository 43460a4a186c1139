//! The scripts of the serve model, each one atomic step: `serve` (`semaphore.lua`,
//! `rwlock.lua`), an attempt (`sem_acquire.lua`, `rw_acquire.lua`) with the re-check time
//! its reply gives, a release or withdrawal (`sem_release.lua`, `rw_release.lua`), and the
//! nudges of `scripts/lib/grants.lua`.

use super::model::ServeModel;
use super::state::{
    Client, Kind, Permit, Phase, SEEN_BEHIND, SEEN_CUT_GRANT, SEEN_DEAD_HEAD, SEEN_DROP,
    SEEN_GONE_GRANT, SEEN_HELD_BACK, SEEN_NUDGE, SEEN_SHARED, SEEN_STUCK, State, Want, client_id,
};

impl ServeModel {
    /// What the current leases were granted for.
    pub(super) fn held(&self, s: &State) -> Vec<Want> {
        (s.permits.iter())
            .map(|p| self.config.want_of(p.token))
            .collect()
    }

    /// Whether a grant of `want` fits beside the current leases.
    pub(super) fn fits_now(&self, s: &State, want: Want) -> bool {
        self.config.fits(self.held(s), want)
    }

    /// When a watcher re-checks, in ticks from now: the semaphore's earliest lease end
    /// (`earliest_end`), the read-write lock's latest (`settle`); `None` when nothing is
    /// held.
    fn holds_end(&self, s: &State) -> Option<u8> {
        let lefts = s.permits.iter().map(|p| p.left);
        match self.config.kind {
            Kind::Semaphore(_) => lefts.min(),
            Kind::ReadWrite => lefts.max(),
        }
    }

    /// `serve`: grants the queue's head for as long as it fits. The caller takes its grant
    /// silently (its whole ttl); any other head is granted and told by a `PUBLISH`, which
    /// sets a claim window (or the whole lease: [`ServeConfig::window`]), unless it reaches
    /// no one: then its place is dropped. A head that does not fit stops the serve (FIFO),
    /// unless it keeps others out (a writer, a request for more permits than are free) and
    /// its client does not listen: then it is dropped ([`ServeConfig::drop_dead_head`]).
    /// A semaphore's serve stops as soon as no permit is free. Then the watchers are nudged
    /// (`after_grant`). Whether the caller was served.
    ///
    /// [`ServeConfig::window`]: super::ServeConfig::window
    /// [`ServeConfig::drop_dead_head`]: super::ServeConfig::drop_dead_head
    pub(super) fn serve(&self, s: &mut State, caller: Option<u8>) -> bool {
        let cfg = &self.config;
        let mut mine = false;
        let mut window: Option<u8> = None;
        let queued = s.queue.len();
        while let Some(&head) = s.queue.first() {
            if cfg.kind != Kind::ReadWrite && !self.fits_now(s, Want::Permits(1)) {
                // `while free > 0`: no permit free, nothing to look at.
                break;
            }
            let h = usize::from(head);
            let want = cfg.want_of(head);
            if !self.fits_now(s, want) {
                let keeps_out = cfg.kind != Kind::ReadWrite || want == Want::Write;
                let dead = Some(head) != caller && !s.clients[h].listens();
                if cfg.drop_dead_head && keeps_out && dead {
                    s.queue.remove(0);
                    s.seen |= SEEN_DROP | SEEN_DEAD_HEAD;
                    continue;
                }
                break;
            }
            s.queue.remove(0);
            if Some(head) == caller {
                Self::grant(s, head, cfg.ttl);
                mine = true;
                continue;
            }
            if !s.clients[h].listens() {
                s.seen |= SEEN_DROP;
                continue;
            }
            let lease = cfg.window.unwrap_or(cfg.ttl);
            Self::grant(s, head, lease);
            window = Some(window.map_or(lease, |w| w.min(lease)));
            s.clients[h].granted = true;
            if s.clients[h].phase == Phase::Cut {
                s.seen |= SEEN_CUT_GRANT;
            } else if !s.clients[h].wanted() {
                s.seen |= SEEN_GONE_GRANT;
            } else if s.clients[..h]
                .iter()
                .any(|c| !c.wanted() && !matches!(c.phase, Phase::Done | Phase::Idle))
            {
                s.seen |= SEEN_BEHIND;
            }
        }
        if let Some(&head) = s.queue.first()
            && self.fits_now(s, cfg.want_of(head))
        {
            s.seen |= SEEN_STUCK;
        }
        if s.permits.len() > 1 && self.held(s).contains(&Want::Read) {
            s.seen |= SEEN_SHARED;
        }
        if let Some(w) = window {
            self.nudge(s, 0, w);
        } else if mine {
            let moved = if cfg.nudge_every_moved {
                queued - s.queue.len()
            } else {
                1
            };
            self.nudge(s, cfg.front.saturating_sub(moved), cfg.ttl);
        }
        mine
    }

    /// `nudge_front`: the running waiters at places `from` to the front's last re-check in
    /// `ticks` ("next <ms>" replaces a waiter's re-check timer).
    fn nudge(&self, s: &mut State, from: usize, ticks: u8) {
        if !self.config.nudges {
            return;
        }
        let front = self.config.front.min(s.queue.len());
        for place in from..front {
            let c = &mut s.clients[usize::from(s.queue[place])];
            if c.running_waiter() {
                c.due = Some(ticks);
                s.seen |= SEEN_NUDGE;
            }
        }
    }

    /// Records a lease of `token` for `left` ticks.
    pub(super) fn grant(s: &mut State, token: u8, left: u8) {
        s.permits.push(Permit {
            token,
            left,
            unclaimed: 0,
        });
    }

    /// `sem_release.lua` / `rw_release.lua` with client `i`'s token: give its lease back,
    /// or withdraw its place (`withdraw`: a watcher leaving nudges the waiter that moves up
    /// into the front to re-check when the holds can end), then serve the queue.
    pub(super) fn release(&self, s: &mut State, i: usize) {
        let me = client_id(i);
        let held = s.permits.len();
        s.permits.retain(|p| p.token != me);
        if s.permits.len() == held
            && let Some(place) = s.queue.iter().position(|&q| q == me)
        {
            s.queue.remove(place);
            if let Some(left) = self.holds_end(s)
                && place < self.config.front
            {
                self.nudge(s, self.config.front.saturating_sub(1), left);
            }
        }
        self.serve(s, None);
    }

    /// `sem_acquire.lua` / `rw_acquire.lua` with client `i`'s token: a lease it holds
    /// already (a grant not read yet) is its own, for its whole ttl; else the queue is
    /// served (it may be the head); a caller not queued takes the lease only when the
    /// queue is empty and it fits, and joins the queue otherwise. A caller left waiting
    /// sets its re-check timer from the reply.
    pub(super) fn attempt(&self, s: &mut State, i: usize) {
        let me = client_id(i);
        let cfg = &self.config;
        let holding = Client {
            phase: Phase::Holding,
            granted: false,
            due: None,
        };
        if let Some(p) = s.permits.iter_mut().find(|p| p.token == me) {
            // A grant confirmed by the waiter's attempt: the whole lease from now.
            p.left = cfg.ttl;
            s.clients[i] = holding;
            return;
        }
        if self.serve(s, Some(me)) {
            s.clients[i] = holding;
            return;
        }
        if !s.queue.contains(&me) {
            let want = cfg.want(i);
            if s.queue.is_empty() && self.fits_now(s, want) {
                Self::grant(s, me, cfg.ttl);
                s.clients[i] = holding;
                return;
            }
            if self.fits_now(s, want) {
                s.seen |= SEEN_HELD_BACK;
            }
            s.queue.push(me);
        }
        s.clients[i].phase = Phase::Waiting;
        s.clients[i].due = self.reply_timer(s, me);
    }

    /// The re-check time a queued caller's reply gives, in ticks: none when nothing is
    /// held or the caller is not a watcher; when the holders would let it in but a place
    /// ahead keeps it out, at most a claim window (with [`ServeConfig::drop_dead_head`],
    /// so that a dead head costs that window); else when the holds can end.
    ///
    /// [`ServeConfig::drop_dead_head`]: super::ServeConfig::drop_dead_head
    pub(super) fn reply_timer(&self, s: &State, me: u8) -> Option<u8> {
        let left = self.holds_end(s)?;
        let place = s.queue.iter().position(|&q| q == me)?;
        if place >= self.config.front {
            return None;
        }
        if self.config.drop_dead_head && self.fits_now(s, self.config.want_of(me)) {
            return Some(left.min(self.config.claim));
        }
        Some(left)
    }

    /// Whether a live waiter (queued, running, not yet granted) would be served if every
    /// crashed waiter's place were dropped and every lease nobody waits for were free: the
    /// lock or permits it could have are held back from it.
    pub fn could_serve_live(&self, s: &State) -> bool {
        let mut held: Vec<Want> = (s.permits.iter())
            .filter(|p| s.clients[usize::from(p.token)].wanted())
            .map(|p| self.config.want_of(p.token))
            .collect();
        for &q in &s.queue {
            let c = &s.clients[usize::from(q)];
            if c.phase == Phase::Crashed {
                continue;
            }
            let want = self.config.want_of(q);
            if !self.config.fits(held.iter().copied(), want) {
                return false;
            }
            if c.running_waiter() && !c.granted {
                return true;
            }
            held.push(want);
        }
        false
    }
}
