//! `xmc serve` as a process, as an operator runs it: the README's command on the shipped default
//! model answers the README's request and drains on SIGTERM, and a server that runs out of file
//! descriptors backs off, keeps what it serves and takes connections again once some close.
//! (`tests/service/serve_api.rs` drives the router itself, without sockets.)
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)]

use rustix::process::{Pid, Resource, Rlimit, Signal, kill_process, prlimit};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A started `xmc serve`: its process, the address it bound and its log so far.
struct Server {
    child: Child,
    addr: SocketAddr,
    log: Arc<Mutex<String>>,
    /// The thread that copies the process's stderr into `log`; it ends at the pipe's end.
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// The README's command (`xmc serve --config config/server.toml`) on a free port: the
    /// shipped default model, every other setting from the shipped configuration.
    fn start() -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_xmc"))
            .args(["serve", "--config", "config/server.toml"])
            .args(["--bind", "127.0.0.1:0"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("XMC_LOG", "info")
            .env("XMC_LOG_FORMAT", "text")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        let sink = Arc::clone(&log);
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addr) = field(&line, " serving addr=").and_then(|a| a.parse().ok()) {
                    let _ = addr_tx.send(addr);
                }
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        match addr_rx.recv_timeout(Duration::from_secs(60)) {
            Ok(addr) => Server {
                child,
                addr,
                log,
                reader: Some(reader),
            },
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "no \"serving\" line with an address in 60 s; log:\n{}",
                    log.lock().unwrap()
                );
            }
        }
    }

    fn pid(&self) -> Pid {
        Pid::from_child(&self.child)
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Sends one request on a connection of its own and reads the whole answer: its status and
    /// body. `None` when the server cannot be reached or answers nothing.
    fn request(&self, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
        let mut s = TcpStream::connect_timeout(&self.addr, Duration::from_secs(5)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        let head = format!(
            "{method} {path} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n",
            self.addr,
            body.len()
        );
        s.write_all(head.as_bytes()).ok()?;
        s.write_all(body.as_bytes()).ok()?;
        let mut answer = String::new();
        s.read_to_string(&mut answer).ok()?;
        let status = answer.split(' ').nth(1)?.parse().ok()?;
        let (_, body) = answer.split_once("\r\n\r\n")?;
        Some((status, body.to_string()))
    }

    /// Sends `signal` and checks that the server logs its drain and exits with success.
    fn signal_and_expect_a_drain(&mut self, signal: Signal) {
        kill_process(self.pid(), signal).unwrap();
        let status = self
            .wait_exit(Duration::from_secs(20))
            .expect("exit after the signal");
        // The process has exited, but its last lines may still be in the pipe.
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        let log = self.log();
        assert!(status.success(), "{signal:?}: {status:?}\n{log}");
        assert!(
            log.contains("shutting down: draining in-flight requests"),
            "{log}"
        );
    }

    /// Waits up to `limit` for the process to exit.
    fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of `key` (e.g. `addr=`) in a text log line, up to the next space.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let rest = &line[line.find(key)? + key.len()..];
    rest.split_whitespace().next()
}

/// The README's curl request, with its answer's labels and their names.
fn readme_predict(server: &Server) -> Option<(Vec<u64>, Vec<String>)> {
    let (status, body) = server.request(
        "POST",
        "/v1/predict",
        r#"{"text":"GTK+ image viewer written in Python","k":5}"#,
    )?;
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let labels = v["labels"]
        .as_array()?
        .iter()
        .map(|l| l.as_u64().unwrap())
        .collect();
    let names = v["names"]
        .as_array()?
        .iter()
        .map(|n| n.as_str().unwrap().to_owned())
        .collect();
    Some((labels, names))
}

/// A counter's value in a Prometheus text page, when it is there.
fn counter(page: &str, name: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

#[test]
fn the_readme_command_serves_the_default_model_and_drains_on_sigterm() {
    let mut server = Server::start();
    let (labels, names) = readme_predict(&server).expect("an answer");
    // Five distinct labels of the default model (debtags: 502 of them), each with its name.
    assert_eq!(labels.len(), 5, "{labels:?}");
    assert!(labels.iter().all(|&l| l < 502), "{labels:?}");
    let mut distinct = labels.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 5, "{labels:?}");
    // The README's query names a GTK image viewer written in Python; debtags are `facet::value`.
    assert_eq!(names.len(), 5, "{names:?}");
    assert!(names.iter().all(|n| n.contains("::")), "{names:?}");
    assert!(names.iter().any(|n| n == "uitoolkit::gtk"), "{names:?}");
    let (status, body) = server.request("GET", "/v1/model", "").unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("debian-tags-text-default"), "{body}");

    server.signal_and_expect_a_drain(Signal::TERM);
    assert!(TcpStream::connect_timeout(&server.addr, Duration::from_secs(1)).is_err());
}

/// A supervisor may stop a server the moment it says it is serving: the handlers for SIGTERM
/// and SIGINT are in place before the "serving" line, so the signal drains instead of taking
/// its default action (which kills the process with nothing logged). CI once caught the server
/// between the two.
#[test]
fn sigterm_as_soon_as_the_serving_line_is_out_still_drains() {
    for signal in [Signal::TERM, Signal::INT, Signal::TERM] {
        Server::start().signal_and_expect_a_drain(signal);
    }
}

#[test]
fn out_of_file_descriptors_the_server_backs_off_and_takes_connections_again() {
    let server = Server::start();
    assert!(readme_predict(&server).is_some());
    // Leave the server room for four more descriptors: an accepted connection takes one.
    let open = std::fs::read_dir(format!("/proc/{}/fd", server.child.id()))
        .unwrap()
        .count() as u64;
    let room = open + 4;
    let limit = Rlimit {
        current: Some(room),
        maximum: Some(room),
    };
    prlimit(Some(server.pid()), Resource::Nofile, limit).unwrap();
    // More connections than it has room for: the kernel completes each one, and the server
    // accepts until its descriptors run out.
    let clients: Vec<TcpStream> = (0..12)
        .map(|_| TcpStream::connect_timeout(&server.addr, Duration::from_secs(5)).unwrap())
        .collect();
    let failed = "accepting a connection failed";
    let deadline = Instant::now() + Duration::from_secs(10);
    while !server.log().contains(failed) {
        assert!(
            Instant::now() < deadline,
            "no accept error:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Out of descriptors for 2.5 s: the loop backs off 1 s after each failure instead of
    // retrying at once (which would fail thousands of times in that span).
    std::thread::sleep(Duration::from_millis(2500));
    let failures = server.log().matches(failed).count();
    assert!((1..=5).contains(&failures), "{failures} accept failures");
    // Closing the clients frees the server's descriptors; after its back-off it takes the
    // connections waiting for it, and new ones, and answers as before.
    drop(clients);
    let deadline = Instant::now() + Duration::from_secs(15);
    let labels = loop {
        if let Some((labels, _)) = readme_predict(&server) {
            break labels;
        }
        assert!(
            Instant::now() < deadline,
            "no answer after the clients closed"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(labels.len(), 5);
    let (status, page) = server.request("GET", "/metrics", "").unwrap();
    assert_eq!(status, 200);
    // Every failure counted, those logged after the count above included.
    let errors = counter(&page, "xmc_accept_errors_total").expect("the counter");
    assert!(
        errors >= failures as f64,
        "{errors} counted, {failures} logged"
    );
}
