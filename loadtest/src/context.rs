//! What every scenario shares: the run context ([`Ctx`]), its servers and targets, and the
//! measures taken around each run. The runner ([`crate::runner`]) builds it and hands it to the
//! scenario a file names.

use crate::engine::{self, Cancel, HttpClient, RunResult, RunSpec, Senders, Target};
use crate::queries::Queries;
use crate::scenario::Scenario;
use crate::server::{self, Server};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Everything a scenario run needs.
#[derive(Debug)]
pub struct Ctx {
    /// The scenario.
    pub scenario: Scenario,
    /// The report directory.
    pub out: PathBuf,
    /// The stop flag.
    pub cancel: Cancel,
    /// The HTTP client.
    pub client: HttpClient,
    /// With `load.senders` above 1, the sending threads; else the load is sent from this
    /// runtime with `client`.
    pub senders: Option<Senders>,
}

/// A measured run and what was happening around it.
pub(crate) struct Measured {
    pub(crate) r: RunResult,
    /// The host's steal time over the run, ms.
    pub(crate) steal_ms: Option<f64>,
    /// The server's counters' growth over the run, when this tool started it.
    pub(crate) server: Option<server::ProcTimes>,
}

/// The 1-minute load average, if readable.
pub fn loadavg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

impl Ctx {
    /// One run of `spec` against `target`: from this runtime's thread, or from every sender.
    pub(crate) async fn load(&self, target: &Target, spec: &RunSpec) -> anyhow::Result<RunResult> {
        match &self.senders {
            Some(s) => s.run(target, spec, &self.cancel).await,
            None => Ok(engine::run(&self.client, target, spec, &self.cancel).await),
        }
    }

    pub(crate) fn spec(
        &self,
        rate: f64,
        duration_s: f64,
        keep: bool,
        first_body: usize,
    ) -> RunSpec {
        let l = &self.scenario.load;
        RunSpec {
            rate,
            arrivals: l.arrivals,
            duration: Duration::from_secs_f64(duration_s),
            max_requests: (l.max_requests > 0).then_some(l.max_requests),
            timeout: Duration::from_millis(l.timeout_ms),
            max_in_flight: l.max_in_flight,
            keep_bodies: keep,
            seed: l.seed,
            first_body,
            connections: l.connections,
        }
    }

    /// The unmeasured warm-up before a measured run at `rate` (`load.warmup_s`; none at 0). It
    /// takes its queries from the end of the bodies, and the measured runs from the start.
    pub(crate) async fn warm_up(&self, target: &Target, rate: f64) -> anyhow::Result<()> {
        let l = &self.scenario.load;
        if l.warmup_s > 0.0 {
            let n = target.bodies.len().max(1);
            let warm = ((rate * l.warmup_s) as usize).min(n);
            let mut w = self.spec(rate, l.warmup_s, false, n - warm);
            w.max_requests = None;
            let _ = self.load(target, &w).await?;
        }
        Ok(())
    }

    /// A warm-up (unmeasured) then a measured run at `rate`, with what the host and the
    /// server (process `pid`, when this tool started it) went through over the measured run.
    pub(crate) async fn measure(
        &self,
        target: &Target,
        pid: Option<u32>,
        rate: f64,
    ) -> anyhow::Result<Measured> {
        self.warm_up(target, rate).await?;
        // Every measured run replays the queries from the first, so the rates of one model
        // answer the same queries.
        let spec = self.spec(rate, self.scenario.load.duration_s, false, 0);
        self.run_watched(target, pid, &spec).await
    }

    /// One run of `spec`, with the host's steal time over it (ms, every CPU together; see
    /// [`server::host_steal_s`]) and the growth of the server's counters (process `pid`).
    pub(crate) async fn run_watched(
        &self,
        target: &Target,
        pid: Option<u32>,
        spec: &RunSpec,
    ) -> anyhow::Result<Measured> {
        let mut sampler = pid.map(server::ProcSampler::new);
        let server_before = sampler.as_mut().and_then(server::ProcSampler::read);
        let before = server::host_steal_s();
        let r = self.load(target, spec).await?;
        let steal_ms = server::host_steal_s()
            .zip(before)
            .map(|(after, before)| (after - before) * 1e3);
        let server = sampler
            .as_mut()
            .and_then(server::ProcSampler::read)
            .zip(server_before)
            .map(|(after, before)| after.since(&before));
        Ok(Measured {
            r,
            steal_ms,
            server,
        })
    }

    /// The server of one `[[models]]` entry: started on its bundle, or found at its URL. A
    /// started one logs to `serve-{label}{phase}.log`.
    pub(crate) async fn model_server(
        &self,
        m: &crate::scenario::ModelSpec,
        phase: &str,
    ) -> anyhow::Result<Server> {
        self.server_for(
            m.bundle.as_deref(),
            m.url.as_deref(),
            &format!("{}{phase}", safe_tag(&m.label)),
            &[],
        )
        .await
    }

    pub(crate) async fn server_for(
        &self,
        bundle: Option<&Path>,
        url: Option<&str>,
        tag: &str,
        env: &[(String, String)],
    ) -> anyhow::Result<Server> {
        match (bundle, url) {
            (_, Some(u)) => Server::existing(&self.client, u).await,
            (Some(b), None) => {
                let mut all: Vec<(String, String)> = self
                    .scenario
                    .server
                    .env
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                all.extend(env.iter().cloned());
                let server = Server::start(
                    &self.client,
                    &self.scenario.server.xmc,
                    b,
                    &all,
                    &self.out.join(format!("serve-{tag}.log")),
                    Duration::from_secs_f64(self.scenario.server.startup_timeout_s),
                )
                .await?;
                // A started server inherits the generator's CPUs; it gets its own, or all of them.
                let (load, cpus) = (&self.scenario.load.cpus, &self.scenario.server.cpus);
                if let Some(pid) = server.pid()
                    && !(load.is_empty() && cpus.is_empty())
                {
                    let cpus = if cpus.is_empty() {
                        crate::pin::allowed()
                    } else {
                        cpus
                    };
                    crate::pin::pin_process(pid, cpus)?;
                }
                Ok(server)
            }
            (None, None) => anyhow::bail!("no bundle or url for {tag}"),
        }
    }
}

/// The `/v1/predict` target of the server at `base`, sending the queries' bodies.
pub(crate) fn predict_target(base: &str, q: &Queries) -> anyhow::Result<Target> {
    Ok(Target {
        uri: server::uri(base, "/v1/predict")?,
        bodies: Arc::new(q.bodies.clone()),
    })
}

/// The `/healthz` target of the server at `base`.
pub(crate) fn health_target(base: &str) -> anyhow::Result<Target> {
    Ok(Target {
        uri: server::uri(base, "/healthz")?,
        bodies: Arc::new(Vec::new()),
    })
}

fn safe_tag(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}
