//! Network partitions of one worker: a quorum whose every worker reaches each node
//! through proxies of its own, so that one worker alone can be cut off from some nodes
//! while the others still see every node.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use redlease_chaos::Kind;
use redlease_local::{Nodes, Proxy, RedisServer, ServerOptions};

use crate::runner::Runner;
use crate::scenario::{Fault, Promise, Scenario, row};
use crate::worker::Deployment;

/// The partition rows of the matrix.
pub(crate) fn rows() -> [Scenario; 2] {
    let mut majority = row(
        "quorum 5: holder cut off from 3 nodes > TTL, healed",
        Fault::PartitionHolderMajority,
        Deployment::Quorum,
        Promise::Exclusive,
        "holder cannot renew, reports the loss; others take over after expiry",
    );
    majority.proxied = true;
    let mut minority = row(
        "quorum 5: holder cut off from 2 nodes > TTL, healed",
        Fault::PartitionHolderMinority,
        Deployment::Quorum,
        Promise::Exclusive,
        "holder keeps a majority: renews and keeps its lease (losses in the note)",
    );
    minority.proxied = true;
    [majority, minority]
}

/// Quorum nodes, and for each worker its own proxy to every node (in node order).
pub(crate) struct Partitioned {
    nodes: Nodes,
    links: HashMap<u32, Vec<Proxy>>,
    tally: Tally,
    /// What the rounds of a cut-waiter row measured.
    cut_waiters: Vec<crate::handoff::CutWaiter>,
    /// What the rounds of a row of issue 42's faults measured (see `crate::heads`), and
    /// from which event.
    heads: Vec<crate::heads::Measured>,
    heads_from: &'static str,
    /// Rounds of such a row tried (some find no holder or waiters in time).
    heads_tried: usize,
}

/// What the rounds of a partition row saw of their holder, for the row's note.
#[derive(Debug, Default)]
struct Tally {
    /// Nodes the holder was cut off from.
    cut: usize,
    /// Rounds in which a holder was cut off.
    rounds: usize,
    /// Rounds in which the cut-off holder reported its lease lost.
    lost: usize,
    /// From each cut to the holder's loss report.
    detect: Vec<Duration>,
    /// From each heal to the holder's next acquisition (`None`: none within the bound).
    back: Vec<Option<Duration>>,
}

impl Partitioned {
    /// Starts `n` quorum nodes (workers get their proxies from [`spawn`](Self::spawn)).
    pub(crate) fn start(n: usize) -> anyhow::Result<Self> {
        Self::start_with(n, &ServerOptions::default())
    }

    /// [`start`](Self::start) with `options` for every node (one node: a single Redis
    /// whose every worker has a link of its own to cut).
    pub(crate) fn start_with(n: usize, options: &ServerOptions) -> anyhow::Result<Self> {
        Ok(Self {
            nodes: Nodes::start_with(n, options)?,
            links: HashMap::new(),
            tally: Tally::default(),
            cut_waiters: Vec::new(),
            heads: Vec::new(),
            heads_from: "",
            heads_tried: 0,
        })
    }

    /// The nodes' own URLs (without proxies).
    pub(crate) fn urls(&self) -> Vec<String> {
        self.nodes.urls()
    }

    /// The first node (the single Redis of the rows with a link per worker).
    fn first(&self) -> Option<&RedisServer> {
        self.nodes.servers().first()
    }

