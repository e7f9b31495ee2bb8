//! The heap trim gives back what a burst freed below a live allocation. Its own test binary, so
//! that no other test allocates or frees while it measures the process's memory.

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn a_trim_gives_back_what_a_burst_freed_below_live_allocations() {
    use xmc::serve::heap::{Heap, trim_now};
    const MIB: u64 = 1 << 20;
    let start = Heap::now().expect("statm");
    // 96 MiB in 64 KiB blocks (below glibc's mmap threshold, so on the heap), written so that
    // their pages are resident. Every eighth stays, and the seven between are freed: 84 MiB
    // that glibc cannot return from the top of the heap.
    let mut blocks: Vec<Vec<u8>> = (0..1536)
        .map(|i| vec![(i % 251) as u8 + 1; 64 << 10])
        .collect();
    let kept: Vec<(usize, Vec<u8>)> = blocks
        .iter_mut()
        .enumerate()
        .step_by(8)
        .map(|(i, b)| (i, std::mem::take(b)))
        .collect();
    drop(blocks);
    let t = trim_now().expect("glibc on Linux trims");
    assert!(
        t.before.anon >= start.anon + 64 * MIB && t.before.slack() >= start.slack() + 64 * MIB,
        "the freed blocks stayed resident, and count as slack: {:?} before the trim, {:?} at \
         the start",
        t.before,
        start
    );
    let released = t.before.anon.saturating_sub(t.after.anon);
    assert!(
        released >= 64 * MIB && t.after.slack() < start.slack() + 16 * MIB,
        "the trim gave back {} MiB of the 84 freed: {:?} → {:?}",
        released / MIB,
        t.before,
        t.after
    );
    for (i, b) in &kept {
        assert!(b.len() == 64 << 10 && b.iter().all(|&x| x == (i % 251) as u8 + 1));
    }
}
