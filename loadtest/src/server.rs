//! Starting `xmc serve`, or checking that a given server answers; reading a server's memory.

use crate::engine::{self, HttpClient, Status};
use anyhow::{Context, bail};
use hyper::Uri;
use std::collections::HashMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A server under test: its base URL, and the process when this tool started it.
#[derive(Debug)]
pub struct Server {
    /// e.g. `http://127.0.0.1:40123`.
    pub url: String,
    child: Option<Child>,
    log: Option<PathBuf>,
}

/// `base` + `path` as a URI.
pub fn uri(base: &str, path: &str) -> anyhow::Result<Uri> {
    let s = format!("{}{}", base.trim_end_matches('/'), path);
    s.parse().with_context(|| format!("bad URL {s:?}"))
}

/// Checks that `base/readyz` answers 200 within `wait` (retrying), with an error that says what
/// happened otherwise.
pub async fn probe(client: &HttpClient, base: &str, wait: Duration) -> anyhow::Result<()> {
    let u = uri(base, "/readyz")?;
    let deadline = Instant::now() + wait;
    loop {
        let (status, body) = engine::send(client, &u, None, &[], Duration::from_secs(3)).await;
        let why = match status {
            Status::Http(200) => return Ok(()),
            Status::Http(c) => format!(
                "answered HTTP {c} ({})",
                String::from_utf8_lossy(&body)
                    .chars()
                    .take(200)
                    .collect::<String>()
            ),
            Status::Timeout => "did not answer within 3 s".to_string(),
            _ => "refused the connection or is not an HTTP server".to_string(),
        };
        if Instant::now() >= deadline {
            bail!("the server at {base} is unreachable or not ready: GET /readyz {why}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

impl Server {
    /// A server already running at `url`: checked with `/readyz`.
    pub async fn existing(client: &HttpClient, url: &str) -> anyhow::Result<Server> {
        probe(client, url, Duration::ZERO).await?;
        Ok(Server {
            url: url.trim_end_matches('/').to_string(),
            child: None,
            log: None,
        })
    }

    /// Starts `xmc serve --model MODEL` (`--repository MODEL` when MODEL is a directory) on a
    /// free loopback port, with `env`, and waits for `/readyz`. Its log goes to `log`.
    pub async fn start(
        client: &HttpClient,
        xmc: &Path,
        model: &Path,
        env: &[(String, String)],
        log: &Path,
        wait: Duration,
    ) -> anyhow::Result<Server> {
        if !xmc.exists() {
            bail!(
                "the xmc binary {} does not exist (build it with `cargo build --release --bin \
                 xmc`, or set `server.xmc`)",
                xmc.display()
            );
        }
        if !model.exists() {
            bail!("model bundle {} does not exist", model.display());
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .context("finding a free port")?
            .port();
        let log_file =
            std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let mut cmd = Command::new(xmc);
        // A directory is a model repository (`<name>/<version>/model.xmcb`).
        let flag = if model.is_dir() {
            "--repository"
        } else {
            "--model"
        };
        cmd.arg("serve")
            .arg(flag)
            .arg(model)
            .arg("--bind")
            .arg(format!("127.0.0.1:{port}"))
            .env("XMC_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {} serve", xmc.display()))?;
        let mut server = Server {
            url: format!("http://127.0.0.1:{port}"),
            child: Some(child),
            log: Some(log.to_path_buf()),
        };
        let deadline = Instant::now() + wait;
        loop {
            if let Some(c) = server.child.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                bail!(
                    "xmc serve on {} exited ({status}) before it was ready: {}",
                    model.display(),
                    server.log_tail()
                );
            }
            if probe(client, &server.url, Duration::ZERO).await.is_ok() {
                return Ok(server);
            }
            if Instant::now() >= deadline {
                bail!(
                    "xmc serve on {} was not ready after {:?}: {}",
                    model.display(),
                    wait,
                    server.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The process id, when this tool started the server.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn log_tail(&self) -> String {
        let Some(path) = &self.log else {
            return String::new();
        };
        let mut s = String::new();
        let _ = std::fs::File::open(path).and_then(|mut f| f.read_to_string(&mut s));
        let tail: String = s
            .chars()
            .rev()
            .take(600)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        format!("log {}: {}", path.display(), tail.trim())
    }

    /// Stops a started server (SIGTERM, then SIGKILL after 5 s).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(c.id().to_string())
                .status();
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A `/proc/PID/status` field in kB (`VmRSS`, `VmHWM`), if readable.
pub fn proc_status_kb(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// What a server process's threads went through, as counters since they started: two readings'
/// difference says where a stretch of the run's time went on the server's side.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct ProcTimes {
    /// CPU time, user + system, every thread, ended ones included (`/proc/PID/stat`), ms. The
    /// kernel counts it in clock ticks (10 ms where `USER_HZ` is 100).
    pub cpu_ms: f64,
    /// Time its threads were ready to run but waited for a CPU (`/proc/PID/task/*/schedstat`),
    /// ms summed over the threads: a request that is slow while this grows waited for a core.
    pub run_wait_ms: f64,
    /// Major page faults, every thread: pages it touched that had to be read from disk, such as
    /// a bundle page the kernel had reclaimed.
    pub major_faults: u64,
    /// Minor page faults, every thread: pages it touched that were in memory but not yet mapped
    /// for it, such as a fresh page of heap or a bundle page the page cache already held.
    pub minor_faults: u64,
}

impl ProcTimes {
    /// What changed from `earlier` to this reading.
    pub fn since(&self, earlier: &ProcTimes) -> ProcTimes {
        ProcTimes {
            cpu_ms: self.cpu_ms - earlier.cpu_ms,
            run_wait_ms: self.run_wait_ms - earlier.run_wait_ms,
            major_faults: self.major_faults.saturating_sub(earlier.major_faults),
            minor_faults: self.minor_faults.saturating_sub(earlier.minor_faults),
        }
    }
}

/// Reads one process's [`ProcTimes`] again and again. The kernel keeps a thread's run-queue
/// wait with the thread and drops it when the thread ends, so the sampler keeps each thread's
/// last reading and adds up only growth: what a thread waited after its last reading is lost
/// when it ends before the next (one sampling step's worth at most).
#[derive(Debug)]
pub struct ProcSampler {
    pid: u32,
    last: HashMap<u32, u64>,
    wait_ns: u64,
}

impl ProcSampler {
    /// A sampler of process `pid`; nothing is read yet.
    pub fn new(pid: u32) -> ProcSampler {
        ProcSampler {
            pid,
            last: HashMap::new(),
            wait_ns: 0,
        }
    }

    /// The counters now; `None` when the process is gone or its `/proc` files are unreadable.
    /// The first reading counts every live thread's whole wait, which differences cancel.
    pub fn read(&mut self) -> Option<ProcTimes> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).ok()?;
        let st = stat_fields(&stat, rustix::param::clock_ticks_per_second())?;
        let tasks = std::fs::read_dir(format!("/proc/{}/task", self.pid)).ok()?;
        self.account(tasks.flatten().filter_map(|t| {
            let tid = t.file_name().to_str()?.parse::<u32>().ok()?;
            let s = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
            Some((tid, schedstat_ns(&s)?.1))
        }));
        Some(ProcTimes {
            cpu_ms: st.cpu_s * 1e3,
            run_wait_ms: self.wait_ns as f64 / 1e6,
            major_faults: st.major_faults,
            minor_faults: st.minor_faults,
        })
    }

    /// Adds the growth of each thread's wait since its last reading; forgets ended threads.
    fn account(&mut self, readings: impl Iterator<Item = (u32, u64)>) {
        let mut now = HashMap::with_capacity(self.last.len());
        for (tid, wait) in readings {
            // A reused thread id that reads lower than its predecessor's last is a new thread.
            let before = self.last.get(&tid).copied().filter(|&b| b <= wait);
            self.wait_ns += wait - before.unwrap_or(0);
            now.insert(tid, wait);
        }
        self.last = now;
    }
}

/// What [`stat_fields`] reads from a `/proc/PID/stat` line.
#[derive(Clone, Copy, Debug, PartialEq)]
struct StatFields {
    /// `utime + stime`, seconds.
    cpu_s: f64,
    /// `minflt`.
    minor_faults: u64,
    /// `majflt`.
    major_faults: u64,
}

/// The CPU time and fault counts of a `/proc/PID/stat` line. The command name (field 2) may
/// hold spaces and parentheses, so fields are counted from its closing parenthesis.
fn stat_fields(stat: &str, ticks_per_s: u64) -> Option<StatFields> {
    let mut f = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    // After the name: state (3), ppid … flags (4–9), minflt (10), cminflt (11), majflt (12),
    // cmajflt (13), utime (14), stime (15).
    let minflt: u64 = f.nth(7)?.parse().ok()?;
    let majflt: u64 = f.nth(1)?.parse().ok()?;
    let utime: u64 = f.nth(1)?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    (ticks_per_s > 0).then(|| StatFields {
        cpu_s: (utime + stime) as f64 / ticks_per_s as f64,
        minor_faults: minflt,
        major_faults: majflt,
    })
}

/// A thread's time on a CPU and its run-queue wait (the first two of `schedstat`'s three
/// numbers), ns.
fn schedstat_ns(s: &str) -> Option<(u64, u64)> {
    let mut f = s.split_whitespace().map(|x| x.parse::<u64>().ok());
    Some((f.next()??, f.next()??))
}

/// The machine's CPU time by what the CPUs did, summed over every CPU: from `/proc/stat`'s
/// `cpu` line, in seconds since boot, or a difference of two readings.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct CpuTimes {
    /// Running user code (`user` + `nice`).
    pub user: f64,
    /// Running the kernel for a process (`system`).
    pub system: f64,
    /// Serving interrupts (`irq` + `softirq`; loopback packets are handled here too).
    pub irq: f64,
    /// Idle, with nothing to run (`idle` + `iowait`).
    pub idle: f64,
    /// Ready to run while the hypervisor ran something else (`steal`): a stall of the whole
    /// guest, which shows in no figure of the guest's own.
    pub steal: f64,
}

impl CpuTimes {
    /// What changed from `earlier` to this reading, times `scale` (1000 for milliseconds).
    pub fn since(&self, earlier: &CpuTimes, scale: f64) -> CpuTimes {
        CpuTimes {
            user: (self.user - earlier.user) * scale,
            system: (self.system - earlier.system) * scale,
            irq: (self.irq - earlier.irq) * scale,
            idle: (self.idle - earlier.idle) * scale,
            steal: (self.steal - earlier.steal) * scale,
        }
    }
}

/// What the machine's CPUs did, with the time on a CPU of two parties that compete with the
/// server for it: the load generator and the kernel's DAMON reclaim
/// (docs/decisions/0010-loading-under-sched-idle.md).
#[derive(Clone, Copy, Debug, Default)]
pub struct Machine {
    /// By CPU state, seconds.
    pub cpu: CpuTimes,
    /// This process's (the generator's) threads' time on a CPU, ms.
    pub generator_ms: Option<f64>,
    /// This process's minor page faults: the first touch of each fresh page of its memory
    /// (records, kept answers, buffers) is one, and its time counts as time on a CPU.
    pub generator_minor_faults: Option<u64>,
    /// The `kdamond` kernel threads' time on a CPU, ms; `None` where none runs.
    pub kdamond_ms: Option<f64>,
    /// TCP sockets in use on the machine (`/proc/net/sockstat`): on the loopback, both ends of
    /// every connection between the generator and the server, and the listener.
    pub tcp_sockets: Option<u64>,
}

/// Reads [`Machine`] again and again.
#[derive(Debug)]
pub struct MachineSampler {
    kdamonds: Vec<u32>,
}

impl MachineSampler {
    /// Finds the `kdamond` threads (once: they start when DAMON is configured).
    pub fn new() -> MachineSampler {
        let kdamonds = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
                let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
                comm.starts_with("kdamond").then_some(pid)
            })
            .collect();
        MachineSampler { kdamonds }
    }

    /// The figures now; `None` where `/proc/stat` is unreadable (see [`machine_cpu`]). Times on
    /// a CPU come from `schedstat` in ns, so they hold over a span of a few milliseconds,
    /// where `/proc/stat`'s clock ticks do not.
    pub fn read(&self) -> Option<Machine> {
        let on_cpu_ms = |path: &Path| {
            let s = std::fs::read_to_string(path).ok()?;
            Some(schedstat_ns(&s)?.0 as f64 / 1e6)
        };
        let generator_ms = std::fs::read_dir("/proc/self/task").ok().map(|tasks| {
            tasks
                .flatten()
                .filter_map(|t| on_cpu_ms(&t.path().join("schedstat")))
                .sum()
        });
        let kdamond_ms = (!self.kdamonds.is_empty()).then(|| {
            self.kdamonds
                .iter()
                .filter_map(|p| on_cpu_ms(Path::new(&format!("/proc/{p}/schedstat"))))
                .sum()
        });
        let generator_minor_faults = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|s| stat_fields(&s, rustix::param::clock_ticks_per_second()))
            .map(|s| s.minor_faults);
        let tcp_sockets = std::fs::read_to_string("/proc/net/sockstat")
            .ok()
            .and_then(|s| tcp_inuse(&s));
        Some(Machine {
            cpu: machine_cpu()?,
            generator_ms,
            generator_minor_faults,
            kdamond_ms,
            tcp_sockets,
        })
    }
}

impl Default for MachineSampler {
    fn default() -> Self {
        MachineSampler::new()
    }
}

/// The `inuse` count of the `TCP:` line of `/proc/net/sockstat`.
fn tcp_inuse(sockstat: &str) -> Option<u64> {
    let line = sockstat.lines().find_map(|l| l.strip_prefix("TCP:"))?;
    let mut f = line.split_whitespace();
    while f.next()? != "inuse" {}
    f.next()?.parse().ok()
}

/// The machine's CPU times now; `None` where `/proc/stat` is unreadable or has no steal
/// column.
pub fn machine_cpu() -> Option<CpuTimes> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    cpu_times_of_proc_stat(&text, rustix::param::clock_ticks_per_second())
}

/// The host's steal time so far ([`CpuTimes::steal`]), seconds.
pub fn host_steal_s() -> Option<f64> {
    Some(machine_cpu()?.steal)
}

/// The aggregate `cpu` line of `/proc/stat`, in seconds.
fn cpu_times_of_proc_stat(text: &str, ticks_per_s: u64) -> Option<CpuTimes> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    // user nice system idle iowait irq softirq steal …
    let mut t = [0u64; 8];
    let mut fields = line.split_whitespace().skip(1);
    for v in &mut t {
        *v = fields.next()?.parse().ok()?;
    }
    let s = |ticks: u64| ticks as f64 / ticks_per_s as f64;
    (ticks_per_s > 0).then(|| CpuTimes {
        user: s(t[0] + t[1]),
        system: s(t[2]),
        irq: s(t[5] + t[6]),
        idle: s(t[3] + t[4]),
        steal: s(t[7]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_and_faults_are_read_past_a_name_with_spaces_and_parens() {
        let stat = "4242 (xmc (serve) x) S 1 4242 4242 0 -1 4194560 1200 0 3 0 250 75 0 0 20 0 \
                    5 0 1000 123456 789 18446744073709551615";
        assert_eq!(
            stat_fields(stat, 100),
            Some(StatFields {
                cpu_s: 3.25,
                minor_faults: 1200,
                major_faults: 3
            })
        );
        assert_eq!(stat_fields("4242 (xmc) S 1", 100), None);
        assert_eq!(stat_fields("no name here", 100), None);
        assert_eq!(
            schedstat_ns("266067115 69408609 2270\n"),
            Some((266067115, 69408609))
        );
        assert_eq!(schedstat_ns("266067115\n"), None);
        assert_eq!(schedstat_ns("266067115 x 3\n"), None);
    }

    #[test]
    fn the_sampler_keeps_the_wait_of_ended_threads() {
        let mut s = ProcSampler::new(0);
        s.account([(1, 100), (2, 50)].into_iter());
        assert_eq!(s.wait_ns, 150);
        // Thread 1 waited 30 more, thread 2 ended (its 50 stay), thread 3 began with 20.
        s.account([(1, 130), (3, 20)].into_iter());
        assert_eq!(s.wait_ns, 200);
        // Thread 3's id went to a new thread that has waited 10 so far.
        s.account([(1, 130), (3, 10)].into_iter());
        assert_eq!(s.wait_ns, 210);
        // This process reads, and its counters only grow.
        let mut me = ProcSampler::new(std::process::id());
        let first = me.read().expect("this process's /proc files");
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(30) {
            std::hint::black_box(0u64);
        }
        let d = me.read().expect("still readable").since(&first);
        assert!(d.cpu_ms >= 0.0 && d.run_wait_ms >= 0.0, "{d:?}");
        assert!(ProcSampler::new(u32::MAX).read().is_none());
    }

    #[test]
    fn tcp_sockets_in_use_are_read_from_sockstat() {
        let s = "sockets: used 8\nTCP: inuse 17 orphan 0 tw 41 alloc 19 mem 129\nUDP: inuse 3\n";
        assert_eq!(tcp_inuse(s), Some(17));
        assert_eq!(tcp_inuse("sockets: used 8\nUDP: inuse 3\n"), None);
        assert_eq!(tcp_inuse("TCP: orphan 0\n"), None);
        // With a listener open, this machine has at least that one in use.
        if cfg!(target_os = "linux") {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let count = MachineSampler::new().read().and_then(|m| m.tcp_sockets);
            drop(listener);
            assert!(count.is_some_and(|n| n >= 1), "{count:?}");
        }
    }

    #[test]
    fn cpu_times_are_read_from_the_aggregate_cpu_line() {
        let stat = "cpu  770222 2 236252 429881 1741 0 41380 622 0 0\n\
                    cpu0 380518 1 117019 221135 434 0 20441 325 0 0\n";
        let t = cpu_times_of_proc_stat(stat, 100).unwrap();
        assert_eq!(t.user, 7702.24);
        assert_eq!(t.system, 2362.52);
        assert_eq!(t.irq, 413.8);
        assert_eq!(t.idle, 4316.22);
        assert_eq!(t.steal, 6.22);
        let later = CpuTimes { steal: 6.25, ..t };
        assert!((later.since(&t, 1e3).steal - 30.0).abs() < 1e-9);
        assert_eq!(later.since(&t, 1e3).user, 0.0);
        // A kernel too old to report steal, and no aggregate line at all.
        assert_eq!(cpu_times_of_proc_stat("cpu  1 2 3 4 5 6 7\n", 100), None);
        assert_eq!(cpu_times_of_proc_stat("cpu0 1 2 3 4 5 6 7 8\n", 100), None);
        // This machine has one.
        assert!(machine_cpu().is_some_and(|c| c.idle + c.user > 0.0) || !cfg!(target_os = "linux"));
        // And this process (the test's) has been on a CPU, as the generator is.
        if cfg!(target_os = "linux") {
            let m = MachineSampler::new().read().expect("/proc/stat");
            assert!(m.generator_ms.is_some_and(|ms| ms > 0.0), "{m:?}");
            // It has touched fresh pages (every process's start does), and the count grows
            // with more of them (by fewer than the 16,384 pages where huge pages back them).
            let before = m.generator_minor_faults.expect("/proc/self/stat");
            assert!(before > 0);
            let pages = vec![1u8; 64 << 20];
            std::hint::black_box(&pages);
            let after = MachineSampler::new()
                .read()
                .and_then(|m| m.generator_minor_faults);
            assert!(after.is_some_and(|a| a > before), "{before} → {after:?}");
        }
    }
}
