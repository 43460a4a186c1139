//! Only the owner's token can release or extend; loss is always reported; interop with a
//! plain `SET NX PX` lock on the same key.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::unchecked_time_subtraction,
    reason = "tests fail loudly"
)]

mod common;

use std::time::Duration;

use common::{client, get, raw, server};
use redis::AsyncCommands as _;
use redlease::{Error, Wait};

#[tokio::test]
async fn a_non_owner_can_neither_release_nor_extend() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    let mut first = c
        .lock("owned")
        .ttl(Duration::from_millis(100))
        .renewal(redlease::Renewal::Fixed)
        .acquire()
        .await
        .unwrap();
    let key = c.lock("owned").keys().unwrap().key().to_owned();
    // Let the first lease run out, and a second owner take the lock.
    let second = c
        .lock("owned")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    let owner_value = get(&mut conn, &key).await;
    assert!(matches!(
        first.extend(Duration::from_secs(5)).await,
        Err(Error::Lost { .. })
    ));
    assert!(matches!(first.release().await, Err(Error::Lost { .. })));
    assert_eq!(
        get(&mut conn, &key).await,
        owner_value,
        "the stale owner touched the lock"
    );
    let pttl: i64 = conn.pttl(&key).await.unwrap();
    assert!(
        pttl > 10_000,
        "the stale owner's extend changed the expiry ({pttl} ms left)"
    );
    second.release().await.unwrap();
    assert_eq!(get(&mut conn, &key).await, None);
}

#[tokio::test]
async fn release_after_expiry_is_lost() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    let guard = c
        .lock("expiring")
        .ttl(Duration::from_millis(20))
        .renewal(redlease::Renewal::Fixed)
        .acquire()
        .await
        .unwrap();
    let key = c.lock("expiring").keys().unwrap().key().to_owned();
    common::until_absent(&conn, &key).await;
    assert_eq!(guard.remaining(), Duration::ZERO);
    let err = guard.release().await.unwrap_err();
    assert!(
        matches!(err, Error::Lost { ref name, .. } if name == "expiring"),
        "{err:?}"
    );
    assert!(err.to_string().contains("lost"));
    let _: () = conn.set("unrelated", 1).await.unwrap();
}

#[tokio::test]
async fn extend_resets_the_lease_and_validity() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    let mut guard = c
        .lock("extended")
        .ttl(Duration::from_secs(1))
        .acquire()
        .await
        .unwrap();
    let before = guard.valid_until();
    assert!(
        guard.remaining()
            <= Duration::from_secs(1) - redlease::diagnostics::drift(Duration::from_secs(1))
    );
    guard.extend(Duration::from_secs(60)).await.unwrap();
    assert!(guard.valid_until() > before);
    assert!(
        guard.remaining()
            <= Duration::from_secs(60) - redlease::diagnostics::drift(Duration::from_secs(60))
    );
    let key = c.lock("extended").keys().unwrap();
    let pttl: i64 = conn.pttl(key.key()).await.unwrap();
    assert!(pttl > 50_000, "{pttl}");
    let holder_pttl: i64 = conn.pttl(key.holder()).await.unwrap();
    assert!(
        holder_pttl > 50_000,
        "holder details keep the lock's expiry: {holder_pttl}"
    );
    // A shorter extension shortens the validity too, as it did the expiry in Redis.
    guard.extend(Duration::from_secs(2)).await.unwrap();
    assert!(guard.remaining() <= Duration::from_secs(2));
    assert!(matches!(
        guard.extend(Duration::ZERO).await,
        Err(Error::InvalidOption { option: "ttl", .. })
    ));
    guard.release().await.unwrap();
}

#[tokio::test]
async fn try_acquire_reports_busy_without_waiting() {
    let server = server();
    let c = client(&server).await;
    let guard = c.lock("busy").try_acquire().await.unwrap().unwrap();
    assert!(c.lock("busy").try_acquire().await.unwrap().is_none());
    let err = c.lock("busy").wait(Wait::No).acquire().await.unwrap_err();
    match err {
        Error::Timeout {
            name, holder_ttl, ..
        } => {
            assert_eq!(name, "busy");
            assert!(holder_ttl.is_some_and(|t| t > Duration::from_secs(20)));
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    guard.release().await.unwrap();
    let again = c.lock("busy").try_acquire().await.unwrap().unwrap();
    again.release().await.unwrap();
}

#[tokio::test]
async fn a_dropped_guard_is_released_in_the_background() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    let key = c.lock("dropped").keys().unwrap().key().to_owned();
    drop(c.lock("dropped").acquire().await.unwrap());
    common::until_absent(&conn, &key).await;
    assert!(get(&mut conn, &key).await.is_none());
}

#[tokio::test]
async fn a_plain_set_nx_lock_and_ours_exclude_each_other() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    // Another tool's lock on the same key: redis-cli SET K v NX PX. (The key is under
    // `redlease:`, which the least-privilege ACL user of REDLEASE_TEST_ACL may use.)
    let taken = std::process::Command::new("redis-cli")
        .args([
            "-u",
            &server.admin_url(),
            "--no-auth-warning",
            "SET",
            "redlease:shared",
            "cli-token",
            "NX",
            "PX",
            "30000",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&taken.stdout).trim(), "OK");
    let ours = c.lock("redlease:shared").prefix("");
    assert!(
        ours.try_acquire().await.unwrap().is_none(),
        "ours ignored a foreign SET NX lock"
    );
    let _: i64 = conn.del("redlease:shared").await.unwrap();
    let guard = ours.try_acquire().await.unwrap().unwrap();
    let theirs: Option<String> = redis::cmd("SET")
        .arg("redlease:shared")
        .arg("other-library-token")
        .arg("NX")
        .arg("PX")
        .arg(30_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(theirs, None, "a foreign SET NX took a lock we hold");
    // The value at the key is the owner token alone, so foreign tools see a normal lock.
    let value = get(&mut conn, "redlease:shared").await.unwrap();
    assert_eq!(value.len(), 32);
    assert!(value.bytes().all(|b| b.is_ascii_hexdigit()));
    guard.release().await.unwrap();
}

#[tokio::test]
async fn holder_details_carry_the_clients_note_and_are_gone_after_release() {
    let server = server();
    let c = redlease::Client::builder(&server.url())
        .holder_note("cmd=report.sh")
        .connect()
        .await
        .unwrap();
    let mut conn = raw(&server).await;
    let guard = c.lock("noted").acquire().await.unwrap();
    let keys = c.lock("noted").keys().unwrap();
    let recorded = get(&mut conn, keys.holder()).await.unwrap();
    // "<fencing token> <details>": the holder's token lives as long as its lease.
    let (fence, details) = recorded.split_once(' ').unwrap();
    assert_eq!(fence, guard.fencing_token().get().to_string());
    assert!(details.starts_with("host="), "{details}");
    assert!(
        details.ends_with(&format!("pid={} cmd=report.sh", std::process::id())),
        "{details}"
    );
    guard.release().await.unwrap();
    assert_eq!(get(&mut conn, keys.holder()).await, None);
}
