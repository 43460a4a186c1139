//! The blocking API: mutual exclusion across OS threads, run, reentrancy, and a clear
//! error when called from inside an async runtime.
#![cfg(feature = "blocking")]
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use redlease::blocking::Client;
use redlease::{Error, Owner, Renewal, Wait};
use redlease_local::RedisServer;

/// GET and SET over a plain socket, so that the counter is read and written
/// non-atomically from each thread without any async machinery.
struct Raw(BufReader<TcpStream>);

impl Raw {
    fn connect(server: &RedisServer) -> Self {
        let mut raw = Self(BufReader::new(
            TcpStream::connect(("127.0.0.1", server.port())).unwrap(),
        ));
        // Under REDLEASE_TEST_ACL, as the admin.
        if server.admin_url() != server.url() {
            let reply = raw.call(&["AUTH", "admin", redlease_local::TEST_ADMIN_PASSWORD]);
            assert_eq!(reply, "+OK");
        }
        raw
    }

    fn call(&mut self, args: &[&str]) -> String {
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            let _ = write!(req, "${}\r\n{a}\r\n", a.len());
        }
        self.0.get_mut().write_all(req.as_bytes()).unwrap();
        let mut line = String::new();
        self.0.read_line(&mut line).unwrap();
        if line.starts_with('$') && line.trim() != "$-1" {
            let mut value = String::new();
            self.0.read_line(&mut value).unwrap();
            return value.trim_end().to_owned();
        }
        line.trim_end().to_owned()
    }
}

#[test]
fn threads_exclude_each_other_with_an_exact_counter() {
    const THREADS: usize = 8;
    const SECTIONS: usize = 40;
    let server = RedisServer::start().unwrap();
    let client = Client::connect(&server.url()).unwrap();
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            let client = client.clone();
            let server = &server;
            s.spawn(move || {
                let mut raw = Raw::connect(server);
                let lock = client.lock("threads").wait(Duration::from_secs(60));
                let mut last = 0;
                for _ in 0..SECTIONS {
                    let guard = lock.acquire().unwrap();
                    assert!(guard.fencing_token().get() > last);
                    last = guard.fencing_token().get();
                    let n: usize = raw.call(&["GET", "counter"]).parse().unwrap_or(0);
                    std::thread::yield_now();
                    raw.call(&["SET", "counter", &(n + 1).to_string()]);
                    guard.release().unwrap();
                }
            });
        }
    });
    let total: usize = Raw::connect(&server)
        .call(&["GET", "counter"])
        .parse()
        .unwrap();
    assert_eq!(total, THREADS * SECTIONS);
}

#[test]
fn run_renews_re_enters_and_passes_errors_through() {
    let server = RedisServer::start().unwrap();
    let client = Client::connect(&server.url()).unwrap();
    let lock = client.lock("blocking-run").ttl(Duration::from_millis(150));
    let (outer, inner) = lock
        .run(|guard| {
            // Longer than the TTL: renewal keeps it.
            std::thread::sleep(Duration::from_millis(400));
            assert!(guard.is_held());
            let inner = lock.run(|g| Ok::<_, Error>(g.fencing_token()))?;
            Ok::<_, Error>((guard.fencing_token(), inner))
        })
        .unwrap();
    assert_eq!(outer, inner);
    let failed: Result<(), WorkError> = client
        .lock("blocking-run")
        .run(|_| Err(WorkError("work failed")));
    assert_eq!(failed.unwrap_err().0, "work failed");
    // An explicit owner across plain threads.
    let owner = Owner::new();
    let held = client.lock("owned").owner(&owner).acquire().unwrap();
    let nested = std::thread::scope(|s| {
        s.spawn(|| {
            client
                .lock("owned")
                .owner(&owner)
                .try_acquire()
                .unwrap()
                .is_some()
        })
        .join()
        .unwrap()
    });
    assert!(nested);
    assert!(client.lock("owned").try_acquire().unwrap().is_none());
    held.release().unwrap();
}

/// As the async `run`: a nested blocking `run` refuses to re-enter an outer fixed lease.
#[test]
fn nested_run_refuses_to_re_enter_a_fixed_lease() {
    let server = RedisServer::start().unwrap();
    let client = Client::connect(&server.url()).unwrap();
    let owner = Owner::new();
    let outer = client
        .lock("blocking-fixed")
        .owner(&owner)
        .renewal(Renewal::Fixed)
        .ttl(Duration::from_secs(20))
        .acquire()
        .unwrap();
    let mut ran = false;
    let nested = owner.clone().sync_scope(|| {
        client.lock("blocking-fixed").wait(Wait::No).run(|_| {
            ran = true;
            Ok::<_, Error>(())
        })
    });
    assert!(
        matches!(&nested, Err(Error::FixedLeaseReentered { name, .. }) if name == "blocking-fixed"),
        "{nested:?}"
    );
    assert!(!ran);
    assert!(outer.is_held());
    assert!(
        client
            .lock("blocking-fixed")
            .try_acquire()
            .unwrap()
            .is_none()
    );
    outer.release().unwrap();
}

