//! What the server behind a connection is (Redis or Valkey, and its version), read once at
//! connect, and what that lets the library use.
//!
//! The scripts use nothing newer than Redis 6.2, so that every primitive runs on the
//! servers people run (Redis 6.2, 7.x, 8.x; Valkey 7.2+). What remains newer is asked
//! about here: sharded pub/sub (`SSUBSCRIBE`/`SPUBLISH`, Redis 7.0), which a Redis
//! Cluster client uses for its waiters where the server has it, and replaces by classic
//! pub/sub where not (see `Deployment::shard_channels`). The version also names the server
//! in the errors of a command it lacks (see [`crate::Error::ServerLacks`]).
//!
//! The version comes from `HELLO`, which every ACL user may run (its `server` is `valkey`
//! on Valkey 8 and later; Valkey 7.2 answers as Redis 7.2.4, which it is compatible with),
//! or from `INFO server` (`redis_version`, and `valkey_version` with `server_name:valkey`
//! on Valkey) where `HELLO` takes no bare call.

use std::fmt;

/// The server's product and version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Server {
    /// `Redis` or `Valkey`.
    product: &'static str,
    /// The version as the server reported it (e.g. `6.2.14`).
    version: String,
    /// The Redis version whose commands it has (a Valkey 7.2+ has at least Redis 7.2's).
    redis: (u32, u32),
}

impl Server {
    /// Reads the reply to `INFO server`; `None` when it names no version.
    pub(crate) fn from_info(info: &str) -> Option<Self> {
        let field = |name: &str| {
            info.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        let redis_version = field("redis_version")?;
        match (field("server_name"), field("valkey_version")) {
            (Some("valkey"), valkey) | (_, valkey @ Some(_)) => {
                Some(Self::valkey(valkey.unwrap_or(redis_version), redis_version))
            }
            _ => Self::redis(redis_version),
        }
    }

    /// Reads the `server` and `version` fields of the reply to `HELLO`.
    pub(crate) fn from_hello(server: Option<&str>, version: &str) -> Option<Self> {
        if server == Some("valkey") {
            // Valkey's HELLO gives its own version; its commands are at least Redis 7.2's.
            Some(Self::valkey(version, "7.2.4"))
        } else {
            Self::redis(version)
        }
    }

    fn redis(version: &str) -> Option<Self> {
        Some(Self {
            product: "Redis",
            version: version.to_owned(),
            redis: major_minor(version)?,
        })
    }

    fn valkey(version: &str, redis_version: &str) -> Self {
        Self {
            product: "Valkey",
            version: version.to_owned(),
            // Valkey 8 and 9 report redis_version 7.2.4: what they are compatible with.
            redis: major_minor(redis_version).unwrap_or((7, 2)),
        }
    }

    /// Whether the server has sharded pub/sub (`SSUBSCRIBE`, `SPUBLISH`: Redis 7.0, every
    /// Valkey).
    #[cfg_attr(
        not(feature = "cluster"),
        allow(dead_code, reason = "only a Cluster client asks")
    )]
    pub(crate) fn sharded_pubsub(&self) -> bool {
        self.redis >= (7, 0)
    }

    /// The oldest of `servers` by the Redis commands they have (the one whose limits
    /// matter), or `None` when none is known.
    pub(crate) fn oldest(servers: impl IntoIterator<Item = Self>) -> Option<Self> {
        servers.into_iter().min_by_key(|s| s.redis)
    }
}

impl fmt::Display for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.product, self.version)
    }
}

/// `(major, minor)` of a version such as `6.2.14` or `8.0.0-rc1`.
fn major_minor(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a parsed server is called, and whether it has sharded pub/sub.
    fn seen(server: Option<Server>) -> Option<(String, bool)> {
        server.map(|s| (s.to_string(), s.sharded_pubsub()))
    }

    #[test]
    fn servers_are_named_with_what_they_can_do() {
        let redis62 = "# Server\r\nredis_version:6.2.14\r\nredis_mode:standalone\r\n";
        let valkey = "redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.1.1\r\n";
        let cases = [
            (Server::from_info(redis62), "Redis 6.2.14", false),
            (Server::from_info(valkey), "Valkey 8.1.1", true),
            (
                Server::from_hello(Some("redis"), "8.0.2"),
                "Redis 8.0.2",
                true,
            ),
            (
                Server::from_hello(Some("valkey"), "9.0.0"),
                "Valkey 9.0.0",
                true,
            ),
            (
                Server::from_hello(Some("redis"), "7.0.15"),
                "Redis 7.0.15",
                true,
            ),
        ];
        for (server, name, sharded) in cases {
            assert_eq!(seen(server), Some((name.to_owned(), sharded)), "{name}");
        }
        assert_eq!(Server::from_info("no version here"), None);
    }

    #[test]
    fn the_oldest_decides() {
        let old = Server::from_info("redis_version:6.2.14\r\n");
        let new = Server::from_info("redis_version:7.0.15\r\n");
        let oldest = Server::oldest(new.into_iter().chain(old.clone()));
        assert_eq!(oldest, old);
    }
}
