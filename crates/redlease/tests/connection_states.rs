//! `Client::connection_states` against real Redis: an idle client notices a server that
//! stops answering (paused: silent) or goes away (killed), and its return; over a quorum,
//! one node down is `Degraded`, a majority down `Suspended`. A lease held across a
//! suspension is reported by its guard, not by the connection state.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::time::Duration;

use common::{bounded, server};
use futures_util::StreamExt as _;
use redlease::{Client, ConnectionState, ConnectionStates};

/// Reads `states` until it tells `wanted`.
async fn until_state(states: &mut ConnectionStates, wanted: ConnectionState) {
    bounded(&format!("the state {wanted:?}"), async {
        loop {
            match states.next().await {
                Some(state) if state == wanted => return,
                Some(_) => {}
                None => panic!("the stream ended"),
            }
        }
    })
    .await;
}

/// A client of `server` that gives up on a reply after 500 ms, and its states, the first
/// (`Connected`) read.
async fn followed(server: &redlease_local::RedisServer) -> (Client, ConnectionStates) {
    let client = Client::builder(&server.url())
        .response_timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap();
    let mut states = client.connection_states();
    assert_eq!(states.next().await, Some(ConnectionState::Connected));
    (client, states)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_client_notices_a_silent_server_and_its_return() {
    let server = server();
    let (client, mut states) = followed(&server).await;
    let guard = client
        .lock("held-through")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    // Silent: the process stopped, its socket open, nothing answered.
    server.pause().unwrap();
    until_state(&mut states, ConnectionState::Suspended).await;
    assert_eq!(client.connection_state(), ConnectionState::Suspended);
    // Suspended is not lost: the lease is still valid, and its guard says so.
    assert!(guard.is_held());
    server.resume().unwrap();
    until_state(&mut states, ConnectionState::Connected).await;
    assert!(guard.owned().await.unwrap());
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_suspends_the_client_until_it_is_back() {
    let mut server = server();
    let (_client, mut states) = followed(&server).await;
    server.kill();
    until_state(&mut states, ConnectionState::Suspended).await;
    server.restart().unwrap();
    until_state(&mut states, ConnectionState::Connected).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_is_degraded_by_one_node_and_suspended_by_a_majority() {
    let (nodes, client) = common::quorum_of_three().await;
    let mut states = client.connection_states();
    assert_eq!(states.next().await, Some(ConnectionState::Connected));
    nodes.servers()[0].pause().unwrap();
    until_state(&mut states, ConnectionState::Degraded { down: 1, nodes: 3 }).await;
    assert!(client.connection_state().is_usable());
    // Still usable: a majority answers.
    let guard = client.lock("degraded").acquire().await.unwrap();
    guard.release().await.unwrap();
    nodes.servers()[1].pause().unwrap();
    until_state(&mut states, ConnectionState::Suspended).await;
    nodes.servers()[0].resume().unwrap();
    nodes.servers()[1].resume().unwrap();
    until_state(&mut states, ConnectionState::Connected).await;
}
