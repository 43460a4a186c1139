//! The blocking semaphore and read-write lock: at most N permit holders across OS threads
//! and N reached, readers overlapping, a writer excluding everyone, and the downgrade.
#![cfg(feature = "blocking")]
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::gauge::Gauge;
use redlease::Error;
use redlease::blocking::Client;

#[test]
fn a_semaphore_of_two_admits_two_threads_of_four_at_once() {
    const THREADS: usize = 4;
    const SECTIONS: usize = 5;
    let server = common::server();
    let client = Client::connect(&server.url()).unwrap();
    let gauge = Gauge::default();
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            let (client, gauge) = (client.clone(), &gauge);
            s.spawn(move || {
                let semaphore = client
                    .semaphore("printers", 2)
                    .wait(Duration::from_secs(60));
                for _ in 0..SECTIONS {
                    let permit = semaphore.acquire().unwrap();
                    gauge.enter();
                    // Stay until a second holder came in (once), and a little longer, so
                    // that a third one admitted wrongly would be seen.
                    gauge.reached(2);
                    std::thread::sleep(Duration::from_millis(5));
                    gauge.leave();
                    permit.release().unwrap();
                }
            });
        }
    });
    assert_eq!(gauge.max(), 2, "at most 2 holders, and 2 reached");
    // Through `run` too, with a permit's guard surface.
    let token = client
        .semaphore("printers", 2)
        .run(|permit| {
            assert!(permit.is_held());
            Ok::<_, Error>(permit.fencing_token())
        })
        .unwrap();
    assert!(token.get() > 0);
    // Asked for with another count while in use: a clear error.
    let held = client.semaphore("printers", 2).acquire().unwrap();
    let mismatch = client.semaphore("printers", 3).try_acquire();
    assert!(
        matches!(mismatch, Err(Error::PermitsMismatch { in_use: 2, .. })),
        "{mismatch:?}"
    );
    held.release().unwrap();
}

#[test]
fn readers_overlap_and_a_writer_excludes_everyone() {
    let server = common::server();
    let client = Client::connect(&server.url()).unwrap();
    let config = client.rwlock("config").wait(Duration::from_secs(60));

    // Two readers inside together.
    let readers = Gauge::default();
    std::thread::scope(|s| {
        for _ in 0..2 {
            let (config, readers) = (&config, &readers);
            s.spawn(move || {
                config
                    .read()
                    .run(|guard| {
                        assert!(guard.is_held());
                        readers.enter();
                        readers.reached(2);
                        readers.leave();
                        Ok::<_, Error>(())
                    })
                    .unwrap();
            });
        }
    });
    assert_eq!(readers.max(), 2, "the readers did not overlap");

    // A writer waits for the reader to leave.
    let read = config.read().acquire().unwrap();
    assert!(config.write().try_acquire().unwrap().is_none());
    let released = AtomicBool::new(false);
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let write = config.write().acquire().unwrap();
            let after_the_reader = released.load(Ordering::SeqCst);
            // While it writes, nobody else gets in.
            assert!(config.read().try_acquire().unwrap().is_none());
            assert!(config.write().try_acquire().unwrap().is_none());
            write.release().unwrap();
            after_the_reader
        });
        std::thread::sleep(Duration::from_millis(50));
        released.store(true, Ordering::SeqCst);
        read.release().unwrap();
        assert!(writer.join().unwrap(), "the writer got in beside a reader");
    });

    // Mixed: readers and writers in turns, never a writer beside anyone.
    let (inside_readers, inside_writers) = (Gauge::default(), Gauge::default());
    let overlap = AtomicBool::new(false);
    std::thread::scope(|s| {
        for t in 0..4 {
            let (config, inside_readers, inside_writers, overlap) =
                (&config, &inside_readers, &inside_writers, &overlap);
            s.spawn(move || {
                for round in 0..6 {
                    if (t + round) % 3 == 0 {
                        let write = config.write().acquire().unwrap();
                        if inside_writers.enter() > 1 || inside_readers.inside() > 0 {
                            overlap.store(true, Ordering::SeqCst);
                        }
                        std::thread::sleep(Duration::from_millis(5));
                        inside_writers.leave();
                        write.release().unwrap();
                    } else {
                        let read = config.read().acquire().unwrap();
                        inside_readers.enter();
                        if inside_writers.inside() > 0 {
                            overlap.store(true, Ordering::SeqCst);
                        }
                        std::thread::sleep(Duration::from_millis(5));
                        inside_readers.leave();
                        read.release().unwrap();
                    }
                }
            });
        }
    });
    assert!(!overlap.load(Ordering::SeqCst), "a writer overlapped");
}

#[test]
fn a_write_hold_downgrades_to_a_read_hold() {
    let server = common::server();
    let client = Client::connect(&server.url()).unwrap();
    let config = client.rwlock("config");
    let write = config.write().acquire().unwrap();
    let token = write.fencing_token();
    assert!(config.read().try_acquire().unwrap().is_none());
    let read = write.downgrade().unwrap();
    assert!(read.is_held());
    assert_eq!(read.fencing_token(), token, "the hold keeps its token");
    // Now other readers come in, writers still not.
    let other = config.read().try_acquire().unwrap();
    assert!(
        other.is_some(),
        "another reader was kept out after the downgrade"
    );
    assert!(config.write().try_acquire().unwrap().is_none());
    drop(other);
    read.release().unwrap();
    // Everything given back: a writer gets in at once.
    config
        .write()
        .try_acquire()
        .unwrap()
        .unwrap()
        .release()
        .unwrap();

    // Upgrade refused, not a deadlock, within the owner scope of a `run`.
    let upgrade = config
        .read()
        .run(|_| config.write().run(|_| Ok::<_, Error>(())));
    assert!(matches!(upgrade, Err(Error::Upgrade { .. })), "{upgrade:?}");
}

#[test]
fn blocking_calls_refuse_to_run_inside_an_async_runtime() {
    let server = common::server();
    let client = Client::connect(&server.url()).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let write = client.rwlock("inside").write().acquire().unwrap();
    let (semaphore, downgraded) = runtime.block_on(async {
        (
            client.semaphore("inside-sem", 1).try_acquire().map(|_| ()),
            write.downgrade().map(|_| ()),
        )
    });
    assert!(
        matches!(semaphore, Err(Error::Runtime { .. })),
        "{semaphore:?}"
    );
    assert!(
        matches!(downgraded, Err(Error::Runtime { .. })),
        "{downgraded:?}"
    );
}
