//! Handing freed heap memory back to the system after a burst.
//!
//! glibc's allocator returns freed memory to the kernel only from the top of each arena. What a
//! burst frees below a live allocation (connection buffers, request bodies, answers) stays
//! resident for the life of the process: after an overload the server keeps tens of times the
//! anonymous memory it had before, no longer used (docs/decisions/0008-heap-trimmer.md). `malloc_trim(0)` gives those pages back with
//! `madvise`, arena by arena.
//!
//! A thread of its own ([`spawn_trimmer`]) reads the process's anonymous resident memory once a
//! second, which takes no lock the requests use. When that has grown by `heap_trim_mib` over its
//! lowest reading, it asks the allocator how much of it is in use (`mallinfo2`, which walks
//! every free chunk with its arena locked, so it is not free either), and trims when the
//! rest, the freed pages it keeps ([`Heap::slack`]), has grown by as much ([`Trimmer`]). So an
//! overload's open connections do not set it off while they are open, and their buffers do once
//! they close. Steady serving never gets past the first reading, and the trim, which also locks
//! each arena in turn while it walks it, runs only after a burst.

use std::time::{Duration, Instant};

/// How often the trimmer reads the process's anonymous memory.
pub const TRIM_CHECK: Duration = Duration::from_secs(1);

/// The most checks skipped between two counts of the allocator's memory while the anonymous
/// memory stays high but in use.
const MAX_BACKOFF: u32 = 64;

/// When to trim. The anonymous memory's growth over its lowest reading since start gates a count
/// of the allocator's memory ([`Trimmer::tick`]); the slack's growth over its lowest count since
/// the last trim decides ([`Trimmer::counted`]). While the memory stays high and in use, counts
/// back off: 1, 2, 4, … and at most [`MAX_BACKOFF`] checks skipped between two.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trimmer {
    threshold: u64,
    anon_floor: u64,
    slack_floor: u64,
    backoff: u32,
    wait: u32,
}

impl Trimmer {
    /// A trimmer for growths of `threshold` bytes (at least 1) over the reading `start`.
    pub fn new(threshold: u64, start: Heap) -> Self {
        Trimmer {
            threshold: threshold.max(1),
            anon_floor: start.anon,
            slack_floor: start.slack(),
            backoff: 1,
            wait: 0,
        }
    }

    /// Takes a check's reading of the anonymous memory, in bytes; whether to count the
    /// allocator's memory now.
    pub fn tick(&mut self, anon: u64) -> bool {
        self.anon_floor = self.anon_floor.min(anon);
        if anon - self.anon_floor < self.threshold {
            (self.backoff, self.wait) = (1, 0);
            return false;
        }
        if self.wait > 0 {
            self.wait -= 1;
            return false;
        }
        true
    }

    /// Takes the count; whether to trim now.
    pub fn counted(&mut self, heap: Heap) -> bool {
        let slack = heap.slack();
        self.slack_floor = self.slack_floor.min(slack);
        if slack - self.slack_floor >= self.threshold {
            return true;
        }
        self.wait = self.backoff;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        false
    }

    /// Takes the count right after a trim: the next trim waits for the slack to grow over it.
    /// Slack that a trim cannot give back (free space in pages that also hold live allocations)
    /// thus costs one trim, not one a check.
    pub fn trimmed(&mut self, after: Heap) {
        self.slack_floor = after.slack();
        (self.backoff, self.wait) = (1, 0);
    }
}

/// One reading of the process's memory, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heap {
    /// Anonymous resident memory: `/proc/self/statm`'s resident pages minus its shared ones
    /// (file-backed, such as the model's map, and shared memory).
    pub anon: u64,
    /// What the allocator has handed out and not had back (`mallinfo2`'s `uordblks` and
    /// `hblkhd`: in-use chunks in the arenas, and chunks mapped on their own).
    pub in_use: u64,
}

impl Heap {
    /// Reads it now. `None` where this build cannot trim ([`CAN_TRIM`]) or there is no
    /// `/proc/self/statm`.
    pub fn now() -> Option<Heap> {
        if !CAN_TRIM {
            return None;
        }
        Some(Heap::with_anon(anon_resident()?))
    }

