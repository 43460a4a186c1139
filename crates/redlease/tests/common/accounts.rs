//! Accounts whose balances live on a Redis of their own (the admin connection, behind the
//! library's back), moved by non-atomic read-modify-writes of two balances: money appears
//! or vanishes unless every transfer holds a lock of both accounts.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use redis::{AsyncCommands as _, Commands as _};

pub const ACCOUNTS: u32 = 10;
pub const START: i64 = 100;

fn balance_key(account: u32) -> String {
    format!("test:balance:{account}")
}

/// The lock name of `account`.
pub fn account(account: u32) -> String {
    format!("account:{account}")
}

/// A random transfer: two different accounts, in a random order, and an amount.
pub fn random_transfer() -> (u32, u32, i64) {
    let from = rand::random_range(0..ACCOUNTS);
    let to = (from + rand::random_range(1..ACCOUNTS)) % ACCOUNTS;
    (from, to, rand::random_range(1..=5))
}

/// The accounts, through a blocking connection.
pub struct Ledger(redis::Connection);

impl Ledger {
    pub fn connect(url: &str) -> Self {
        Self(redis::Client::open(url).unwrap().get_connection().unwrap())
    }

    /// Every account at [`START`].
    pub fn open_accounts(&mut self) {
        for account in 0..ACCOUNTS {
            let () = self.0.set(balance_key(account), START).unwrap();
        }
    }

    /// Reads both balances, then writes both: safe only under a lock of both accounts.
    pub fn transfer(&mut self, from: u32, to: u32, amount: i64) {
        let a: i64 = self.0.get(balance_key(from)).unwrap();
        let b: i64 = self.0.get(balance_key(to)).unwrap();
        std::thread::yield_now();
        let () = self.0.set(balance_key(from), a - amount).unwrap();
        let () = self.0.set(balance_key(to), b + amount).unwrap();
    }

    /// Fails the test unless the total is what the accounts opened with.
    pub fn check_total(&mut self) {
        let total: i64 = (0..ACCOUNTS)
            .map(|a| self.0.get::<_, i64>(balance_key(a)).unwrap())
            .sum();
        assert_total(total);
    }
}

/// [`Ledger::transfer`], async.
pub async fn transfer(
    conn: &mut redis::aio::MultiplexedConnection,
    from: u32,
    to: u32,
    amount: i64,
) {
    let a: i64 = conn.get(balance_key(from)).await.unwrap();
    let b: i64 = conn.get(balance_key(to)).await.unwrap();
    tokio::task::yield_now().await;
    let () = conn.set(balance_key(from), a - amount).await.unwrap();
    let () = conn.set(balance_key(to), b + amount).await.unwrap();
}

fn assert_total(total: i64) {
    assert_eq!(
        total,
        START * i64::from(ACCOUNTS),
        "money appeared or vanished: two transfers touched one account at once"
    );
}
