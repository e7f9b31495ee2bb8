//! Scenario files (`loadtest/scenarios/*.toml`): parsing and validation. Every error names the
//! file and the key.

use crate::engine::Arrivals;
use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Which scenario a file describes.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// One server per model, a sweep of rates in interleaved rounds, quality and latency per
    /// (model, rate).
    DepthVsLatency,
    /// A fixed rate while the served model is swapped N times.
    HotSwap,
    /// The highest rate whose p99 stays under a target.
    MaxRate,
}

/// A whole scenario file.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// The scenario.
    pub kind: Kind,
    /// A title for the report (default: the file name).
    pub title: Option<String>,
    /// The report directory (the command line's `--out` wins).
    pub out: Option<PathBuf>,
    /// The queries and their truth.
    pub data: DataSpec,
    /// The load shape.
    #[serde(default)]
    pub load: LoadSpec,
    /// How to reach the server(s).
    #[serde(default)]
    pub server: ServerSpec,
    /// The models (depth-vs-latency, max-rate).
    #[serde(default)]
    pub models: Vec<ModelSpec>,
    /// `depth-vs-latency` settings.
    pub depth_vs_latency: Option<DepthVsLatency>,
    /// `hot-swap` settings.
    pub hot_swap: Option<HotSwap>,
    /// `max-rate` settings.
    pub max_rate: Option<MaxRate>,
}

/// The data set the requests replay.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DataSpec {
    /// An XC-format file (plain or gzip): its rows are the queries (`features`), its labels the
    /// truth. Or a JSON Lines file (`.jsonl`, `.jsonl.gz`) of `{"text", "labels"}` documents:
    /// text queries, scored by the label names the server answers with.
    pub test: PathBuf,
    /// Labels per request (P@k and expected depth@k are reported for k = 1 and this k).
    #[serde(default = "default_k")]
    pub k: usize,
    /// Use at most this many rows (0: all).
    #[serde(default)]
    pub limit: usize,
}

fn default_k() -> usize {
    5
}

/// The load shape of every run in the scenario.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoadSpec {
    /// `poisson` or `constant`.
    pub arrivals: Arrivals,
    /// Seconds of measured load per run.
    pub duration_s: f64,
    /// At most this many requests per run (0: no limit; the duration still bounds the run).
    pub max_requests: u64,
    /// Seconds of unmeasured load at the same rate before each run (connections, caches).
    pub warmup_s: f64,
    /// A request not answered in this many milliseconds fails.
    pub timeout_ms: u64,
    /// The most requests in flight; more is an error (`in_flight_cap`).
    pub max_in_flight: usize,
    /// Seed of the Poisson arrivals.
    pub seed: u64,
    /// The CPUs the generator runs on (empty: any); see [`crate::pin`]. With several
    /// `senders`, sender k runs on the k-th of them (cycling).
    pub cpus: Vec<usize>,
    /// Threads that send, each with its share of every run (see [`crate::engine::Senders`]).
    /// One sender thread loads a server on one or two cores; a server on more cores can answer
    /// more than one thread sends. Each spins while requests are in flight, so each takes a core.
    pub senders: usize,
    /// Keep-alive connections opened before each run, warm-ups included, as `wrk -c` opens its
    /// connections before it starts (0: none; the pool opens one whenever every open one is
    /// busy, as a pile-up of requests does). A pile-up of more requests than this still opens
    /// more. See [`crate::engine::open_connections`] and [`LoadSpec::pool_idle`].
    pub connections: usize,
}

impl LoadSpec {
    /// How long the generator's pool keeps a connection no request uses: [`POOL_IDLE`], or
    /// for as long as the scenario runs when `connections` are opened first. The pool hands out
    /// the connection returned last (hyper's idle list is a stack), so in a long run most of
    /// those opened first sit unused until a pile-up reaches them, and a limit would close them
    /// before it does. (A server's own idle limit can still close them.)
    ///
    /// [`POOL_IDLE`]: crate::engine::POOL_IDLE
    pub fn pool_idle(&self) -> Option<std::time::Duration> {
        (self.connections == 0).then_some(crate::engine::POOL_IDLE)
    }
}