    /// One round of [`crate::handoff::cut_waiter`] on the first node, each worker cut
    /// through its own link to it; its measures go into the note
    /// ([`describe`](Self::describe)). Returns how many faults it injected.
    /// With `exit` (issue 42), the holders kept inside end their processes right after
    /// their releases: the stall is measured as the cut-waiter row's, and the row's note
    /// and verdict judge it against [`crate::heads::bound`]; each exited worker is
    /// replaced.
    pub(crate) async fn cut_waiter(
        &mut self,
        runner: &mut Runner,
        ttl: Duration,
        exit: bool,
    ) -> anyhow::Result<usize> {
        let workers = runner.len();
        self.heads_tried += usize::from(exit);
        let Some(server) = self.first() else {
            return Ok(0);
        };
        let links = &self.links;
        let round = crate::handoff::cut_waiter(
            runner,
            server,
            |worker| links.get(&worker).and_then(|l| l.first()),
            ttl,
            exit,
        )
        .await?;
        if exit {
            if let Some(round) = &round {
                runner.reap(round.holder, ttl * 5).await;
                self.links.remove(&round.holder);
            }
            runner.reap_exited();
            self.replace(runner, workers)?;
        }
        let Some(round) = round else {
            return Ok(0);
        };
        if exit {
            self.heads_from =
                "the release to the cut waiter (the releaser's process ended right after it)";
            self.heads.push(crate::heads::Measured {
                stall: round.stall,
                remark: None,
            });
        }
        self.cut_waiters.push(round);
        Ok(1)
    }

    /// One round of [`crate::heads::quit_behind_crashed_holder`] or
    /// [`crate::heads::kill_queued_head`] (`kill`) on the first node; a killed worker is
    /// replaced. Returns how many faults it injected.
    pub(crate) async fn head_round(
        &mut self,
        runner: &mut Runner,
        ttl: Duration,
        kill: bool,
    ) -> anyhow::Result<usize> {
        let workers = runner.len();
        self.heads_tried += 1;
        self.heads_from = if kill {
            "the kill of the queued head"
        } else {
            "the crashed holder's lease's end in Redis"
        };
        let Some(server) = self.first() else {
            return Ok(0);
        };
        let round = if kill {
            crate::heads::kill_queued_head(runner, server, ttl).await?
        } else {
            let links = &self.links;
            crate::heads::quit_behind_crashed_holder(
                runner,
                server,
                |worker| links.get(&worker).and_then(|l| l.first()),
                ttl,
            )
            .await?
        };
        self.replace(runner, workers)?;
        let Some(round) = round else {
            return Ok(0);
        };
        self.heads.push(round);
        Ok(1)
    }

    /// Starts workers until `runner` has `workers` again.
    fn replace(&mut self, runner: &mut Runner, workers: usize) -> anyhow::Result<()> {
        while runner.len() < workers {
            self.spawn(runner)?;
        }
        Ok(())
    }

    /// How many rounds of a row of issue 42's faults were late (see `crate::heads::late`).
    pub(crate) fn late(&self, ttl: Duration) -> usize {
        crate::heads::late(&self.heads, ttl)
    }

    /// Starts a worker that reaches every node through a proxy of its own.
    pub(crate) fn spawn(&mut self, runner: &mut Runner) -> anyhow::Result<u32> {
        let proxies = self
            .nodes
            .servers()
            .iter()
            .map(|node| Proxy::start(node.port()))
            .collect::<std::io::Result<Vec<_>>>()?;
        let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
        let id = runner.spawn_with(&urls)?;
        self.links.insert(id, proxies);
        Ok(id)
    }

