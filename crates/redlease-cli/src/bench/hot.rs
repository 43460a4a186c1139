//! `--hot-cpus`: keep the CPUs out of their idle states while the benchmark runs.
//!
//! On a virtual machine, a vCPU that goes idle between two events (a reply, a pub/sub
//! message) costs tens of microseconds to wake again; a chain of single round trips pays
//! that on every hop, while a busy-retry loop never lets its CPUs idle. Spinners scheduled
//! with `SCHED_IDLE` (the lowest class there is: they run only when nothing else wants the
//! CPU) remove that cost without taking time from the measured processes, much like booting
//! with `idle=poll`. They are child processes, killed by PID when this value is dropped.

use std::process::{Child, Command, Stdio};

use anyhow::Context as _;

/// The spinning children; killed and reaped on drop.
#[derive(Debug)]
pub(super) struct HotCpus {
    spinners: Vec<Child>,
}

impl HotCpus {
    /// Starts `n` spinners (none for 0).
    pub(super) fn start(n: u16) -> anyhow::Result<Self> {
        let mut hot = Self {
            spinners: Vec::with_capacity(usize::from(n)),
        };
        for _ in 0..n {
            let child = Command::new("chrt")
                .args(["--idle", "0", "sh", "-c", "while :; do :; done"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("starting a SCHED_IDLE spinner for --hot-cpus (chrt, from util-linux)")?;
            hot.spinners.push(child);
        }
        Ok(hot)
    }
}

impl Drop for HotCpus {
    fn drop(&mut self) {
        for child in &mut self.spinners {
            // Our own children: kill by PID, then reap so that no zombie is left.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