impl Default for LoadSpec {
    fn default() -> Self {
        LoadSpec {
            arrivals: Arrivals::Poisson,
            duration_s: 10.0,
            max_requests: 0,
            warmup_s: 1.0,
            timeout_ms: 2000,
            max_in_flight: 2048,
            seed: 1,
            cpus: Vec::new(),
            senders: 1,
            connections: 0,
        }
    }
}

/// How servers are found or started.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerSpec {
    /// The `xmc` binary that serves each model bundle.
    pub xmc: PathBuf,
    /// Seconds to wait for a started server's `/readyz`.
    pub startup_timeout_s: f64,
    /// Extra environment for started servers (e.g. `XMC_LOG = "warn"`).
    pub env: BTreeMap<String, String>,
    /// The CPUs every thread of a started server runs on (empty: any); see [`crate::pin`].
    pub cpus: Vec<usize>,
}

impl Default for ServerSpec {
    fn default() -> Self {
        ServerSpec {
            xmc: PathBuf::from("target/release/xmc"),
            startup_timeout_s: 60.0,
            env: BTreeMap::new(),
            cpus: Vec::new(),
        }
    }
}

/// One model under test: a bundle to serve, or the URL of a server already running.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// Its name in the report.
    pub label: String,
    /// A bundle; the tool starts `xmc serve` on it.
    pub bundle: Option<PathBuf>,
    /// A running server, e.g. `http://127.0.0.1:8080`.
    pub url: Option<String>,
}

/// `[depth_vs_latency]`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DepthVsLatency {
    /// Offered rates, requests per second.
    pub rates: Vec<f64>,
    /// Per rate, `duration_s` is split into this many rounds, and each round runs every model
    /// once, in an order that rotates from round to round: a machine whose speed drifts during
    /// the sweep then slows every model alike instead of whichever ran last.
    #[serde(default = "default_rounds")]
    pub rounds: usize,
}

fn default_rounds() -> usize {
    4
}

/// How a hot swap is triggered.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SwapMethod {
    /// An atomic rename of a symlink over the model path; the server's poller notices.
    Rename,
    /// The rename, then `POST /v1/admin/reload`.
    Admin,
    /// Alternating: two renames left to the poller, then two followed by the admin route.
    Both,
}

/// `[hot_swap]`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HotSwap {
    /// Offered rate, requests per second (or `rate_fraction` of a measured max rate).
    pub rate: Option<f64>,
    /// With `rate` absent: measure the max rate first (as in `[max_rate]`) and run at this
    /// fraction of it.
    pub rate_fraction: Option<f64>,
    /// The two bundles swapped between (the first is served at the start).
    pub bundles: [PathBuf; 2],
    /// Number of swaps.
    pub swaps: usize,
    /// Milliseconds between swaps.
    #[serde(default = "default_interval")]
    pub interval_ms: u64,
    /// `rename`, `admin` or `both`.
    #[serde(default = "default_method")]
    pub method: SwapMethod,
    /// Seconds of load before the first swap (the baseline).
    #[serde(default = "default_before")]
    pub before_s: f64,
    /// Seconds of load after the swap phase. With it, the baseline ("without swaps") is the
    /// phases before and after the swaps together, so that neither the server's first seconds
    /// nor whatever follows the swaps alone sets it; 0 keeps the baseline to `before_s`.
    #[serde(default)]
    pub after_s: f64,
    /// The server's poll interval, ms.
    #[serde(default = "default_poll")]
    pub poll_interval_ms: u64,
    /// Admin reloads ask for `?force=true`, which reloads even the file already serving. With
    /// the same bundle twice and `method = "admin"`, every swap then goes through the whole
    /// load (open, checksums, pre-fault, warm-up, publish, release) onto the same page-cache
    /// pages: the swap's own cost without a new model's cold caches.
    #[serde(default)]
    pub force: bool,
    /// `[hot_swap.repository]`: swap the versions of one model of a repository while the load
    /// goes to another model of it.
    #[serde(default)]
    pub repository: Option<RepositorySwap>,
}

