//! The heap trim gives back what a burst freed below a live allocation. The measurement runs in
//! a child process of this test binary that runs only it, so that no other test allocates or
//! frees while it reads the process's memory.

/// Runs [`measure_in_a_process_of_its_own`] alone in a child process of this binary and checks
/// that it ran and passed.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn a_trim_gives_back_what_a_burst_freed_below_live_allocations() {
    let exe = std::env::current_exe().expect("the test binary's path");
    let name = "heap_trim::measure_in_a_process_of_its_own";
    let out = std::process::Command::new(exe)
        .args([name, "--exact", "--ignored", "--test-threads=1"])
        .output()
        .expect("run the test binary again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed"),
        "the measurement failed or did not run: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The measurement itself; ignored in a plain run, where other tests share the process, and run
/// by [`a_trim_gives_back_what_a_burst_freed_below_live_allocations`] in a process of its own.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
#[ignore = "run alone in a child process by a_trim_gives_back_what_a_burst_freed_below_live_allocations"]
fn measure_in_a_process_of_its_own() {
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