    /// One round: lets a worker acquire and hold, cuts it off from `cut` of the nodes for
    /// `heal_after`, heals, and waits until it has reported its loss (when it lost its
    /// majority) or left its section (when it kept one), then (bounded) until it acquired
    /// again. Returns how many faults it injected (0 when no worker got to hold in time).
    pub(crate) async fn cut_holder(
        &mut self,
        runner: &Runner,
        cut: usize,
        round: usize,
        ttl: Duration,
        heal_after: Duration,
    ) -> anyhow::Result<usize> {
        let section_wait = ttl * 5 + Duration::from_secs(5);
        // Longer than the cut: a holder that keeps a majority renews across it and the
        // heal; one that does not must learn of its loss before this runs out.
        runner.hold_next_section(ttl * 2);
        let Some(victim) = runner.held_by(section_wait).await else {
            return Ok(0);
        };
        let Some(links) = self.links.get(&victim) else {
            return Ok(0);
        };
        let picks: Vec<&Proxy> = (0..cut)
            .map(|i| &links[(round * cut + i) % links.len()])
            .collect();
        runner.record(Kind::Fault, victim);
        let cut_at = runner.with_judge(redlease_chaos::Judge::now);
        tokio::task::block_in_place(|| picks.iter().for_each(|p| p.cut()));
        tokio::time::sleep(heal_after).await;
        for p in &picks {
            p.heal();
        }
        let healed_at = runner.with_judge(redlease_chaos::Judge::now);
        // Until the holder reported its loss (cut off from a majority) or left its section
        // (it kept one), bounded.
        let awaited = if cut > links.len() / 2 {
            Kind::Lost
        } else {
            Kind::End
        };
        let after_cut = |j: &redlease_chaos::Judge| {
            j.history()
                .iter()
                .rev()
                .take_while(|e| e.at >= cut_at)
                .any(|e| e.worker == victim && e.kind == awaited)
        };
        runner.wait_for(section_wait, after_cut).await;
        let lost_at = runner.with_judge(|j| {
            j.history()
                .iter()
                .find(|e| e.at >= cut_at && e.worker == victim && e.kind == Kind::Lost)
                .map(|e| e.at)
        });
        let again = |j: &redlease_chaos::Judge| {
            j.history()
                .iter()
                .rev()
                .take_while(|e| e.at >= healed_at)
                .find(|e| e.worker == victim && e.kind == Kind::Acquire)
                .map(|e| e.at.saturating_sub(healed_at))
        };
        runner.wait_for(section_wait, |j| again(j).is_some()).await;
        let back = runner.with_judge(|j| again(j));
        let tally = &mut self.tally;
        tally.back.push(back);
        tally.cut = cut;
        tally.rounds += 1;
        if let Some(at) = lost_at {
            tally.lost += 1;
            tally.detect.push(at.saturating_sub(cut_at));
        }
        Ok(1)
    }

    /// One sentence for the row's note: how often, and how soon, the cut-off holder
    /// reported its loss; or, in a cut-waiter row, what its rounds measured (`ttl`: the
    /// row's lease).
    pub(crate) fn describe(&self, ttl: Duration, note: &mut String) {
        crate::heads::describe(&self.heads, self.heads_from, ttl, note);
        if self.heads_tried > self.heads.len() {
            let _ = write!(
                note,
                "{} of {} rounds found no holder with the waiters they need in time and injected nothing. ",
                self.heads_tried - self.heads.len(),
                self.heads_tried
            );
        }
        if self.heads.is_empty() {
            crate::handoff::describe_cut_waiters(&self.cut_waiters, ttl, note);
        }
        let Tally {
            cut, rounds, lost, ..
        } = self.tally;
        if rounds == 0 {
            return;
        }
        let mut detect = self.tally.detect.clone();
        detect.sort();
        let _ = write!(
            note,
            "the holder cut off from {cut} of {} nodes reported its lease lost in {lost} of \
             {rounds} rounds",
            self.nodes.len()
        );
        if let (Some(min), Some(max)) = (detect.first(), detect.last()) {
            let _ = write!(
                note,
                " ({:.0}-{:.0} ms after the cut)",
                min.as_secs_f64() * 1000.0,
                max.as_secs_f64() * 1000.0
            );
        }
        let mut back: Vec<Duration> = self.tally.back.iter().flatten().copied().collect();
        back.sort();
        if let (Some(min), Some(max)) = (back.first(), back.last()) {
            let _ = write!(
                note,
                "; after the heal it acquired again in {} of {rounds} rounds, {:.0}-{:.0} ms \
                 after it",
                back.len(),
                min.as_secs_f64() * 1000.0,
                max.as_secs_f64() * 1000.0
            );
        }
        note.push_str(". ");
    }
}
