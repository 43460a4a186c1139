//! Every script's ARGV, by name, declared once. The calls of `crate::scripts` set their
//! arguments by these names, in this order (checked in debug builds, so the test suite
//! catches a slot sent in the wrong place), and a test checks each script's header line
//! `-- ARGV: name name ...` against them. The encoding of a call: trailing arguments a call
//! does not need are left out (each script reads a missing one as its default); one that a
//! later argument needs is sent empty ("" or 0, as the script's header says). Every
//! granting script takes `fence_keep` last (the client's
//! [`fence_keep`](crate::ClientBuilder::fence_keep), sent only when it is not the
//! default), before which every slot is sent, "" when unused.

/// One script's arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Args {
    /// The script's file in `scripts/`.
    pub(crate) file: &'static str,
    /// Its ARGV, in order. The renewal scripts take these once per lease.
    pub(crate) names: &'static [&'static str],
}

/// `acquire.lua`: a lock's (or election's) attempt.
pub(crate) const ACQUIRE: Args = Args {
    file: "acquire.lua",
    names: &[
        "token",
        "ttl",
        "holder",
        "mode",
        "channel",
        "linger",
        "announce",
        "sharded",
        "fence_step",
        "fence_keep",
    ],
};
/// `release.lua`: a lock's release and hand-off.
pub(crate) const RELEASE: Args = Args {
    file: "release.lua",
    names: &[
        "token",
        "channel",
        "announce",
        "sharded",
        "own",
        "fence_keep",
    ],
};
/// `sem_acquire.lua`: a semaphore's attempt.
pub(crate) const SEM_ACQUIRE: Args = Args {
    file: "sem_acquire.lua",
    names: &[
        "token",
        "ttl",
        "holder",
        "permits",
        "mode",
        "channel",
        "linger",
        "take",
        "fence_keep",
    ],
};
/// `sem_release.lua`: a permit's release and hand-off.
pub(crate) const SEM_RELEASE: Args = Args {
    file: "sem_release.lua",
    names: &["token", "channel", "sharded", "weight", "own", "fence_keep"],
};
/// `sem_resize.lua`: a semaphore's permit count changed, its queue served.
pub(crate) const SEM_RESIZE: Args = Args {
    file: "sem_resize.lua",
    names: &["permits", "keep", "channel", "sharded", "fence_keep"],
};
/// `rw_acquire.lua`: a read or write attempt.
pub(crate) const RW_ACQUIRE: Args = Args {
    file: "rw_acquire.lua",
    names: &[
        "token",
        "ttl",
        "holder",
        "side",
        "mode",
        "channel",
        "linger",
        "stale",
        "sharded",
        "fence_keep",
    ],
};
/// `rw_release.lua`: a read or write hold's release and hand-off.
pub(crate) const RW_RELEASE: Args = Args {
    file: "rw_release.lua",
    names: &["token", "channel", "sharded", "unused", "own", "fence_keep"],
};
/// `rw_downgrade.lua`: a write hold turned into a read hold.
pub(crate) const RW_DOWNGRADE: Args = Args {
    file: "rw_downgrade.lua",
    names: &["token", "channel", "sharded", "fence_keep"],
};
/// `latch_up.lua`: a latch's count up.
pub(crate) const LATCH_UP: Args = Args {
    file: "latch_up.lua",
    names: &["token", "ttl", "holder", "channel", "sharded", "fence_keep"],
};
/// `latch_down.lua`: a latch's count down.
pub(crate) const LATCH_DOWN: Args = Args {
    file: "latch_down.lua",
    names: &["token", "channel", "sharded"],
};
/// `latch_check.lua`: a latch's waiter's check.
pub(crate) const LATCH_CHECK: Args = Args {
    file: "latch_check.lua",
    names: &["seen", "channel", "sharded"],
};
/// `latch_expect.lua`: arrivals a latch's round expects.
pub(crate) const LATCH_EXPECT: Args = Args {
    file: "latch_expect.lua",
    names: &["n", "only_idle", "channel", "sharded"],
};
/// `lock_extend.lua`: a lock's lease reset.
pub(crate) const LOCK_EXTEND: Args = Args {
    file: "lock_extend.lua",
    names: &["token", "ttl"],
};
/// `lease_extend.lua`: a shared lease's reset.
pub(crate) const LEASE_EXTEND: Args = Args {
    file: "lease_extend.lua",
    names: &["token", "ttl"],
};
/// `lock_renew.lua`: locks' renewals, three arguments per lease.
pub(crate) const LOCK_RENEW: Args = Args {
    file: "lock_renew.lua",
    names: &["token", "ttl", "holder_ttl"],
};
/// `lease_renew.lua`: shared leases' renewals, two arguments per lease.
pub(crate) const LEASE_RENEW: Args = Args {
    file: "lease_renew.lua",
    names: &["token", "ttl"],
};
/// `multi_acquire.lua`: every lock of a multi-lock on one node.
pub(crate) const MULTI_ACQUIRE: Args = Args {
    file: "multi_acquire.lua",
    names: &["token", "ttl", "holder", "fence_keep"],
};
/// `holds.lua`: whether a lease holds a token.
pub(crate) const HOLDS: Args = Args {
    file: "holds.lua",
    names: &["token", "layout"],
};
/// `leader.lua`: an election's leader (no arguments).
pub(crate) const LEADER: Args = Args {
    file: "leader.lua",
    names: &[],
};
/// `proclaim.lua`: a leader's new note.
pub(crate) const PROCLAIM: Args = Args {
    file: "proclaim.lua",
    names: &["token", "note", "fence", "channel", "sharded"],
};
/// `raise_fence.lua`: a quorum node's counter raised. Its third argument is `"zset"` for
/// a lease kept in a ZSET, or an election's channel (with the term record's key).
pub(crate) const RAISE_FENCE: Args = Args {
    file: "raise_fence.lua",
    names: &["fence", "token", "zset_or_channel", "fence_keep"],
};
/// `fenced_set.lua`: the protected resource's fenced write.
pub(crate) const FENCED_SET: Args = Args {
    file: "fenced_set.lua",
    names: &["token", "value"],
};