    /// The reading with the anonymous memory `anon` already read: the allocator's count alone.
    fn with_anon(anon: u64) -> Heap {
        Heap {
            anon,
            in_use: allocator_in_use(),
        }
    }

    /// Anonymous resident memory that the allocator does not account as in use: the freed
    /// pages it keeps, and memory it never handed out (thread stacks, say). 0 when in-use chunks
    /// have pages that were never touched and outweigh it.
    pub fn slack(&self) -> u64 {
        self.anon.saturating_sub(self.in_use)
    }
}

/// What one trim did.
#[derive(Clone, Copy, Debug)]
pub struct Trim {
    /// The memory before.
    pub before: Heap,
    /// And after.
    pub after: Heap,
    /// How long `malloc_trim` took.
    pub took: Duration,
}

/// The process's anonymous resident memory in bytes (see [`Heap::anon`]), or `None` where there
/// is no `/proc/self/statm`.
pub fn anon_resident() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let mut fields = statm.split_ascii_whitespace().skip(1);
    let resident: u64 = fields.next()?.parse().ok()?;
    let shared: u64 = fields.next()?.parse().ok()?;
    Some(resident.saturating_sub(shared) * rustix::param::page_size() as u64)
}

/// Whether this build can trim (glibc on Linux; other allocators have no such call, and the
/// common ones return freed memory themselves).
pub const CAN_TRIM: bool = cfg!(all(target_os = "linux", target_env = "gnu"));

/// Gives the allocator's free pages back to the system now, and says what that did. `None`
/// where this build cannot trim ([`CAN_TRIM`]) or the memory cannot be read.
pub fn trim_now() -> Option<Trim> {
    trim_from(Heap::now()?)
}

