//! The protected resource's half of fencing: accept a write only with a fencing token at
//! least as large as the largest one accepted before.
//!
//! A lock cannot stop a holder that outlived its lease (a GC pause, a partition) from
//! sending one more write; the resource can refuse it. Each pattern below keeps, beside
//! the data, the largest [`FencingToken`] it accepted, and applies a write only when the
//! writer's token is not smaller, in one atomic step. Equal tokens pass (one holder may
//! write many times); a smaller one means a newer holder already wrote.
//!
//! # A value kept in Redis
//! [`fenced_set`] does it in one script: the value at `key`, the largest accepted token
//! at [`fence_key`]`(key)` (in the same cluster slot).
//!
//! # A row in a SQL database
//! Keep the token in a column and make it part of the `UPDATE`'s condition; the row
//! count says whether the write was applied:
//!
//! ```sql
//! -- once: ALTER TABLE accounts ADD COLUMN fence BIGINT NOT NULL DEFAULT 0;
//! UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence <= $2;
//! -- 1 row: applied; 0 rows: refused (a newer holder wrote), or no such id
//! ```
//!
//! `BIGINT` holds every token (they stay below 2^53). `crates/redlease/tests/resource.rs`
//! runs this against `SQLite`.
//!
//! # An HTTP service
//! Send the token in the [`FENCING_TOKEN_HEADER`] request header; the service compares
//! it with the largest it accepted for the resource (itself in one atomic step, e.g. the
//! SQL above) and answers `409 Conflict` to an older one. Without the header a service
//! that requires fencing should answer `428 Precondition Required`.

use redis::aio::ConnectionLike;

use crate::error::{Error, Result};
use crate::scripts;
use crate::token::FencingToken;

/// The request header that carries a fencing token to an HTTP service.
pub const FENCING_TOKEN_HEADER: &str = "Redlease-Fencing-Token";

/// What [`fenced_set`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fenced {
    /// The value was written; the resource now remembers this token.
    Written,
    /// Refused: a newer holder already wrote with this larger token.
    Refused {
        /// The largest token the resource accepted.
        newer: FencingToken,
    },
}

/// The key where [`fenced_set`] keeps the largest token accepted for `key`: in the same
/// cluster slot as `key` (`{key}:fence`, or `key:fence` when `key` has a hash tag).
///
/// # Errors
/// [`Error::InvalidName`] for an empty key, or one with braces but no hash tag (`a{}b`),
/// whose slot no other key can share for sure: give it a hash tag (`a{b}`).
pub fn fence_key(key: &str) -> Result<String> {
    let tagged = key
        .find('{')
        .is_some_and(|open| key[open + 1..].find('}').is_some_and(|len| len > 0));
    if tagged {
        Ok(format!("{key}:fence"))
    } else if key.is_empty() || key.contains(['{', '}']) {
        Err(Error::InvalidName {
            reason: format!(
                "`{key}` cannot have its fencing token beside it in one cluster slot; use a non-empty key with a hash tag, e.g. `{{{}}}`",
                key.replace(['{', '}'], "")
            ),
        })
    } else {
        Ok(format!("{{{key}}}:fence"))
    }
}

/// Sets `key` to `value` if `token` is at least the largest token accepted for `key`
/// before, and then remembers `token`, atomically (one script). The connection may be to
/// any Redis, not necessarily the lock's.
///
/// # Errors
/// [`Error::Redis`] when Redis cannot be asked; [`Error::WrongType`] when the token's key
/// holds something else; [`Error::InvalidName`] as [`fence_key`].
///
/// # Cancel safety
/// If dropped, the write may or may not have happened (as any Redis write).
///
/// # Examples
/// ```no_run
/// # #[derive(Debug)] enum AppError { Stale, Lock(redlease::Error) }
/// # impl From<redlease::Error> for AppError { fn from(e: redlease::Error) -> Self { Self::Lock(e) } }
/// # async fn example(client: redlease::Client, mut conn: redis::aio::MultiplexedConnection) -> Result<(), AppError> {
/// use redlease::resource::{Fenced, fenced_set};
/// client
///     .lock("stock")
///     .run(async |guard| {
///         match fenced_set(&mut conn, "coupon:stock", 99, guard.fencing_token()).await? {
///             Fenced::Written => Ok(()),
///             // Refused: a newer holder wrote, so our lease must have run out.
///             _ => Err(AppError::Stale),
///         }
///     })
///     .await
/// # }
/// ```
pub async fn fenced_set<C, V>(
    conn: &mut C,
    key: &str,
    value: V,
    token: FencingToken,
) -> Result<Fenced>
where
    C: ConnectionLike + Send,
    V: redis::ToRedisArgs + Send + Sync,
{
    let fence = fence_key(key)?;
    let invocation = scripts::fenced_set(key, &fence, token.get(), value);
    let (written, highest): (i64, i64) = invocation
        .invoke_async(conn)
        .await
        .map_err(|e| Error::redis("writing a fenced value", &fence, e))?;
    match (written, u64::try_from(highest)) {
        (1, _) => Ok(Fenced::Written),
        (0, Ok(newer)) => Ok(Fenced::Refused {
            newer: FencingToken::new(newer),
        }),
        _ => Err(Error::Redis {
            action: "writing a fenced value",
            source: redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "fenced_set.lua answered something it never answers",
            )),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fence_key_shares_the_value_key_slot() -> Result<()> {
        for key in ["stock", "a{t}b", "{x}", "a{t}b{c}", "plain:key"] {
            assert_eq!(
                crate::keys::hash_slot(key.as_bytes()),
                crate::keys::hash_slot(fence_key(key)?.as_bytes()),
                "{key}"
            );
        }
        assert_eq!(fence_key("stock")?, "{stock}:fence");
        assert_eq!(fence_key("a{t}b")?, "a{t}b:fence");
        for bad in ["", "x{}y", "x{}y{z}", "a}b", "a{b"] {
            assert!(
                matches!(fence_key(bad), Err(Error::InvalidName { .. })),
                "{bad}"
            );
        }
        Ok(())
    }
}
