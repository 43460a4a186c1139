//! The one-call forms: `Lock::try_run` ("skip if busy"), `Error::is_busy`, and
//! `Election::run`, which leads while its work runs and cancels the work when leadership
//! is lost.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{bounded, client, raw, server};
use redlease::{Error, Wait};

#[tokio::test]
async fn try_run_skips_a_busy_lock_without_waiting_and_runs_a_free_one() {
    let server = server();
    let (a, b) = (client(&server).await, client(&server).await);
    let held = a.lock("sweep").acquire().await.unwrap();
    let ran = AtomicBool::new(false);
    // A long wait on the lock is ignored: try_run never waits.
    let lock = b.lock("sweep").wait(Duration::from_secs(60));
    let skipped = bounded(
        "a busy try_run",
        lock.try_run(async |_| {
            ran.store(true, Ordering::SeqCst);
            Ok::<_, Error>(1)
        }),
    )
    .await
    .unwrap();
    assert_eq!(skipped, None);
    assert!(!ran.load(Ordering::SeqCst), "the work ran on a busy lock");
    let busy = b.lock("sweep").wait(Wait::No).acquire().await.unwrap_err();
    assert!(busy.is_busy(), "{busy:?}");
    held.release().await.unwrap();
    let done = lock
        .try_run(async |guard| Ok::<_, Error>(guard.fencing_token().get()))
        .await
        .unwrap();
    assert!(done.is_some_and(|fence| fence > 0), "{done:?}");
}

#[tokio::test]
async fn election_run_leads_while_its_work_runs_then_resigns() {
    let server = server();
    let c = client(&server).await;
    let election = c.election("sched");
    let term = election
        .run("host-a", async |leadership| {
            assert!(leadership.is_leading());
            assert_eq!(leadership.note(), "host-a");
            let now = election.leader().await?.unwrap();
            assert_eq!(now.term, leadership.term());
            Ok::<_, Error>(leadership.term())
        })
        .await
        .unwrap();
    assert!(term.get() > 0);
    assert!(
        election.leader().await.unwrap().is_none(),
        "still leading after run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_run_cancels_its_work_when_leadership_is_lost() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    let election = c.election("deposed").ttl(Duration::from_secs(1));
    let key = election.keys().unwrap().key().to_owned();
    let outcome = bounded(
        "a run whose leadership is taken",
        election.run("host-b", async |_| {
            // Someone deletes the lease; the work itself would never end.
            let () = redis::cmd("DEL")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap();
            std::future::pending::<()>().await;
            Ok::<_, Error>(())
        }),
    )
    .await;
    assert!(matches!(outcome, Err(Error::Lost { .. })), "{outcome:?}");
}