/// A blocking `run` acts for the owner given with `Lock::owner`, as the async one does
/// (it used to open a scope of a new owner instead, and waited behind its own lock).
#[test]
fn run_acts_for_the_lock_s_own_owner() {
    let server = RedisServer::start().unwrap();
    let client = Client::connect(&server.url()).unwrap();
    let owner = Owner::new();
    let outer = client
        .lock("blocking-owned")
        .owner(&owner)
        .acquire()
        .unwrap();
    let token = client
        .lock("blocking-owned")
        .owner(&owner)
        .wait(Wait::No)
        .run(|g| Ok::<_, Error>(g.fencing_token()))
        .unwrap();
    assert_eq!(token, outer.fencing_token());
    outer.release().unwrap();
}

#[derive(Debug)]
struct WorkError(&'static str);

impl From<Error> for WorkError {
    fn from(_: Error) -> Self {
        Self("lock error")
    }
}

#[test]
fn inside_an_async_runtime_it_refuses_instead_of_panicking() {
    let server = RedisServer::start().unwrap();
    let client = Client::connect(&server.url()).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let err = runtime.block_on(async { client.lock("in-async").acquire().unwrap_err() });
    assert!(matches!(err, Error::Runtime { .. }), "{err:?}");
    assert!(err.to_string().contains("async API"));
}

#[test]
fn a_blocking_guard_reports_its_health() {
    let server = RedisServer::start().unwrap();
    let client = Client::connect(&server.url()).unwrap();
    let guard = client
        .lock("blocking-health")
        .ttl(Duration::from_secs(1))
        .acquire()
        .unwrap();
    assert!(
        matches!(guard.health(), redlease::LeaseHealth::Renewed { .. }),
        "{:?}",
        guard.health()
    );
    // The key is deleted behind the holder's back: the next renewal (within ttl/3) finds
    // it gone. A synchronous holder has no event to wait on; it checks between steps.
    assert_eq!(
        Raw::connect(&server).call(&["DEL", "redlease:blocking-health"]),
        ":1"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while guard.health() != redlease::LeaseHealth::Lost {
        assert!(std::time::Instant::now() < deadline, "{:?}", guard.health());
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(matches!(guard.release(), Err(Error::Lost { .. })));
}

#[test]
fn a_synchronous_caller_inspects_and_forces_a_release() {
    let server = RedisServer::start().unwrap();
    let holder = Client::connect(&server.url()).unwrap();
    let operator = Client::connect(&server.admin_url()).unwrap();
    let guard = holder.lock("blocking-inspect").acquire().unwrap();
    let seen = operator.inspect("blocking-inspect").unwrap();
    assert_eq!(
        seen.snapshot.holders[0].fencing_token,
        Some(guard.fencing_token())
    );
    let keys = redlease::LockKeys::new(redlease::DEFAULT_PREFIX, "blocking-inspect").unwrap();
    let removed = operator.force_release_keys(&keys).unwrap();
    assert!(removed.is_held(), "it reports what it removed");
    assert!(!operator.inspect_keys(&keys).unwrap().is_held());
    assert!(matches!(guard.release(), Err(Error::Lost { .. })));
}

#[test]
fn a_blocking_semaphore_takes_several_permits_as_one() {
    let server = RedisServer::start().unwrap();
    let client = Client::connect(&server.url()).unwrap();
    let semaphore = client.semaphore("blocking-many", 3).wait(Wait::No);
    let two = semaphore.acquire_many(2).unwrap();
    assert!(
        semaphore.try_acquire_many(2).unwrap().is_none(),
        "1 of 3 free"
    );
    let one = semaphore.try_acquire().unwrap().unwrap();
    assert!(matches!(semaphore.acquire(), Err(Error::Timeout { .. })));
    assert!(matches!(
        semaphore.try_acquire_many(4),
        Err(Error::PermitsAsked { asked: 4, .. })
    ));
    two.release().unwrap();
    let again = semaphore.try_acquire_many(2).unwrap();
    assert!(again.is_some(), "the permit of 2 gave both back");
    one.release().unwrap();
}

#[test]
fn a_blocking_latch_opens_only_when_every_count_is_counted_down() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let server = RedisServer::start().unwrap();
    let client = Client::connect(&server.url()).unwrap();
    let latch = client.latch("blocking-latch").wait(Duration::from_secs(30));
    let mut counts: Vec<_> = (0..2).map(|_| latch.count_up().unwrap()).collect();
    assert_eq!(latch.count().unwrap(), 2);
    assert!(
        matches!(
            latch.clone().wait(Wait::No).wait_open(),
            Err(Error::Timeout { .. })
        ),
        "two counts outstanding: still closed"
    );
    let last_down = Arc::new(AtomicBool::new(false));
    let waiter = std::thread::spawn({
        let latch = latch.clone();
        let last_down = Arc::clone(&last_down);
        move || {
            let opened = latch.wait_open();
            (opened, last_down.load(Ordering::SeqCst))
        }
    });
    let last = counts.pop().unwrap();
    for count in counts {
        assert!(count.is_held());
        count.count_down().unwrap();
    }
    assert_eq!(latch.count().unwrap(), 1);
    last_down.store(true, Ordering::SeqCst);
    last.count_down().unwrap();
    let (opened, after_last) = waiter.join().unwrap();
    let opened = opened.unwrap();
    assert!(after_last, "the latch opened with a count outstanding");
    assert!(!opened.is_broken(), "{opened:?}");
    assert_eq!(latch.count().unwrap(), 0);
}
