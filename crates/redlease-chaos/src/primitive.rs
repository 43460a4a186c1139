//! Which primitive the workers of a run hold, and the exclusion rule it promises.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::event::Mode;

/// The primitive the workers of a run contend for: it decides which holds may coexist
/// (for [`check_as`](crate::check_as), its liveness measure, and the [`Judge`](crate::Judge)'s
/// fenced resource).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum Primitive {
    /// One holder at a time.
    #[default]
    Mutex,
    /// At most `permits` holders at a time.
    Semaphore {
        /// The permit count.
        permits: usize,
    },
    /// Many readers or one writer; an event without a [`Mode`] counts as a write.
    RwLock,
    /// Several locks held together ([`redlease::MultiLock`]), out of `names` one-letter
    /// names (`a`, `b`, ...; see [`name`](Primitive::name)): each name is a mutex of its own,
    /// so a section holding `{a, b}` excludes any other holding `a` or `b`, and none holding
    /// only others. Its events name the lock they concern ([`Event::lock`](crate::Event)).
    MultiLock {
        /// How many names the workers draw their locks from.
        names: usize,
    },
    /// Leader election ([`redlease::Election`]): each section is a term of leadership,
    /// from `campaign` to `resign`, and a term is its fencing token. Two leaders at once
    /// break it as two holders of a mutex do: its rule, its model and its fenced resource
    /// are the mutex's.
    Election,
}

impl Primitive {
    /// Whether `worker`, holding (or entering its section) in `mode`, breaks the rule given
    /// `others` (worker → mode; `worker` itself is skipped): a second holder of a mutex,
    /// one more than `permits` of a semaphore, a writer with anyone or a reader with a
    /// writer.
    ///
    /// For a multi-lock, `others` are the holders of one of its names: the mutex rule; for
    /// an election, the leaders: the mutex rule.
    pub fn conflicts(self, worker: u32, mode: Option<Mode>, others: &BTreeMap<u32, Mode>) -> bool {
        let mut others = others.iter().filter(|&(&w, _)| w != worker);
        match self {
            Primitive::Mutex | Primitive::Election | Primitive::MultiLock { .. } => {
                others.next().is_some()
            }
            Primitive::Semaphore { permits } => others.count() >= permits,
            Primitive::RwLock => match mode.unwrap_or(Mode::Write) {
                Mode::Write => others.next().is_some(),
                Mode::Read => others.any(|(_, &m)| m == Mode::Write),
            },
        }
    }

    /// How many holders leave nobody waiting in a stall: `permits` for a semaphore, 1
    /// otherwise (for a read-write lock a stall is "nobody holds while someone waits"; for
    /// a multi-lock, "nobody holds any name while someone waits").
    pub fn capacity(self) -> usize {
        match self {
            Primitive::Semaphore { permits } => permits.max(1),
            Primitive::Mutex
            | Primitive::Election
            | Primitive::RwLock
            | Primitive::MultiLock { .. } => 1,
        }
    }

    /// The `i`-th one-letter lock name of a multi-lock (`a`, `b`, ...; `i` below 26).
    pub fn name(i: usize) -> char {
        u8::try_from(i % 26).map_or('a', |i| char::from(b'a' + i))
    }

    /// The lock an event about a hold of this primitive concerns: one of a multi-lock's
    /// names (the event's [`lock`](crate::Event::lock)), else `None`, the only one.
    pub(crate) fn lane(self, lock: Option<char>) -> Option<char> {
        match self {
            Primitive::MultiLock { .. } => lock,
            Primitive::Mutex
            | Primitive::Election
            | Primitive::Semaphore { .. }
            | Primitive::RwLock => None,
        }
    }

    /// The mode a hold of this primitive counts as in the models: its own for a
    /// read-write lock (a write when it has none), a write otherwise.
    pub(crate) fn mode(self, mode: Option<Mode>) -> Mode {
        match self {
            Primitive::RwLock => mode.unwrap_or(Mode::Write),
            Primitive::Mutex
            | Primitive::Election
            | Primitive::Semaphore { .. }
            | Primitive::MultiLock { .. } => Mode::Write,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rules() {
        let holders = |ms: &[(u32, Mode)]| ms.iter().copied().collect::<BTreeMap<_, _>>();
        let (r, w) = (Mode::Read, Mode::Write);
        let one = holders(&[(1, w)]);
        assert!(Primitive::Mutex.conflicts(2, None, &one));
        assert!(!Primitive::Mutex.conflicts(1, None, &one), "itself");
        assert!(
            Primitive::Election.conflicts(2, None, &one),
            "a second leader"
        );
        assert!(!Primitive::Election.conflicts(1, None, &one), "itself");
        let sem = Primitive::Semaphore { permits: 2 };
        assert!(!sem.conflicts(3, None, &one));
        assert!(sem.conflicts(3, None, &holders(&[(1, w), (2, w)])));
        assert!(
            !sem.conflicts(2, None, &holders(&[(1, w), (2, w)])),
            "itself"
        );
        let readers = holders(&[(1, r), (2, r)]);
        assert!(!Primitive::RwLock.conflicts(3, Some(r), &readers));
        assert!(Primitive::RwLock.conflicts(3, Some(w), &readers));
        assert!(
            Primitive::RwLock.conflicts(3, None, &readers),
            "no mode: a write"
        );
        assert!(Primitive::RwLock.conflicts(3, Some(r), &holders(&[(1, w)])));
        assert!(!Primitive::RwLock.conflicts(1, Some(w), &holders(&[(1, w)])));
        let multi = Primitive::MultiLock { names: 4 };
        assert!(multi.conflicts(2, None, &one), "a second holder of a name");
        assert!(!multi.conflicts(1, None, &one), "itself");
        assert_eq!(
            (0..4).map(Primitive::name).collect::<String>(),
            "abcd",
            "names"
        );
    }
}
