//! All of one lock's keys and its channel hash to one cluster slot, as a real
//! cluster-enabled server computes it.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::unchecked_time_subtraction,
    reason = "tests fail loudly"
)]

mod common;

use redlease::LockKeys;
use redlease_local::{RedisServer, ServerOptions};

#[tokio::test]
async fn every_key_of_a_lock_shares_its_cluster_slot() {
    let server = RedisServer::start_with(ServerOptions::default().cluster_enabled()).unwrap();
    let mut conn = common::raw(&server).await;
    let names = [
        "plain",
        "coupon:42",
        "{user:7}:cart",
        "a{b}c",
        "{}x",
        "x{}",
        "{",
        "}{",
        "{{a}}",
        "emoji:🔒",
        "spaces in name",
    ];
    for prefix in ["redlease:", "", "{app}:"] {
        for name in names {
            let keys = match LockKeys::new(prefix, name) {
                Ok(keys) => keys,
                Err(e) => {
                    // Refused names must be exactly those that cannot be tagged.
                    assert!(
                        format!("{prefix}{name}").contains('}'),
                        "{prefix}{name}: {e}"
                    );
                    continue;
                }
            };
            let mut slots = Vec::new();
            for key in [
                keys.key(),
                keys.fence(),
                keys.term(),
                keys.holder(),
                keys.queue(),
                keys.waiters(),
                keys.channel(),
            ] {
                let slot: i64 = redis::cmd("CLUSTER")
                    .arg("KEYSLOT")
                    .arg(key)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                assert_eq!(i64::from(keys.hash_slot()), slot, "{key}");
                slots.push(slot);
            }
            slots.dedup();
            assert_eq!(
                slots.len(),
                1,
                "{prefix}{name}: {keys:?} spans slots {slots:?}"
            );
        }
    }
}
