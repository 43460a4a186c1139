//! Dropping a blocking `Client` never panics, wherever its last clone goes: with the state
//! of an app whose runtime shuts down (an axum app keeps one for `spawn_blocking` work),
//! inside an async task, inside `spawn_blocking`.
#![cfg(feature = "blocking")]
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

use std::sync::{Arc, Mutex, Once};

use redlease::blocking::Client;
use redlease_local::RedisServer;

/// Every panic of this test binary, with the name of the thread it happened on: tokio
/// catches one in a task it drops at shutdown, so only a hook sees it.
static PANICS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

fn record_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let thread = std::thread::current().name().unwrap_or("").to_owned();
            if let Ok(mut panics) = PANICS.lock() {
                panics.push((thread, info.to_string()));
            }
            default(info);
        }));
    });
}

/// A runtime whose threads are called `name`, so that their panics are told apart from
/// those of the other tests running beside this one.
fn runtime(name: &str) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(name)
        .enable_all()
        .build()
        .unwrap()
}

/// No panic on the threads of the runtime `name`, nor on this test's thread.
fn assert_no_panics(name: &str) {
    let me = std::thread::current().name().unwrap_or("").to_owned();
    // Copied out: the hook locks the list when the assertion panics.
    let panics: Vec<_> = PANICS
        .lock()
        .unwrap()
        .iter()
        .filter(|(thread, _)| thread == name || *thread == me)
        .cloned()
        .collect();
    assert!(panics.is_empty(), "panicked: {panics:#?}");
}

/// An app's state: the blocking client its `spawn_blocking` work uses.
struct State {
    locks: Client,
}

/// Takes and gives back a lock with the state's client from `spawn_blocking`, as an app's
/// handler would, then leaves the state with a task that never ends (a server's accept
/// loop): the runtime's shutdown drops it.
fn serve(runtime: &tokio::runtime::Runtime, state: State) {
    let state = Arc::new(state);
    let work = Arc::clone(&state);
    let fence = runtime
        .block_on(async move {
            tokio::task::spawn_blocking(move || {
                let guard = work.locks.lock("job").acquire()?;
                let fence = guard.fencing_token();
                guard.release()?;
                Ok::<_, redlease::Error>(fence)
            })
            .await
        })
        .unwrap()
        .unwrap();
    assert!(fence.get() > 0);
    runtime.spawn(async move {
        let _state = state;
        std::future::pending::<()>().await;
    });
}

#[test]
fn a_client_in_an_apps_state_is_dropped_when_its_runtime_shuts_down() {
    record_panics();
    let server = RedisServer::start().unwrap();
    let locks = Client::connect(&server.url()).unwrap();
    let runtime = runtime("app-shutdown");
    serve(&runtime, State { locks });
    drop(runtime);
    assert_no_panics("app-shutdown");
}

#[test]
fn a_client_is_dropped_inside_async_tasks_and_spawn_blocking() {
    record_panics();
    let server = RedisServer::start().unwrap();
    // A client of its own for each place, where its last (only) clone goes.
    let mut clients = std::iter::repeat_with(|| Client::connect(&server.url()).unwrap());
    let mut next = || clients.next().unwrap();
    let (a, b, c, d) = (next(), next(), next(), next());
    let runtime = runtime("drop-in-tasks");
    runtime.block_on(async move {
        tokio::spawn(async move { drop(a) }).await.unwrap();
        // A task with no cooperative budget looks like a thread that may block.
        tokio::spawn(tokio::task::coop::unconstrained(async move { drop(b) }))
            .await
            .unwrap();
        tokio::task::spawn_blocking(move || drop(c)).await.unwrap();
        drop(d);
    });
    drop(runtime);
    assert_no_panics("drop-in-tasks");
}