/// [`trim_now`] with the memory before it already read.
fn trim_from(before: Heap) -> Option<Trim> {
    let start = Instant::now();
    malloc_trim();
    let took = start.elapsed();
    let after = Heap::now()?;
    Some(Trim {
        before,
        after,
        took,
    })
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn malloc_trim() {
    // SAFETY: `malloc_trim` takes no pointer and touches only memory the allocator owns and
    // holds free; glibc locks each arena while it trims it, as it does for any other call.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn malloc_trim() {}

/// Has the allocator serve every allocation of at least `bytes` from a map of its own, given
/// back to the system when it is freed, and stop raising that bound on its own. glibc raises it
/// up to 32 MiB once a large block is freed, and from then on keeps what smaller blocks a
/// long computation frees between live ones; the shard trainer, which has a memory bound, sets
/// it before its threads start. Whether the allocator took it (false where this build has no
/// such setting).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn map_allocations_from(bytes: usize) -> bool {
    let Ok(bytes) = i32::try_from(bytes) else {
        return false;
    };
    // SAFETY: `mallopt` takes two integers and changes only glibc's own tunables, under its
    // lock; no memory is passed or returned.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, bytes) == 1 }
}

/// [`map_allocations_from`] where this build has no such setting.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn map_allocations_from(_bytes: usize) -> bool {
    false
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn allocator_in_use() -> u64 {
    // SAFETY: `mallinfo2` takes no argument and returns a plain struct of counts; glibc locks
    // each arena while it counts it. (glibc 2.33 or later: the binary needs it at run time.)
    let m = unsafe { libc::mallinfo2() };
    (m.uordblks as u64).saturating_add(m.hblkhd as u64)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn allocator_in_use() -> u64 {
    0
}

/// Starts the thread that trims the heap after a growth of `threshold_mib` MiB (0: none, and
/// none where this build cannot trim).
pub fn spawn_trimmer(threshold_mib: u64) {
    if threshold_mib == 0 || !CAN_TRIM {
        return;
    }
    let Some(start) = Heap::now() else {
        tracing::warn!("cannot read /proc/self/statm; the heap will not be trimmed");
        return;
    };
    let mut trimmer = Trimmer::new(threshold_mib << 20, start);
    // At the process's own priority, not the loads' low one: a count or a trim holds each
    // arena's lock in turn, and a holder that request threads preempt would keep them waiting.
    let spawned = std::thread::Builder::new()
        .name("xmc-heap".into())
        .spawn(move || {
            loop {
                std::thread::sleep(TRIM_CHECK);
                let Some(anon) = anon_resident() else {
                    continue;
                };
                if !trimmer.tick(anon) {
                    continue;
                }
                let heap = Heap::with_anon(anon);
                if !trimmer.counted(heap) {
                    continue;
                }
                let Some(t) = trim_from(heap) else {
                    continue;
                };
                trimmer.trimmed(t.after);
                let released = t.before.anon.saturating_sub(t.after.anon);
                metrics::counter!("xmc_heap_trims_total").increment(1);
                metrics::counter!("xmc_heap_trimmed_bytes_total").increment(released);
                tracing::info!(
                    anon_before_mib = t.before.anon >> 20,
                    anon_after_mib = t.after.anon >> 20,
                    in_use_mib = t.after.in_use >> 20,
                    took_us = t.took.as_micros() as u64,
                    "trimmed the heap"
                );
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "could not start the heap trimmer");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn heap(anon: u64, in_use: u64) -> Heap {
        Heap {
            anon: anon * MIB,
            in_use: in_use * MIB,
        }
    }

    #[test]
    fn the_allocator_is_counted_only_after_a_growth_of_the_anonymous_memory() {
        let mut t = Trimmer::new(32 * MIB, heap(10, 8));
        assert!(!t.tick(41 * MIB), "31 MiB over the start");
        assert!(!t.tick(5 * MIB), "a fall lowers the floor");
        assert!(t.tick(37 * MIB), "32 MiB over the lowest reading");
        assert!(t.counted(heap(37, 2)), "the slack grew from 2 to 35 MiB");
        t.trimmed(heap(9, 2));
        assert!(
            !t.tick(36 * MIB),
            "the anonymous floor stays the lowest since start"
        );
        assert!(t.tick(37 * MIB));
    }

    #[test]
    fn memory_in_use_is_not_trimmed_and_its_counts_back_off() {
        let mut t = Trimmer::new(32 * MIB, heap(4, 2));
        // An overload: the memory is up, and in use.
        let mut counts = vec![];
        for check in 0..20 {
            if t.tick(90 * MIB) {
                counts.push(check);
                assert!(!t.counted(heap(90, 80)), "in use");
            }
        }
        assert_eq!(counts, [0, 2, 5, 10, 19], "1, 2, 4, 8 checks skipped");
        // The connections close: their memory is freed, and stays resident.
        let mut check = 20;
        while !t.tick(90 * MIB) {
            check += 1;
        }
        assert_eq!(check, 20 + 16, "the next count is 16 checks on");
        assert!(t.counted(heap(90, 6)), "the slack grew from 2 to 84 MiB");
        t.trimmed(heap(10, 6));
        // Back under the threshold: no count, and the backoff starts again.
        assert!(!t.tick(10 * MIB));
        assert!(t.tick(40 * MIB) && !t.counted(heap(40, 38)));
        assert!(
            !t.tick(40 * MIB) && t.tick(40 * MIB),
            "one check skipped, not 32"
        );
    }

    #[test]
    fn slack_a_trim_could_not_give_back_is_not_trimmed_again() {
        let mut t = Trimmer::new(32 * MIB, heap(4, 2));
        assert!(t.tick(60 * MIB) && t.counted(heap(60, 10)));
        // Fragments: 40 MiB of slack stay.
        t.trimmed(heap(50, 10));
        assert!(t.tick(50 * MIB) && !t.counted(heap(50, 10)));
        assert!(!t.tick(50 * MIB), "backing off");
        assert!(
            t.tick(82 * MIB) && t.counted(heap(82, 10)),
            "32 MiB more slack"
        );
    }

    #[test]
    fn the_anonymous_memory_is_read_where_there_is_a_proc() {
        if std::path::Path::new("/proc/self/statm").exists() {
            let anon = anon_resident().expect("statm parses");
            assert!(anon > 0);
        }
    }
}