/// Every script's declaration, for the header check.
#[cfg(test)]
pub(crate) const ALL: [Args; 22] = [
    ACQUIRE,
    RELEASE,
    SEM_ACQUIRE,
    SEM_RELEASE,
    SEM_RESIZE,
    RW_ACQUIRE,
    RW_RELEASE,
    RW_DOWNGRADE,
    LATCH_UP,
    LATCH_DOWN,
    LATCH_CHECK,
    LATCH_EXPECT,
    LOCK_EXTEND,
    LEASE_EXTEND,
    LOCK_RENEW,
    LEASE_RENEW,
    MULTI_ACQUIRE,
    HOLDS,
    LEADER,
    PROCLAIM,
    RAISE_FENCE,
    FENCED_SET,
];

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]
mod tests {
    use super::*;

    /// The names of a script's `-- ARGV:` header line.
    fn header(file: &str) -> Vec<String> {
        let path = format!("{}/scripts/{file}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("-- ARGV:"))
            .unwrap_or_else(|| panic!("{file} has no `-- ARGV:` header line"));
        line.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn every_scripts_header_names_the_arguments_declared_here() {
        for args in ALL {
            assert_eq!(header(args.file), args.names, "{}", args.file);
        }
    }

    #[test]
    fn every_script_is_declared() {
        let dir = format!("{}/scripts", env!("CARGO_MANIFEST_DIR"));
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|f| {
                std::path::Path::new(f)
                    .extension()
                    .is_some_and(|ext| ext.eq_ignore_ascii_case("lua"))
            })
            .collect();
        files.sort();
        let mut declared: Vec<&str> = ALL.iter().map(|a| a.file).collect();
        declared.sort_unstable();
        assert_eq!(files, declared);
    }
}