/// `[hot_swap.repository]`: the swaps write new version directories of model `swapped` (each a
/// copy of the next of `bundles`, written beside and renamed in), while the load goes to model
/// `loaded` through `/v1/models/{loaded}/predict`. `method` applies: `rename` leaves the new
/// version to the server's poller, `admin` follows it with
/// `POST /v2/repository/models/{swapped}/load`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RepositorySwap {
    /// The repository (`<name>/<version>/model.xmcb`). For a server the tool starts, it serves
    /// a working copy of it in the report directory (the bundles linked, not copied), and the
    /// new versions go there; with `url`, the new versions are written into `dir` itself.
    pub dir: PathBuf,
    /// The model whose versions are swapped (it need not exist yet).
    pub swapped: String,
    /// The model that takes the load.
    pub loaded: String,
    /// A server that already serves `dir` (its poll interval and admin token are its own).
    pub url: Option<String>,
    /// With `url`: the server's admin token, for `method = "admin"` or `"both"`.
    pub admin_token: Option<String>,
}

impl RepositorySwap {
    fn check(&self, h: &HotSwap) -> anyhow::Result<()> {
        for (key, name) in [
            ("hot_swap.repository.swapped", &self.swapped),
            ("hot_swap.repository.loaded", &self.loaded),
        ] {
            if !xmc::serve::repository::valid_name(name) {
                bail!("`{key}` = {name:?}: not a model name (letters, digits, `-`, `_`, `.`)");
            }
        }
        if self.swapped == self.loaded {
            bail!("`hot_swap.repository`: `swapped` and `loaded` must be two different models");
        }
        if h.force {
            bail!("`hot_swap.force` reloads a `--model` file; a repository gets new versions");
        }
        if self.url.is_some() && h.method != SwapMethod::Rename && self.admin_token.is_none() {
            bail!(
                "`hot_swap.repository.url` with method {:?} needs `admin_token` (the \
                 server's)",
                h.method
            );
        }
        if self.url.is_none() && self.admin_token.is_some() {
            bail!(
                "`hot_swap.repository.admin_token` is for `url`: a started server gets the tool's own"
            );
        }
        Ok(())
    }
}

fn default_interval() -> u64 {
    500
}
fn default_method() -> SwapMethod {
    SwapMethod::Both
}
fn default_before() -> f64 {
    20.0
}
fn default_poll() -> u64 {
    100
}

/// `[max_rate]`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MaxRate {
    /// A rate passes when its p99 (from the schedule) is at most this, it has no errors, and
    /// it achieves 95% of the offered rate.
    pub target_p99_ms: f64,
    /// The first rate tried; rates double until one fails, then bisect.
    #[serde(default = "default_start")]
    pub start_rate: f64,
    /// Never try above this rate.
    #[serde(default = "default_ceiling")]
    pub ceiling: f64,
    /// Bisection steps after the first failure.
    #[serde(default = "default_refine")]
    pub refine: usize,
    /// The routes measured: `predict` (POST /v1/predict with the data's queries) and
    /// `healthz` (GET /healthz, the HTTP floor).
    #[serde(default = "default_endpoints")]
    pub endpoints: Vec<String>,
    /// Seconds of the confirming run at half the max rate (0: none).
    #[serde(default = "default_half")]
    pub half_s: f64,
    /// How many times a failing rate is run again before it counts as failed: on a shared VM
    /// one vCPU stall of tens of milliseconds can push a whole 5 s run's p99 over the target.
    #[serde(default = "default_retries")]
    pub retries: usize,
}

