//! One tracing span per hold (`redlease.hold`: lock name, kind, fencing token, owner-token
//! prefix only) with the hold's events inside it, captured by a test subscriber layer,
//! against a real redis-server: acquired and released; renewal failing, recovered and lost.
#![allow(clippy::unwrap_used, clippy::panic, reason = "a test")]

mod common;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use redis::AsyncCommands as _;
use redlease::{Client, LeaseHealth};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Event, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::registry::LookupSpan;

use common::{bounded, raw, server};

/// A span's or an event's fields, as text.
#[derive(Debug, Default, Clone)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

/// A `redlease.hold` span and the events recorded inside it.
#[derive(Debug, Clone)]
struct Hold {
    fields: Fields,
    events: Vec<Fields>,
}

/// Every hold span seen in this process, in creation order.
static HOLDS: Mutex<Vec<Hold>> = Mutex::new(Vec::new());

/// The index of a hold span in `HOLDS`, kept in the span's extensions.
struct HoldIndex(usize);

struct Capture;

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attrs.metadata().name() != "redlease.hold" {
            return;
        }
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        let mut holds = HOLDS.lock().unwrap_or_else(PoisonError::into_inner);
        holds.push(Hold {
            fields,
            events: Vec::new(),
        });
        let index = holds.len() - 1;
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(HoldIndex(index));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.event_span(event) else {
            return;
        };
        let Some(index) = span.extensions().get::<HoldIndex>().map(|i| i.0) else {
            return;
        };
        let mut fields = Fields::default();
        event.record(&mut fields);
        fields
            .0
            .insert("level".into(), event.metadata().level().to_string());
        let mut holds = HOLDS.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(hold) = holds.get_mut(index) {
            hold.events.push(fields);
        }
    }
}

fn capture() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let subscriber = tracing_subscriber::registry().with(
            Capture.with_filter(
                tracing_subscriber::filter::Targets::new()
                    .with_target("redlease", tracing::Level::TRACE),
            ),
        );
        tracing::subscriber::set_global_default(subscriber).unwrap();
    });
}

/// The hold spans of lock `name`.
fn holds_of(name: &str) -> Vec<Hold> {
    HOLDS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .filter(|h| h.fields.0.get("lock").map(String::as_str) == Some(name))
        .cloned()
        .collect()
}

fn messages(hold: &Hold) -> Vec<String> {
    hold.events
        .iter()
        .filter_map(|e| e.0.get("message").cloned())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hold_is_one_span_with_its_events_and_no_secret() {
    capture();
    let server = server();
    let client = common::client(&server).await;
    let guard = client.lock("span-lock").acquire().await.unwrap();
    let fence = guard.fencing_token().get();
    guard.release().await.unwrap();
    let permit = client.semaphore("span-sem", 2).acquire().await.unwrap();
    permit.release().await.unwrap();

    let holds = holds_of("span-lock");
    assert_eq!(holds.len(), 1, "one span per hold: {holds:?}");
    let hold = &holds[0];
    assert_eq!(hold.fields.0["kind"], "lock");
    assert_eq!(hold.fields.0["fence"], fence.to_string());
    // The owner token appears as its prefix only: 8 hex digits and an ellipsis, never the
    // 32 digits of the secret.
    let token = &hold.fields.0["token"];
    assert!(
        token.ends_with('…') && token.chars().count() <= 9,
        "{token}"
    );
    assert_eq!(messages(hold), ["acquired", "released"], "{hold:?}");

    let sem = holds_of("span-sem");
    assert_eq!(sem.len(), 1);
    assert_eq!(sem[0].fields.0["kind"], "semaphore");
    assert_eq!(messages(&sem[0]), ["acquired", "released"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn renewal_trouble_and_the_loss_are_events_of_the_hold() {
    capture();
    let server = server();
    let client = Client::builder(&server.url())
        .response_timeout(Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    let guard = client
        .lock("span-trouble")
        .ttl(Duration::from_secs(3))
        .acquire()
        .await
        .unwrap();
    let mut health = guard.health();
    server.pause().unwrap();
    bounded(
        "a failing renewal",
        health.wait_for(|h| matches!(h, LeaseHealth::Retrying { .. })),
    )
    .await
    .unwrap();
    server.resume().unwrap();
    bounded(
        "the recovery",
        health.wait_for(|h| matches!(h, LeaseHealth::Renewed { .. })),
    )
    .await
    .unwrap();
    let mut conn = raw(&server).await;
    let _: () = conn.del("redlease:span-trouble").await.unwrap();
    bounded("the loss", guard.lost()).await;
    drop(guard);

    let holds = holds_of("span-trouble");
    assert_eq!(holds.len(), 1, "{holds:?}");
    let events = messages(&holds[0]);
    let at = |m: &str| {
        events
            .iter()
            .position(|e| e.starts_with(m))
            .unwrap_or_else(|| panic!("no {m:?} event in {events:?}"))
    };
    assert!(at("acquired") < at("renewal failing"), "{events:?}");
    assert!(
        at("renewal failing") < at("renewal recovered"),
        "{events:?}"
    );
    assert!(at("renewal recovered") < at("lock lost"), "{events:?}");
    let failing = &holds[0].events[at("renewal failing")];
    assert_eq!(failing.0["level"], "WARN");
    assert!(failing.0.contains_key("left"), "{failing:?}");
}
