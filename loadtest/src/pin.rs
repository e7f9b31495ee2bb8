//! Pinning the generator and the servers it starts to CPUs (Linux).
//!
//! On a small machine the generator and the server share cores. The generator spins near send
//! times and calls `sched_yield` so that a server thread on its core runs at once; but a yield
//! also hands the core to any other runnable thread there, such as the server's `SCHED_IDLE`
//! model-load thread, which then keeps it for up to a scheduler slice while responses wait to be
//! read. Those waits are the generator's, not the server's, yet they land in the measured
//! latency. With `load.cpus` and `server.cpus` set to disjoint CPUs, the generator's yields only
//! reach its own threads, and the server keeps its own cores, as it would behind a real network
//! (docs/decisions/0010-loading-under-sched-idle.md gives the measurements).

use anyhow::{Context, bail};
use rustix::process::Pid;
use rustix::thread::{CpuSet, sched_getaffinity, sched_setaffinity};
use std::sync::OnceLock;

/// The CPUs this process could run on when it first asked, before any pinning: the CPUs a
/// scenario may name, and those a server gets back when only the generator is pinned.
pub fn allowed() -> &'static [usize] {
    static ALLOWED: OnceLock<Vec<usize>> = OnceLock::new();
    ALLOWED.get_or_init(|| match sched_getaffinity(None) {
        Ok(set) => (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect(),
        Err(_) => (0..std::thread::available_parallelism().map_or(1, usize::from)).collect(),
    })
}

/// Checks that `cpus` (the value of `key`) names CPUs this process may run on, none twice.
pub fn check(key: &str, cpus: &[usize]) -> anyhow::Result<()> {
    let allowed = allowed();
    for (i, &c) in cpus.iter().enumerate() {
        if !allowed.contains(&c) {
            bail!("`{key}`: CPU {c} is not one this process may run on ({allowed:?})");
        }
        if cpus[..i].contains(&c) {
            bail!("`{key}`: CPU {c} is named twice");
        }
    }
    Ok(())
}

fn set_of(cpus: &[usize]) -> CpuSet {
    let mut set = CpuSet::new();
    for &c in cpus {
        set.set(c);
    }
    set
}

/// Pins the calling thread, and so every thread it starts later, to `cpus`.
pub fn pin_self(cpus: &[usize]) -> anyhow::Result<()> {
    sched_setaffinity(None, &set_of(cpus))
        .with_context(|| format!("pinning the generator to CPUs {cpus:?}"))
}

/// Pins every thread of process `pid` to `cpus`. Threads it starts later inherit the mask of
/// the thread that starts them, so once a server is up this covers its later threads too.
pub fn pin_process(pid: u32, cpus: &[usize]) -> anyhow::Result<()> {
    let set = set_of(cpus);
    let dir = format!("/proc/{pid}/task");
    let tasks = std::fs::read_dir(&dir).with_context(|| format!("listing {dir}"))?;
    for task in tasks {
        let task = task.with_context(|| format!("listing {dir}"))?;
        let Some(tid) = task
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
            .and_then(Pid::from_raw)
        else {
            continue;
        };
        // A thread that ended since the listing is no error.
        match sched_setaffinity(Some(tid), &set) {
            Ok(()) | Err(rustix::io::Errno::SRCH) => {}
            Err(e) => {
                return Err(e).with_context(|| {
                    format!("pinning thread {tid:?} of process {pid} to CPUs {cpus:?}")
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_refuses_missing_and_repeated_cpus() {
        let first = allowed()[0];
        assert!(check("load.cpus", &[first]).is_ok());
        let err = check("server.cpus", &[100_000]).unwrap_err().to_string();
        assert!(
            err.contains("server.cpus") && err.contains("100000"),
            "{err}"
        );
        let err = check("load.cpus", &[first, first]).unwrap_err().to_string();
        assert!(err.contains("named twice"), "{err}");
    }

    #[test]
    fn a_pinned_process_reports_the_mask() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("sleep runs");
        let first = allowed()[0];
        let pinned = pin_process(child.id(), &[first]);
        let status = std::fs::read_to_string(format!("/proc/{}/status", child.id()))
            .expect("status readable");
        let _ = child.kill();
        let _ = child.wait();
        pinned.expect("pinning works");
        let line = status
            .lines()
            .find(|l| l.starts_with("Cpus_allowed_list:"))
            .expect("the status has the mask");
        let expected = first.to_string();
        assert_eq!(
            line.split_whitespace().nth(1),
            Some(expected.as_str()),
            "{line}"
        );
    }
}
