//! The ACL users the tests share under [`TEST_ACL_ENV`]: redlease's least-privilege user
//! and an `admin`.

/// Set this environment variable to `1` to run tests as redlease's least-privilege Redis
/// user: every standalone server started here (and every [`Nodes`](crate::Nodes) member) then turns the
/// `default` user off and creates a `redlease` user with [`REDLEASE_ACL_RULES`] (password
/// [`TEST_ACL_PASSWORD`]), whom [`RedisServer::url`](crate::RedisServer::url) and [`Proxy::url`](crate::Proxy::url) name, and an `admin`
/// user (every command, key and channel; password [`TEST_ADMIN_PASSWORD`]), whom
/// [`RedisServer::admin_url`](crate::RedisServer::admin_url) and [`RedisServer::query`](crate::RedisServer::query) use for the tests' own look-ups.
/// Servers started with TLS, for a cluster or a Sentinel deployment, or with their own
/// `--user`, `--aclfile` or `--requirepass`, are left as they are.
pub const TEST_ACL_ENV: &str = "REDLEASE_TEST_ACL";

/// The `redlease` user's password under [`TEST_ACL_ENV`].
pub const TEST_ACL_PASSWORD: &str = "redlease-test-pw";

/// The `admin` user's password under [`TEST_ACL_ENV`].
pub const TEST_ADMIN_PASSWORD: &str = "redlease-admin-pw";

/// redlease's least-privilege ACL rules (the line of `docs/SECURITY.md`), to follow
/// `user redlease on >PASSWORD`: its keys and channels under the default prefix, the
/// commands the library sends, and those its scripts call.
pub const REDLEASE_ACL_RULES: &[&str] = &[
    "resetkeys",
    "~redlease:*",
    "~{redlease:*",
    "resetchannels",
    "&redlease:*",
    "&{redlease:*}?released",
    "-@all",
    // Sent by the library itself.
    "+evalsha",
    "+eval",
    "+script|load",
    "+ping",
    "+role",
    "+subscribe",
    "+unsubscribe",
    "+wait",
    // Called by the scripts (which run with the caller's permissions).
    "+get",
    "+set",
    "+del",
    "+time",
    "+pexpire",
    "+pttl",
    "+lpop",
    "+lpush",
    "+rpush",
    "+lrem",
    "+hget",
    "+hdel",
    "+hsetnx",
    "+publish",
    "+hset",
    "+lindex",
    "+lrange",
    "+pubsub|numsub",
    "+pexpireat",
    "+zadd",
    "+zcard",
    "+zrange",
    "+zrangebyscore",
    "+zrem",
    "+zremrangebyscore",
    "+zscore",
    "+sadd",
    "+srem",
    "+scard",
    "+hincrby",
    "+hmget",
];

/// Whether [`TEST_ACL_ENV`] asks for the least-privilege user.
pub(crate) fn test_acl_wanted() -> bool {
    std::env::var(TEST_ACL_ENV).is_ok_and(|v| v == "1")
}