fn default_start() -> f64 {
    250.0
}
fn default_ceiling() -> f64 {
    200_000.0
}
fn default_refine() -> usize {
    3
}
fn default_retries() -> usize {
    1
}
fn default_endpoints() -> Vec<String> {
    vec!["predict".into(), "healthz".into()]
}
fn default_half() -> f64 {
    20.0
}

fn positive(key: &str, v: f64) -> anyhow::Result<()> {
    if !(v.is_finite() && v > 0.0) {
        bail!("`{key}` = {v}: must be a number > 0");
    }
    Ok(())
}

/// How a `data.test` path names the directory of the data sets, the environment variable
/// `XMC_DATASETS` (a directory holding `debian-deps/`, `Bibtex/`, ...).
pub const DATASETS_PREFIX: &str = "$XMC_DATASETS/";

impl DataSpec {
    /// Resolves a `data.test` that starts with `$XMC_DATASETS/` against `datasets`, the value of
    /// that variable; other paths stay as they are. Errs with why the data is not there (the
    /// variable unset, or no such file) when the path used the variable, so that the caller can
    /// skip the scenario with that message instead of failing.
    pub fn resolve(&mut self, datasets: Option<&std::ffi::OsStr>) -> Result<(), String> {
        let Some(rest) = self
            .test
            .to_str()
            .and_then(|t| t.strip_prefix(DATASETS_PREFIX))
        else {
            return Ok(());
        };
        let Some(root) = datasets else {
            return Err(format!(
                "`data.test` is {}, and XMC_DATASETS is not set",
                self.test.display()
            ));
        };
        let path = Path::new(root).join(rest);
        if !path.is_file() {
            return Err(format!("{} does not exist", path.display()));
        }
        self.test = path;
        Ok(())
    }
}

