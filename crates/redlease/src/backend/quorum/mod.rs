//! Redlock: one lock over N independent Redis primaries, held when a majority grants it.
//!
//! Every operation goes to all N nodes **concurrently**, each bounded by a per-node timeout
//! (the client's response timeout, at most a tenth of the lease), so one slow or dead node
//! costs at most that bound and latency stays close to one node's.
//!
//! - **Acquire** runs the single-node acquire script on every node. It succeeds when a
//!   majority (`N/2 + 1`) granted it *and* the lease is still valid when that majority's
//!   answers are in: `sent + ttl - drift` is in the future, `drift = ttl/100 + 2 ms`; it
//!   does not wait for the other nodes (a late grant there only adds a node holding our
//!   token, which renewal and release cover). Otherwise, once so many nodes said busy
//!   that no majority can grant, it gives back what it took (the nodes that granted,
//!   and in the background those that did not answer: their outcome is unknown) and
//!   reports the lock busy, so the caller retries with jitter; with fewer than a
//!   majority of nodes answering at all it fails with [`Error::NoQuorum`](crate::Error::NoQuorum).
//! - **Release, extend and renewal** also go to every node; they count as done when a
//!   majority confirms, and as lost when so many nodes report another token (or none)
//!   that no majority can still hold ours. A release returns as soon as a majority
//!   settled it, and goes on in the background on the nodes still to answer.
//! - **Connecting** ([`Client::quorum`](crate::Client::quorum)) returns once a majority
//!   answered `PING`; the other nodes connect as they are used.
//!
//! # Fencing tokens over a quorum
//! Each node keeps its own counter, and every grant there takes `max(counter + 1, the
//! node's time in µs)` (the hybrid clock of `scripts/lib/fence.lua`). The holder's token
//! is the **largest** counter among the granting majority, and before `acquire` returns
//! at least a majority of nodes hold a counter at or above it: granting nodes whose
//! counter is lower get it written back (`raise_fence.lua`: raise, never lower; a lock's
//! holder details there record the token too, so that inspection, which reports what a
//! majority records, shows the token the holder uses), a second round trip that the
//! steady state skips: a quorum client asks its nodes for a fencing
//! clock of 10 ms steps (`scripts::QUORUM_FENCE_STEP`), so the nodes of one attempt, which
//! answer within the same step, grant the same token. The write-back goes only
//! to nodes that granted this attempt and counts only where the lock key still holds our
//! owner token; the lease must still be valid once it is done. Any later majority shares
//! at least one node with ours, whose counter is then at least our token, and grants
//! above it: the later token is strictly larger. Tokens therefore stay strictly monotonic even
//! when two successive majorities overlap in a single node.
//!
//! An election (a lock whose holder is reported to everyone) always takes that second
//! round trip: it writes the term and owner token to a term record on every node that
//! granted, and readers name a leader only once a majority of the nodes holding it name
//! the same term there. Between the majority's grants and the write-back the counters
//! may differ from node to node, and a reader taking a term from them reported terms
//! that were never granted.
//!
//! The model in `crates/redlease-model` (stateright) checks this under clock drift,
//! pauses, node crashes and lost messages. Writing back to every node behind and counting
//! every confirmation is not enough: the model finds runs in which two holders get the
//! same token that way (after a crash of a node that persists everything, or one lost
//! message), which the rule above excludes. It also shows what no token can prevent:
//! a holder paused past its lease still believes it holds the lock (the unfenced
//! overlap), so the protected resource must check tokens.
//!
//! Limits: the argument assumes a node keeps what it acknowledged. A node that restarts
//! **empty** (no persistence, or `appendfsync` other than `always`) forgets both the lock
//! and its counter. Redlock's rule for the lock itself is to keep such a node down for
//! at least the longest TTL before it rejoins (the *delayed restart*). The counter is
//! covered by the clock: the first grant of a node that forgot its counter is its time in
//! µs, above every earlier token as long as its clock is not behind the time at which
//! the latest token was granted (by any node) by more than the time since then, so
//! nodes must keep their clocks synchronised (NTP: milliseconds) and never step them back
//! by more than an outage lasts; and a node that lost its counter must stay down longer
//! than the skew between the nodes' clocks plus one fencing step (the model finds two
//! holders sharing a token when a node restarts within the skew: a token taken from a
//! fast clock, written back to the node that then crashed, is remembered by no node of
//! the next majority).

// The files: `acquire` (one attempt on every node, the fence written back), `give_back` (what
// a failed attempt may hold, returned), `held` (what a holder asks of every node:
// release, extend, renew, proclaim, downgrade), `reads` (what a majority of nodes say of
// a lock: whether it is held, who leads) and `turns` (the order of one token's commands
// to one node).

mod acquire;
mod give_back;
mod held;
mod reads;
mod turns;

pub(crate) use acquire::acquire;
pub(crate) use held::{downgrade, extend, proclaim, release, renew};
pub(crate) use reads::{holds, leader};