impl Scenario {
    /// Reads and validates a scenario file.
    pub fn load(path: &Path) -> anyhow::Result<Scenario> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading scenario {}", path.display()))?;
        Scenario::parse(&text).with_context(|| format!("scenario {}", path.display()))
    }

    /// Parses and validates scenario text.
    pub fn parse(text: &str) -> anyhow::Result<Scenario> {
        let s: Scenario = toml::from_str(text).map_err(|e| anyhow::anyhow!("{e}"))?;
        s.validate()?;
        Ok(s)
    }

    fn validate(&self) -> anyhow::Result<()> {
        if self.data.k == 0 {
            bail!("`data.k` must be at least 1");
        }
        let l = &self.load;
        positive("load.duration_s", l.duration_s)?;
        if !(l.warmup_s.is_finite() && l.warmup_s >= 0.0) {
            bail!("`load.warmup_s` = {}: must be ≥ 0", l.warmup_s);
        }
        if l.timeout_ms == 0 {
            bail!("`load.timeout_ms` must be at least 1");
        }
        if l.max_in_flight == 0 {
            bail!("`load.max_in_flight` must be at least 1");
        }
        if l.senders == 0 {
            bail!("`load.senders` must be at least 1");
        }
        positive("server.startup_timeout_s", self.server.startup_timeout_s)?;
        crate::pin::check("load.cpus", &l.cpus)?;
        crate::pin::check("server.cpus", &self.server.cpus)?;
        for (i, m) in self.models.iter().enumerate() {
            match (&m.bundle, &m.url) {
                (Some(_), Some(_)) => {
                    bail!(
                        "`models[{i}]` ({}): give `bundle` or `url`, not both",
                        m.label
                    )
                }
                (None, None) => bail!(
                    "`models[{i}]` ({}): missing key `bundle` (a model to serve) or `url` \
                     (a running server)",
                    m.label
                ),
                _ => {}
            }
        }
        match self.kind {
            Kind::DepthVsLatency => {
                let d = self.depth_vs_latency.as_ref().context(
                    "missing table `[depth_vs_latency]` (with `rates = [...]`) for kind \
                     `depth-vs-latency`",
                )?;
                if d.rates.is_empty() {
                    bail!("`depth_vs_latency.rates` is empty");
                }
                for (i, &r) in d.rates.iter().enumerate() {
                    positive(&format!("depth_vs_latency.rates[{i}]"), r)?;
                }
                if d.rounds == 0 {
                    bail!("`depth_vs_latency.rounds` must be at least 1");
                }
                if self.models.is_empty() {
                    bail!("missing key `models`: depth-vs-latency needs at least one [[models]]");
                }
            }
            Kind::HotSwap => {
                let h = self.hot_swap.as_ref().context(
                    "missing table `[hot_swap]` (with `bundles`, `swaps`, and `rate` or \
                     `rate_fraction`) for kind `hot-swap`",
                )?;
                match (h.rate, h.rate_fraction) {
                    (Some(r), None) => positive("hot_swap.rate", r)?,
                    (None, Some(f)) => {
                        positive("hot_swap.rate_fraction", f)?;
                        if self.max_rate.is_none() {
                            bail!(
                                "`hot_swap.rate_fraction` needs a `[max_rate]` table (how to \
                                 measure the max rate)"
                            );
                        }
                    }
                    (Some(_), Some(_)) => {
                        bail!("`hot_swap`: give `rate` or `rate_fraction`, not both")
                    }
                    (None, None) => bail!("`hot_swap`: missing key `rate` (or `rate_fraction`)"),
                }
                if h.swaps == 0 {
                    bail!("`hot_swap.swaps` must be at least 1");
                }
                if h.interval_ms == 0 || h.poll_interval_ms == 0 {
                    bail!("`hot_swap.interval_ms` and `hot_swap.poll_interval_ms` must be ≥ 1");
                }
                for (key, v) in [
                    ("hot_swap.before_s", h.before_s),
                    ("hot_swap.after_s", h.after_s),
                ] {
                    if !(v.is_finite() && v >= 0.0) {
                        bail!("`{key}` = {v}: must be a number ≥ 0");
                    }
                }
                if h.before_s + h.after_s <= 0.0 {
                    bail!(
                        "`hot_swap.before_s` and `hot_swap.after_s` are both 0: the swaps need a \
                         baseline without them"
                    );
                }
                if h.force && h.method != SwapMethod::Admin {
                    bail!(
                        "`hot_swap.force` needs `method = \"admin\"`: only the admin route \
                         can force a reload"
                    );
                }
                if let Some(r) = &h.repository {
                    r.check(h)?;
                }
            }
            Kind::MaxRate => {
                if self.max_rate.is_none() {
                    bail!("missing table `[max_rate]` (with `target_p99_ms`) for kind `max-rate`");
                }
                if self.models.is_empty() {
                    bail!("missing key `models`: max-rate needs at least one [[models]]");
                }
            }
        }
        if let Some(m) = &self.max_rate {
            positive("max_rate.target_p99_ms", m.target_p99_ms)?;
            positive("max_rate.start_rate", m.start_rate)?;
            positive("max_rate.ceiling", m.ceiling)?;
            if m.endpoints.is_empty() {
                bail!("`max_rate.endpoints` is empty");
            }
            for e in &m.endpoints {
                if e != "predict" && e != "healthz" {
                    bail!("`max_rate.endpoints`: unknown endpoint {e:?} (predict or healthz)");
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
kind = "depth-vs-latency"
[data]
test = "x.txt"
[[models]]
label = "a"
bundle = "a.xmcb"
[depth_vs_latency]
rates = [100, 200.5]
"#;

    fn err(text: &str) -> String {
        format!("{:#}", Scenario::parse(text).expect_err("an error"))
    }

    #[test]
    fn data_under_xmc_datasets_resolves_or_says_why_not() {
        let dir = std::env::temp_dir().join(format!("xmc-lt-data-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("set")).unwrap();
        std::fs::write(dir.join("set/test.txt"), "1 1 1\n0 0:1\n").unwrap();
        let spec = |t: &str| DataSpec {
            test: PathBuf::from(t),
            k: 5,
            limit: 0,
        };
        let mut d = spec("$XMC_DATASETS/set/test.txt");
        d.resolve(Some(dir.as_os_str())).unwrap();
        assert_eq!(d.test, dir.join("set/test.txt"));
        let e = spec("$XMC_DATASETS/set/test.txt")
            .resolve(None)
            .unwrap_err();
        assert!(e.contains("XMC_DATASETS is not set"), "{e}");
        let e = spec("$XMC_DATASETS/none/test.txt")
            .resolve(Some(dir.as_os_str()))
            .unwrap_err();
        assert!(e.contains("none/test.txt does not exist"), "{e}");
        let mut plain = spec("elsewhere/test.txt");
        plain.resolve(None).unwrap();
        assert_eq!(plain.test, PathBuf::from("elsewhere/test.txt"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn good_file_parses_with_defaults() {
        let s = Scenario::parse(GOOD).expect("valid");
        assert_eq!(s.kind, Kind::DepthVsLatency);
        assert_eq!(s.data.k, 5);
        assert_eq!(s.load.arrivals, Arrivals::Poisson);
        let dvl = s.depth_vs_latency.expect("dvl");
        assert_eq!(dvl.rates, vec![100.0, 200.5]);
        assert_eq!(dvl.rounds, 4);
        let e = err(&GOOD.replace("rates = [100, 200.5]", "rates = [100]\nrounds = 0"));
        assert!(e.contains("depth_vs_latency.rounds"), "{e}");
    }

    #[test]
    fn missing_key_is_named() {
        let e = err(&GOOD.replace("test = \"x.txt\"", ""));
        assert!(e.contains("missing field `test`"), "{e}");
        let e = err(&GOOD.replace("rates = [100, 200.5]", ""));
        assert!(e.contains("missing field `rates`"), "{e}");
        let e = err(&GOOD.replace("bundle = \"a.xmcb\"", ""));
        assert!(e.contains("missing key `bundle`"), "{e}");
        let e = err(&GOOD.replace("[depth_vs_latency]\nrates = [100, 200.5]", ""));
        assert!(e.contains("[depth_vs_latency]"), "{e}");
    }

    #[test]
    fn non_positive_rates_are_refused() {
        let e = err(&GOOD.replace("[100, 200.5]", "[100, 0]"));
        assert!(
            e.contains("depth_vs_latency.rates[1]") && e.contains("> 0"),
            "{e}"
        );
        let e = err(&GOOD.replace("[100, 200.5]", "[-5]"));
        assert!(e.contains("rates[0]` = -5"), "{e}");
        let hs = r#"
kind = "hot-swap"
[data]
test = "x"
[hot_swap]
rate = -1
bundles = ["a", "b"]
swaps = 3
"#;
        let e = err(hs);
        assert!(e.contains("hot_swap.rate") && e.contains("> 0"), "{e}");
    }

    /// A hot-swap scenario with only the required keys.
    const HOT_SWAP: &str = r#"
kind = "hot-swap"
[data]
test = "x"
[hot_swap]
rate = 100
bundles = ["a", "b"]
swaps = 3
"#;

    #[test]
    fn forced_swaps_need_the_admin_route() {
        let hs = &HOT_SWAP.replace("swaps = 3", "swaps = 3\nforce = true");
        let e = err(hs);
        assert!(e.contains("hot_swap.force") && e.contains("admin"), "{e}");
        let s = Scenario::parse(&hs.replace("force = true", "force = true\nmethod = \"admin\""))
            .expect("forced admin swaps parse");
        assert!(s.hot_swap.is_some_and(|h| h.force));
    }

    #[test]
    fn a_repository_swap_names_two_models_and_its_token_only_with_a_url() {
        let repo = "\n[hot_swap.repository]\ndir = \"r\"\nswapped = \"a\"\nloaded = \"b\"\n";
        let s = Scenario::parse(&format!("{HOT_SWAP}{repo}")).expect("parses");
        let r = s.hot_swap.and_then(|h| h.repository).expect("repository");
        assert_eq!((r.swapped.as_str(), r.loaded.as_str()), ("a", "b"));
        let e = err(&format!("{HOT_SWAP}{}", repo.replace("\"b\"", "\"a\"")));
        assert!(e.contains("two different models"), "{e}");
        let e = err(&format!("{HOT_SWAP}{}", repo.replace("\"b\"", "\"b/c\"")));
        assert!(e.contains("hot_swap.repository.loaded"), "{e}");
        let e = err(&format!("{HOT_SWAP}{repo}url = \"http://127.0.0.1:1\"\n"));
        assert!(e.contains("admin_token"), "{e}");
        let e = err(&format!("{HOT_SWAP}{repo}admin_token = \"t\"\n"));
        assert!(e.contains("is for `url`"), "{e}");
        let forced = HOT_SWAP.replace("swaps = 3", "swaps = 3\nforce = true\nmethod = \"admin\"");
        let e = err(&format!("{forced}{repo}"));
        assert!(e.contains("hot_swap.force"), "{e}");
    }

    #[test]
    fn the_baseline_phases_are_checked() {
        let hs = HOT_SWAP;
        let s = Scenario::parse(hs).expect("parses");
        let h = s.hot_swap.expect("hot_swap");
        assert_eq!((h.before_s, h.after_s), (20.0, 0.0));
        let s = Scenario::parse(&hs.replace("swaps = 3", "swaps = 3\nafter_s = 20"))
            .expect("after_s parses");
        assert_eq!(s.hot_swap.map(|h| h.after_s), Some(20.0));
        let e = err(&hs.replace("swaps = 3", "swaps = 3\nafter_s = -1"));
        assert!(e.contains("hot_swap.after_s") && e.contains("≥ 0"), "{e}");
        let e = err(&hs.replace("swaps = 3", "swaps = 3\nbefore_s = nan"));
        assert!(e.contains("hot_swap.before_s"), "{e}");
        let e = err(&hs.replace("swaps = 3", "swaps = 3\nbefore_s = 0"));
        assert!(e.contains("baseline"), "{e}");
        Scenario::parse(&hs.replace("swaps = 3", "swaps = 3\nbefore_s = 0\nafter_s = 5"))
            .expect("a baseline after the swaps alone is enough");
    }

    #[test]
    fn cpus_must_exist_and_differ() {
        let s = Scenario::parse(&GOOD.replace("[data]", "[load]\ncpus = [0]\n[data]"))
            .expect("CPU 0 exists");
        assert_eq!(s.load.cpus, vec![0]);
        assert!(s.server.cpus.is_empty());
        let e = err(&GOOD.replace("[data]", "[server]\ncpus = [4096]\n[data]"));
        assert!(e.contains("server.cpus") && e.contains("4096"), "{e}");
        let e = err(&GOOD.replace("[data]", "[load]\ncpus = [0, 0]\n[data]"));
        assert!(e.contains("load.cpus") && e.contains("twice"), "{e}");
        let e = err(&GOOD.replace("[data]", "[load]\nsenders = 0\n[data]"));
        assert!(e.contains("load.senders"), "{e}");
        let s = Scenario::parse(&GOOD.replace("[data]", "[load]\nsenders = 3\n[data]"))
            .expect("three senders");
        assert_eq!(s.load.senders, 3);
    }

    #[test]
    fn unknown_keys_are_refused() {
        let e = err(&GOOD.replace("[data]", "[data]\ntets = 1"));
        assert!(e.contains("unknown field `tets`"), "{e}");
    }
}
