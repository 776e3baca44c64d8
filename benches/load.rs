//! Load generator for `dljob serve` (issue: evidence, point 2). Figures go in
//! BENCHMARKS.md.
//!
//! ```text
//! cargo build --release
//! cargo bench --bench load -- [--connections 16] [--duration 10] [--rate 5000]
//!                             [--runs 3] [--proto h1|h2] [--max-requests 1000000]
//! cargo bench --bench load -- --idle-connections 10000 [--server-arg ARG]...
//! cargo bench --bench load -- --attack [--rate 200] [--duration 10] [--runs 3]
//! cargo bench --bench load -- --hostage [--rate 200] [--duration 10] [--runs 3] [--only NAME]...
//! ```
//!
//! The third form (attack mode) times ordinary reviews while an attacker
//! holds every other connection the server allows; see [`attack_run`].
//! The fourth (hostage mode) does so under each attack of
//! `benches/common/hostage.rs` alone, with its worst parameters; see
//! [`hostage_run`].
//!
//! The second form (idle mode) opens that many TLS connections that
//! complete the handshake and send nothing (half of them the HTTP/2
//! preface and SETTINGS, then nothing), and reports how many the
//! server kept open (`--max-connections`), its RSS with them open and when
//! it closed them (`--first-request-timeout-secs`).
//!
//! Each run starts the release binary (`target/release/dljob serve
//! --no-reconciler`, or `--server PATH`) as a child process on a free
//! 127.0.0.1 port with a self-signed certificate, opens N keep-alive TLS
//! connections to it and, on the same connections and the same server:
//!
//! 1. `GET /healthz` closed loop (the HTTP + TLS floor);
//! 2. `POST /mutate` closed loop with the captured Pod reviews from
//!    `tests/fixtures/admission/mutate-create-pod-*.json`;
//! 3. `POST /validate` closed loop with the `validate-create-pod-*.json` ones;
//! 4. `POST /mutate` open loop at a fixed rate (default 5 000/s); latency is
//!    taken from each request's *scheduled* send time whenever the request
//!    goes out late because the previous answer on its connection was late,
//!    so a stalled server cannot hide its queue (no coordinated omission);
//!    when the request is early it waits for its slot and the clock starts
//!    at the actual send (tokio's timer can fire up to ~1 ms late: client
//!    lag, not server latency).
//!
//! Every request carries a fresh uid; every response must be a 200 whose
//! AdmissionReview echoes that uid with the `allowed` value the fixture got
//! when checked (parsed in full) before the run. The server's RSS is read
//! from /proc (VmRSS idle before and after the load, the peak while loaded,
//! VmHWM) and its CPU time from /proc/PID/stat.
//!
//! Bounded: each phase stops at `--duration` seconds (at most 20) or
//! `--max-requests` requests, each request at 5 s; only 127.0.0.1 is used;
//! the server is killed at the end (and if this process panics). Under
//! `cargo test --benches` (no `--bench` argument) it does nothing.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::{http1, http2};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/admission");
const MAX_DURATION: Duration = Duration::from_secs(20);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
const UID_MARK: &str = "@@UID@@";

// ------------------------------------------------------------------ options

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proto {
    H1,
    H2,
}

#[derive(Clone, Debug)]
struct Options {
    connections: usize,
    duration: Duration,
    rate: u64,
    runs: usize,
    proto: Proto,
    max_requests: u64,
    server: PathBuf,
    log: Option<PathBuf>,
    /// Idle mode: open this many TLS connections that send nothing.
    idle_connections: Option<usize>,
    /// Extra arguments for `dljob serve` (e.g. `--max-connections 10000`).
    server_args: Vec<String>,
    /// Attack mode.
    attack: bool,
    /// Hostage mode: each attack of `benches/common/hostage.rs` alone.
    hostage: bool,
    /// Hostage mode: only the attacks whose names contain one of these.
    only: Vec<String>,
    /// The server's tokio worker threads (TOKIO_WORKER_THREADS), if set.
    workers: Option<usize>,
}

fn parse_options(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        connections: 16,
        duration: Duration::from_secs(10),
        rate: 5000,
        runs: 3,
        proto: Proto::H1,
        max_requests: 1_000_000,
        server: Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/dljob"),
        log: None,
        idle_connections: None,
        server_args: Vec::new(),
        attack: false,
        hostage: false,
        only: Vec::new(),
        workers: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().cloned().ok_or(format!("{a} needs a value"));
        let num = |v: String| v.parse::<u64>().map_err(|e| format!("{a} {v}: {e}"));
        match a.as_str() {
            "--bench" => {}
            "--connections" => o.connections = num(value()?)?.clamp(1, 512) as usize,
            "--duration" => {
                o.duration = Duration::from_secs_f64(
                    value()?.parse::<f64>().map_err(|e| format!("{a}: {e}"))?,
                )
                .min(MAX_DURATION)
            }
            "--rate" => o.rate = num(value()?)?.clamp(1, 200_000),
            "--runs" => o.runs = num(value()?)?.clamp(1, 10) as usize,
            "--max-requests" => o.max_requests = num(value()?)?.max(1),
            "--proto" => {
                o.proto = match value()?.as_str() {
                    "h1" => Proto::H1,
                    "h2" => Proto::H2,
                    other => return Err(format!("--proto {other}: h1 or h2")),
                }
            }
            "--server" => o.server = PathBuf::from(value()?),
            "--log" => o.log = Some(PathBuf::from(value()?)),
            "--idle-connections" => {
                o.idle_connections = Some(num(value()?)?.clamp(1, 50_000) as usize)
            }
            "--server-arg" => o.server_args.push(value()?),
            "--attack" => o.attack = true,
            "--hostage" => o.hostage = true,
            "--only" => o.only.push(value()?),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(o)
}

// ----------------------------------------------------------------- reviews

/// A captured review with its uid cut out: `head + uid + tail` is the body.
struct Template {
    name: String,
    head: String,
    tail: String,
    allowed: bool,
}

impl Template {
    fn body(&self, uid: &str) -> Bytes {
        let mut s = String::with_capacity(self.head.len() + uid.len() + self.tail.len());
        s.push_str(&self.head);
        s.push_str(uid);
        s.push_str(&self.tail);
        Bytes::from(s)
    }
}

fn templates(prefix: &str) -> Vec<Template> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(FIXTURES)
        .unwrap_or_else(|e| panic!("reading {FIXTURES}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix) && n.ends_with(".json"))
        })
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no {prefix}*.json in {FIXTURES}");
    paths
        .iter()
        .map(|p| {
            let mut v: Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
            v["request"]["uid"] = Value::String(UID_MARK.into());
            // Compact, as the API server sends it.
            let text = v.to_string();
            let (head, tail) = text.split_once(UID_MARK).expect("one uid");
            assert!(!tail.contains(UID_MARK));
            Template {
                name: p.file_name().unwrap().to_string_lossy().into_owned(),
                head: head.to_owned(),
                tail: tail.to_owned(),
                allowed: true, // set by `check_templates`
            }
        })
        .collect()
}

/// The response check done on every request: the compact AdmissionReview
/// the server writes holds `"uid":"<uid>"` and `"allowed":<bool>` exactly
/// once each (verified against a full parse in `check_templates`).
fn response_ok(body: &[u8], uid: &str, allowed: bool) -> bool {
    let mut want = String::with_capacity(uid.len() + 10);
    let _ = write!(want, "\"uid\":\"{uid}\"");
    let allowed_field: &[u8] = if allowed {
        b"\"allowed\":true"
    } else {
        b"\"allowed\":false"
    };
    contains(body, want.as_bytes()) && contains(body, allowed_field)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

// --------------------------------------------------------------- the server

struct ServerProcess {
    child: Child,
    addr: SocketAddr,
    ca_pem: String,
    dir: PathBuf,
}

impl ServerProcess {
    fn start(o: &Options, run: usize) -> Self {
        assert!(
            o.server.exists(),
            "{} is missing: run `cargo build --release` first (or pass --server PATH)",
            o.server.display()
        );
        let dir = std::env::temp_dir().join(format!("dljob-load-{}-{run}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("ca.pem");
        let addr = child::free_addr();
        let log_path = o.log.clone().unwrap_or_else(|| dir.join("server.log"));
        let log = std::fs::File::create(&log_path).unwrap();
        let child = Command::new(&o.server)
            .arg("serve")
            .arg("--listen")
            .arg(addr.to_string())
            .arg("--self-signed-ca-out")
            .arg(&ca)
            .arg("--no-reconciler")
            .args(&o.server_args)
            .env_remove("RUST_LOG")
            .env_remove("DLJOB_CONFIG")
            .env_remove("DLJOB_TLS_CERT")
            .env_remove("DLJOB_TLS_KEY")
            .envs(o.workers.map(|w| ("TOKIO_WORKER_THREADS", w.to_string())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", o.server.display()));
        let mut server = Self {
            child,
            addr,
            ca_pem: String::new(),
            dir,
        };
        server.ca_pem = child::wait_listening(
            &mut server.child,
            &ca,
            addr,
            Duration::from_secs(15),
            || std::fs::read_to_string(&log_path).unwrap_or_default(),
        );
        server
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// (VmRSS, VmHWM) in KiB.
    fn memory(&self) -> (u64, u64) {
        child::memory(self.pid()).expect("/proc/PID/status (Linux only)")
    }

    /// User + system CPU time the server has used.
    fn cpu(&self) -> Duration {
        Duration::from_secs_f64(
            child::cpu_seconds(self.pid()).expect("/proc/PID/stat (Linux only)"),
        )
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// ------------------------------------------------------------------ client

enum Sender {
    H1(http1::SendRequest<Full<Bytes>>),
    H2(http2::SendRequest<Full<Bytes>>),
}

/// A client trusting the server's CA, offering `proto`.
fn tls_connector(ca_pem: &str, proto: Proto) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![match proto {
        Proto::H1 => b"http/1.1".to_vec(),
        Proto::H2 => b"h2".to_vec(),
    }];
    TlsConnector::from(Arc::new(config))
}

async fn connect(addr: SocketAddr, ca_pem: &str, proto: Proto) -> Sender {
    let tcp = TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let tls = tls_connector(ca_pem, proto)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let io = TokioIo::new(tls);
    match proto {
        Proto::H1 => {
            let (s, conn) = http1::handshake(io).await.unwrap();
            tokio::spawn(conn);
            Sender::H1(s)
        }
        Proto::H2 => {
            let (s, conn) = http2::handshake(TokioExecutor::new(), io).await.unwrap();
            tokio::spawn(conn);
            Sender::H2(s)
        }
    }
}

impl Sender {
    fn is_closed(&self) -> bool {
        match self {
            Sender::H1(s) => s.is_closed(),
            Sender::H2(s) => s.is_closed(),
        }
    }

    async fn send(&mut self, req: Request<Full<Bytes>>) -> Result<(StatusCode, Bytes), String> {
        let resp = match self {
            Sender::H1(s) => {
                s.ready().await.map_err(|e| e.to_string())?;
                s.send_request(req).await
            }
            Sender::H2(s) => {
                s.ready().await.map_err(|e| e.to_string())?;
                s.send_request(req).await
            }
        }
        .map_err(|e| e.to_string())?;
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((status, body))
    }
}

/// What one phase asks for.
#[derive(Clone, Copy)]
enum Work {
    Healthz,
    Review(&'static str),
}

/// Counters and a latency histogram (ns) for one phase.
struct Tally {
    ok: u64,
    failed: u64,
    first_failure: Option<String>,
    latency: Histogram<u64>,
}

impl Tally {
    fn new() -> Self {
        Self {
            ok: 0,
            failed: 0,
            first_failure: None,
            latency: Histogram::new_with_bounds(1_000, 60_000_000_000, 3).unwrap(),
        }
    }
    fn add(&mut self, other: Tally) {
        self.ok += other.ok;
        self.failed += other.failed;
        if self.first_failure.is_none() {
            self.first_failure = other.first_failure;
        }
        self.latency.add(other.latency).unwrap();
    }
    fn fail(&mut self, why: String) {
        self.failed += 1;
        self.first_failure.get_or_insert(why);
    }
}

/// Sends one request and checks the answer.
async fn one(
    sender: &mut Sender,
    work: Work,
    templates: &[Template],
    seq: u64,
    uid_prefix: &str,
) -> Result<(), String> {
    let (req, expect) = match work {
        Work::Healthz => (
            Request::get("/healthz")
                .header("host", "localhost")
                .body(Full::new(Bytes::new()))
                .unwrap(),
            None,
        ),
        Work::Review(path) => {
            let t = &templates[seq as usize % templates.len()];
            let uid = format!("{uid_prefix}-{seq:012}");
            let req = Request::builder()
                .method(Method::POST)
                .uri(path)
                .header("host", "localhost")
                .header("content-type", "application/json")
                .body(Full::new(t.body(&uid)))
                .unwrap();
            (req, Some((uid, t)))
        }
    };
    let (status, body) = tokio::time::timeout(REQUEST_TIMEOUT, sender.send(req))
        .await
        .map_err(|_| "no answer within 5 s".to_string())??;
    if status != StatusCode::OK {
        return Err(format!("HTTP {status}: {}", String::from_utf8_lossy(&body)));
    }
    match expect {
        None if body.as_ref() == b"ok\n" => Ok(()),
        None => Err(format!("/healthz said {body:?}")),
        Some((uid, t)) if response_ok(&body, &uid, t.allowed) => Ok(()),
        Some((uid, t)) => Err(format!(
            "{}: response does not echo uid {uid} with allowed={}: {}",
            t.name,
            t.allowed,
            String::from_utf8_lossy(&body)
        )),
    }
}

/// The outcome of one phase.
struct Phase {
    tally: Tally,
    elapsed: Duration,
    server_cpu: Duration,
    peak_rss_kib: u64,
}

impl Phase {
    fn throughput(&self) -> f64 {
        self.tally.ok as f64 / self.elapsed.as_secs_f64()
    }
    fn cpu_us_per_request(&self) -> f64 {
        self.server_cpu.as_secs_f64() * 1e6 / self.tally.ok.max(1) as f64
    }
    fn pct_ms(&self, q: f64) -> f64 {
        self.tally.latency.value_at_quantile(q) as f64 / 1e6
    }
}

/// Samples the server's RSS every 50 ms while a phase runs.
fn rss_sampler(
    pid: u32,
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
                if let Some(kib) = s
                    .lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                {
                    peak.fetch_max(kib, Ordering::Relaxed);
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    })
}

/// Runs one phase on `senders`: closed loop (`rate` None: each connection
/// sends its next request when the previous answer is in) or open loop at
/// `rate` requests/s spread over the connections, latency measured from
/// the scheduled send time.
async fn phase(
    server: &ServerProcess,
    senders: &mut Vec<Sender>,
    work: Work,
    templates: &Arc<Vec<Template>>,
    rate: Option<u64>,
    o: &Options,
    tag: &str,
) -> (Phase, Vec<Sender>) {
    let n = senders.len() as u64;
    let duration = o.duration;
    let cap = o.max_requests;
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(0));
    let sampler = rss_sampler(server.pid(), stop.clone(), peak.clone());
    let cpu0 = server.cpu();
    let start = Instant::now();
    let issued = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    let (addr, ca_pem, proto) = (server.addr, server.ca_pem.clone(), o.proto);
    for (k, mut sender) in senders.drain(..).enumerate() {
        let templates = templates.clone();
        let issued = issued.clone();
        let ca_pem = ca_pem.clone();
        let uid_prefix = format!("{tag}-c{k:03}");
        tasks.push(tokio::spawn(async move {
            let mut tally = Tally::new();
            let end = start + duration;
            let mut j: u64 = 0;
            loop {
                // `from`: where this request's latency is measured from.
                let (from, seq) = match rate {
                    None => (Instant::now(), j),
                    Some(r) => {
                        // This connection's share of the global schedule.
                        let i = k as u64 + j * n;
                        let at = start + Duration::from_nanos(i * 1_000_000_000 / r);
                        if at >= end {
                            break;
                        }
                        if Instant::now() >= at {
                            // Late because the previous answer on this
                            // connection was: the wait is the server's.
                            (at, i)
                        } else {
                            // Early: wait for the slot. tokio's timer fires
                            // up to ~1 ms late; that lag is the client's, so
                            // the clock starts at the actual send.
                            tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
                            (Instant::now(), i)
                        }
                    }
                };
                if from >= end || issued.fetch_add(1, Ordering::Relaxed) >= cap {
                    break;
                }
                if let Some(r) = rate {
                    // Far behind its schedule (the server holds its
                    // answers): what is left of it counts as failed.
                    if Instant::now() >= end + REQUEST_TIMEOUT {
                        let left = (duration.as_nanos() as u64 * r / 1_000_000_000)
                            .saturating_sub(seq)
                            / n;
                        for _ in 0..left.max(1) {
                            tally.fail("not sent: the phase ran 5 s past its end".into());
                        }
                        break;
                    }
                }
                match one(&mut sender, work, &templates, seq, &uid_prefix).await {
                    Ok(()) => {
                        tally.ok += 1;
                        let ns = from.elapsed().as_nanos() as u64;
                        tally.latency.saturating_record(ns.max(1_000));
                    }
                    Err(why) => {
                        tally.fail(why);
                        // A connection the server closed is opened again
                        // for the next request, as the API server's client
                        // does.
                        if sender.is_closed() {
                            if let Ok(Ok(s)) = tokio::time::timeout(
                                REQUEST_TIMEOUT,
                                tokio::spawn({
                                    let ca_pem = ca_pem.clone();
                                    async move { connect(addr, &ca_pem, proto).await }
                                }),
                            )
                            .await
                            {
                                sender = s;
                            }
                        }
                    }
                }
                j += 1;
            }
            (tally, sender)
        }));
    }
    let mut tally = Tally::new();
    let mut back = Vec::new();
    for t in tasks {
        let (t, sender) = t.await.unwrap();
        tally.add(t);
        back.push(sender);
    }
    let elapsed = start.elapsed();
    let server_cpu = server.cpu().saturating_sub(cpu0);
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let phase = Phase {
        tally,
        elapsed,
        server_cpu,
        peak_rss_kib: peak.load(Ordering::Relaxed),
    };
    (phase, back)
}

/// Checks every template once, parsing the response in full, and records
/// whether the fixture is allowed.
async fn check_templates(sender: &mut Sender, path: &'static str, templates: &mut [Template]) {
    for (i, t) in templates.iter_mut().enumerate() {
        let uid = format!("check-{i}");
        let req = Request::post(path)
            .header("host", "localhost")
            .header("content-type", "application/json")
            .body(Full::new(t.body(&uid)))
            .unwrap();
        let (status, body) = sender.send(req).await.unwrap();
        assert_eq!(status, StatusCode::OK, "{}: {body:?}", t.name);
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["apiVersion"], "admission.k8s.io/v1", "{}", t.name);
        assert_eq!(v["kind"], "AdmissionReview", "{}", t.name);
        assert_eq!(v["response"]["uid"], uid.as_str(), "{}", t.name);
        t.allowed = v["response"]["allowed"].as_bool().expect("allowed");
        assert!(
            response_ok(&body, &uid, t.allowed),
            "{}: the fast check disagrees with the parse: {}",
            t.name,
            String::from_utf8_lossy(&body)
        );
        let patch = v["response"]["patch"].as_str().map_or(0, str::len);
        let warnings = v["response"]["warnings"].as_array().map_or(0, Vec::len);
        if std::env::var_os("DLJOB_LOAD_VERBOSE").is_some() {
            println!(
                "  {path} {}: {} B in, allowed={}, patch {patch} B (base64), {warnings} warning(s)",
                t.name,
                t.body(&uid).len(),
                t.allowed
            );
        }
    }
}

// --------------------------------------------------------------------- run

struct RunResult {
    idle_rss_start: u64,
    idle_rss_end: u64,
    hwm: u64,
    healthz: Phase,
    mutate: Phase,
    validate: Phase,
    fixed: Phase,
}

async fn run_once(o: &Options, run: usize) -> RunResult {
    let server = ServerProcess::start(o, run);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (idle_rss_start, _) = server.memory();

    let mut mutate_t = templates("mutate-create-pod-");
    let mut validate_t = templates("validate-create-pod-");
    let mut senders = Vec::new();
    for _ in 0..o.connections {
        senders.push(connect(server.addr, &server.ca_pem, o.proto).await);
    }
    check_templates(&mut senders[0], "/mutate", &mut mutate_t).await;
    check_templates(&mut senders[0], "/validate", &mut validate_t).await;
    let mutate_t = Arc::new(mutate_t);
    let validate_t = Arc::new(validate_t);

    // Warm-up (not counted): 1 s of mutate, closed loop.
    let warm = Options {
        duration: Duration::from_secs(1),
        ..o.clone()
    };
    let (_, s) = phase(
        &server,
        &mut senders,
        Work::Review("/mutate"),
        &mutate_t,
        None,
        &warm,
        "warm",
    )
    .await;
    senders = s;

    let tag = format!("r{run}");
    let (healthz, s) = phase(
        &server,
        &mut senders,
        Work::Healthz,
        &mutate_t,
        None,
        o,
        &tag,
    )
    .await;
    senders = s;
    let (mutate, s) = phase(
        &server,
        &mut senders,
        Work::Review("/mutate"),
        &mutate_t,
        None,
        o,
        &format!("{tag}m"),
    )
    .await;
    senders = s;
    let (validate, s) = phase(
        &server,
        &mut senders,
        Work::Review("/validate"),
        &validate_t,
        None,
        o,
        &format!("{tag}v"),
    )
    .await;
    senders = s;
    let (fixed, s) = phase(
        &server,
        &mut senders,
        Work::Review("/mutate"),
        &mutate_t,
        Some(o.rate),
        o,
        &format!("{tag}f"),
    )
    .await;
    drop(s);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (idle_rss_end, hwm) = server.memory();
    drop(server);
    RunResult {
        idle_rss_start,
        idle_rss_end,
        hwm,
        healthz,
        mutate,
        validate,
        fixed,
    }
}

// ------------------------------------------------------------- idle mode

/// Raises this process's open-file limit to its hard limit (the server,
/// started after, inherits it): each side holds one descriptor per
/// connection.
#[allow(unsafe_code, reason = "getrlimit/setrlimit are C functions")]
fn raise_fd_limit() -> u64 {
    // SAFETY: getrlimit/setrlimit on a local struct.
    unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
        lim.rlim_cur
    }
}

/// `--idle-connections N`: opens N TLS connections (half HTTP/1.1, half
/// h2 by ALPN) that complete the handshake and never send a request, and
/// reports how many the server kept, its RSS with them open, and when it
/// closed them.
async fn idle_run(o: &Options, n: usize, run: usize) {
    let server = ServerProcess::start(o, run);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (rss_before, _) = server.memory();
    let connectors = [
        tls_connector(&server.ca_pem, Proto::H1),
        tls_connector(&server.ca_pem, Proto::H2),
    ];
    let opened = Instant::now();
    let closed_at: Arc<std::sync::Mutex<Vec<Duration>>> = Arc::default();
    let handshakes = Arc::new(AtomicU64::new(0));
    // 200 handshakes at a time; every connection then waits for the
    // server to close it (or for this run to end).
    let gate = Arc::new(tokio::sync::Semaphore::new(200));
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let connector = connectors[i % 2].clone();
        let (addr, gate) = (server.addr, gate.clone());
        let (closed_at, handshakes) = (closed_at.clone(), handshakes.clone());
        tasks.push(tokio::spawn(async move {
            let permit = gate.acquire_owned().await.unwrap();
            let Ok(tcp) = TcpStream::connect(addr).await else {
                return;
            };
            let tls = connector
                .connect(ServerName::try_from("localhost").unwrap(), tcp)
                .await;
            drop(permit);
            let Ok(mut tls) = tls else {
                return; // closed at once: past the server's limit
            };
            handshakes.fetch_add(1, Ordering::Relaxed);
            if i % 2 == 1 {
                // HTTP/2: the client preface and empty SETTINGS, so that
                // the server holds an HTTP/2 connection (its windows and
                // tables), then nothing.
                let mut preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
                preface.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
                let _ = tokio::io::AsyncWriteExt::write_all(&mut tls, &preface).await;
            }
            let mut buf = [0u8; 16];
            let _ = tokio::time::timeout(
                Duration::from_secs(60),
                tokio::io::AsyncReadExt::read(&mut tls, &mut buf),
            )
            .await;
            closed_at.lock().unwrap().push(opened.elapsed());
        }));
    }
    // Every handshake done (or refused).
    while gate.available_permits() < 200 || handshakes.load(Ordering::Relaxed) == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        if opened.elapsed() > Duration::from_secs(30) {
            break;
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let setup = opened.elapsed();
    let kept = handshakes.load(Ordering::Relaxed);
    let (rss_open, _) = server.memory();
    let still_open = kept - closed_at.lock().unwrap().len() as u64;
    for t in tasks {
        let _ = t.await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (rss_after, hwm) = server.memory();
    let closed = closed_at.lock().unwrap();
    let last = closed.iter().max().copied().unwrap_or_default();
    println!(
        "run {}: {n} connections attempted, {kept} completed the TLS handshake ({} closed at once), {still_open} open {:.1} s after the first; server RSS {:.1} MiB before, {:.1} MiB with them open, {:.1} MiB after they closed (VmHWM {:.1} MiB); the last was closed {:.1} s after the first was opened",
        run + 1,
        n as u64 - kept,
        setup.as_secs_f64(),
        rss_before as f64 / 1024.0,
        rss_open as f64 / 1024.0,
        rss_after as f64 / 1024.0,
        hwm as f64 / 1024.0,
        last.as_secs_f64(),
    );
}

// ----------------------------------------------------------- attack mode

#[path = "common/attacks.rs"]
mod attacks;
#[path = "common/child.rs"]
mod child;

/// How many connections the server allows (its default
/// `--max-connections`): the attacker takes every one the ordinary
/// client does not hold.
const CONNECTION_CAP: usize = 192;
/// The ordinary client's connections (HTTP/2, as the API server's).
const ORDINARY: usize = 4;
const CPU_ATTACKERS: usize = 16;
const NON_READERS: usize = 16;
const SLOW_BODIES: usize = 100;
const JUNK: usize = 8;
/// An attacker reconnects after a refusal or a close this much later, not
/// in a tight loop.
const RECONNECT_PAUSE: Duration = Duration::from_millis(200);

/// What the attacker got the server to do.
#[derive(Default)]
struct AttackCounts {
    answered: AtomicU64,
    refused: AtomicU64,
    errors: AtomicU64,
    reconnects: AtomicU64,
}

/// A TLS connection as an attacker holds it: raw bytes, HTTP/1.1.
async fn raw_tls(
    addr: SocketAddr,
    connector: &TlsConnector,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
}

fn http1_post(path: &str, body: &[u8], extra: &str) -> Vec<u8> {
    let mut r = format!(
        "POST {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{extra}\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

/// Junk a client can send: unknown kinds and operations, a long uid,
/// bodies that do not parse, and denials with long messages (log lines).
fn junk_bodies(templates: &[Template]) -> Vec<Vec<u8>> {
    let base: Value =
        serde_json::from_str(&format!("{}u{}", templates[0].head, templates[0].tail)).unwrap();
    let mut out = Vec::new();
    for i in 0..32 {
        let mut v = base.clone();
        v["request"]["kind"]["kind"] = json_str(format!("Kind{i}{}", "k".repeat(60_000)));
        v["request"]["operation"] = json_str(format!("OP{i}{}", "o".repeat(60_000)));
        out.push(serde_json::to_vec(&v).unwrap());
        let mut v = base.clone();
        v["request"]["uid"] = json_str("u".repeat(129));
        out.push(serde_json::to_vec(&v).unwrap());
        let mut v = base.clone();
        v["request"]["object"]["metadata"]["annotations"]["dljob.dev/framework"] =
            json_str(format!("nope{i}{}", "f".repeat(4000)));
        out.push(serde_json::to_vec(&v).unwrap());
    }
    out.push(b"{\"request\": [[[[[[[[[[[[[[[[".to_vec());
    out
}

fn json_str(s: String) -> Value {
    Value::String(s)
}

/// Starts every attacker; they run until `stop`.
/// One attacker connection sending `requests` (path, body) in a closed
/// loop from the `k`th on, reading each answer, and connecting again when
/// the server closes it.
fn closed_loop(
    addr: SocketAddr,
    connector: TlsConnector,
    requests: Arc<Vec<(&'static str, Bytes)>>,
    k: usize,
    stop: Arc<AtomicBool>,
    counts: Arc<AttackCounts>,
) -> tokio::task::JoinHandle<()> {
    let pause = RECONNECT_PAUSE;
    tokio::spawn(async move {
        let mut i = k;
        while !stop.load(Ordering::Relaxed) {
            let Ok(tls) = raw_tls(addr, &connector).await else {
                counts.reconnects.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(pause).await;
                continue;
            };
            let Ok((mut s, conn)) = http1::handshake(TokioIo::new(tls)).await else {
                continue;
            };
            tokio::spawn(conn);
            while !stop.load(Ordering::Relaxed) {
                let (path, body) = &requests[i % requests.len()];
                i += 1;
                let req = Request::post(*path)
                    .header("host", "localhost")
                    .header("content-type", "application/json")
                    .body(Full::new(body.clone()))
                    .unwrap();
                if s.ready().await.is_err() {
                    break;
                }
                match s.send_request(req).await {
                    Ok(resp) => {
                        let ok = resp.status() == StatusCode::OK;
                        let _ = resp.into_body().collect().await;
                        let count = if ok {
                            &counts.answered
                        } else {
                            &counts.refused
                        };
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {
                        counts.errors.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                }
            }
        }
    })
}

/// `network`: every class below; otherwise only the crafted reviews, as a
/// tenant can make the API server send them (with `--client-ca` and the
/// NetworkPolicy, nothing else reaches the port).
fn start_attackers(
    server: &ServerProcess,
    crafted: Arc<Vec<attacks::Crafted>>,
    junk: Arc<Vec<Vec<u8>>>,
    stop: Arc<AtomicBool>,
    counts: Arc<AttackCounts>,
    network: bool,
) -> Vec<tokio::task::JoinHandle<()>> {
    let connector = tls_connector(&server.ca_pem, Proto::H1);
    let addr = server.addr;
    let idle = CONNECTION_CAP - ORDINARY - CPU_ATTACKERS - NON_READERS - SLOW_BODIES - JUNK;
    let mut tasks = Vec::new();
    let pause = RECONNECT_PAUSE;
    // The worst reviews within the caps, closed loop, answers read.
    let crafted: Arc<Vec<(&'static str, Bytes)>> = Arc::new(
        crafted
            .iter()
            .map(|c| (c.path, Bytes::from(c.body.clone())))
            .collect(),
    );
    for k in 0..CPU_ATTACKERS {
        tasks.push(closed_loop(
            addr,
            connector.clone(),
            crafted.clone(),
            k,
            stop.clone(),
            counts.clone(),
        ));
    }
    if !network {
        return tasks;
    }
    // Pipelined reviews whose answers are never read.
    for k in 0..NON_READERS {
        let (connector, crafted, stop, counts) = (
            connector.clone(),
            crafted.clone(),
            stop.clone(),
            counts.clone(),
        );
        tasks.push(tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            while !stop.load(Ordering::Relaxed) {
                let Ok(mut tls) = raw_tls(addr, &connector).await else {
                    counts.reconnects.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(pause).await;
                    continue;
                };
                let mut i = k;
                // Writes until the server stops reading (its answers are
                // not taken) or closes; then holds the connection.
                loop {
                    let c = &crafted[i % crafted.len()];
                    i += 1;
                    let req = http1_post(c.0, &c.1, "");
                    match tokio::time::timeout(Duration::from_secs(2), tls.write_all(&req)).await {
                        Ok(Ok(())) => continue,
                        _ => break,
                    }
                }
                while !stop.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }));
    }
    // Bodies that trickle a byte a second after a first part: half declare
    // 3 MiB (the big bodies' lane), half 200 KiB and send 150 KiB of it at
    // once (the ordinary reviews' lane), both sent anew when cut.
    for k in 0..SLOW_BODIES {
        let (connector, stop, counts) = (connector.clone(), stop.clone(), counts.clone());
        tasks.push(tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            let (declared, first) = if k % 2 == 0 {
                (3_145_728, 1024)
            } else {
                (204_800, 153_600)
            };
            while !stop.load(Ordering::Relaxed) {
                let Ok(mut tls) = raw_tls(addr, &connector).await else {
                    counts.reconnects.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(pause).await;
                    continue;
                };
                let head = format!("POST /mutate HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {declared}\r\n\r\n{{\"a\":\"");
                if tls.write_all(head.as_bytes()).await.is_err()
                    || tls.write_all(&vec![b'x'; first]).await.is_err()
                {
                    continue;
                }
                while !stop.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    if tls.write_all(b"x").await.is_err() {
                        break; // closed at the read timeout: come again
                    }
                }
            }
        }));
    }
    // Junk, closed loop, to /mutate and /validate in turn.
    let junk: Arc<Vec<(&'static str, Bytes)>> = Arc::new(
        junk.iter()
            .enumerate()
            .map(|(i, body)| {
                let path = if i % 2 == 0 { "/mutate" } else { "/validate" };
                (path, Bytes::from(body.clone()))
            })
            .collect(),
    );
    for k in 0..JUNK {
        tasks.push(closed_loop(
            addr,
            connector.clone(),
            junk.clone(),
            k,
            stop.clone(),
            counts.clone(),
        ));
    }
    // Every other connection the server allows: handshaken, silent, opened
    // again when the server closes it.
    for _ in 0..idle {
        let (connector, stop, counts) = (connector.clone(), stop.clone(), counts.clone());
        tasks.push(tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            while !stop.load(Ordering::Relaxed) {
                let Ok(mut tls) = raw_tls(addr, &connector).await else {
                    counts.reconnects.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(pause).await;
                    continue;
                };
                let mut buf = [0u8; 16];
                loop {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    match tokio::time::timeout(Duration::from_millis(500), tls.read(&mut buf)).await
                    {
                        Err(_) => continue,
                        Ok(_) => break, // closed by the server
                    }
                }
                counts.reconnects.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(pause).await;
            }
        }));
    }
    tasks
}

/// `--attack`: ordinary `/mutate` reviews at `--rate` over 4 HTTP/2
/// connections (as the API server sends them), timed from their scheduled
/// send, first alone and then while an attacker holds every other
/// connection the server allows (192 in all, the default cap): 16 send the reviews of
/// `benches/common/attacks.rs` (the worst within the caps) in a closed
/// loop, 16 pipeline them and never read an answer, 100 declare 3 MiB
/// bodies and send a byte a second, 8 send junk (unknown kinds and
/// operations, long uids, unparsable bodies, denials with long messages),
/// and the rest complete the TLS handshake and send nothing, reconnecting
/// whenever the server closes them. Reports the ordinary reviews' p50,
/// p99 and failures and the server's peak RSS, with the server's tokio
/// worker threads set to 1 (the shipped 500m CPU limit) and to 2.
async fn attack_run(o: &Options, run: usize) -> Vec<Row> {
    let mut out = Vec::new();
    for scenario in SCENARIOS {
        let Scenario { workers, network } = scenario;
        let o = Options {
            workers: Some(workers),
            proto: Proto::H2,
            ..o.clone()
        };
        let server = ServerProcess::start(&o, run);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut mutate_t = templates("mutate-create-pod-");
        let mut senders = Vec::new();
        for _ in 0..ORDINARY {
            senders.push(connect(server.addr, &server.ca_pem, Proto::H2).await);
        }
        check_templates(&mut senders[0], "/mutate", &mut mutate_t).await;
        let mutate_t = Arc::new(mutate_t);
        let tag = format!("a{run}w{workers}{}", if network { "n" } else { "t" });
        let (alone, s) = phase(
            &server,
            &mut senders,
            Work::Review("/mutate"),
            &mutate_t,
            Some(o.rate),
            &o,
            &format!("{tag}-alone"),
        )
        .await;
        senders = s;

        let crafted = Arc::new(attacks::worst_reviews(FIXTURES));
        let junk = Arc::new(junk_bodies(&mutate_t));
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(AttackCounts::default());
        let cpu0 = server.cpu();
        let started = Instant::now();
        let attackers = start_attackers(
            &server,
            crafted,
            junk,
            stop.clone(),
            counts.clone(),
            network,
        );
        // Let the attacker take its connections.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (attacked, s) = phase(
            &server,
            &mut senders,
            Work::Review("/mutate"),
            &mutate_t,
            Some(o.rate),
            &o,
            &format!("{tag}-attacked"),
        )
        .await;
        drop(s);
        let attack_cpu = server.cpu().saturating_sub(cpu0);
        let attack_secs = started.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        for t in attackers {
            t.abort();
        }
        let (_, hwm) = server.memory();
        out.push((
            scenario,
            alone,
            attacked,
            AttackTotals {
                answered: counts.answered.load(Ordering::Relaxed),
                refused: counts.refused.load(Ordering::Relaxed),
                errors: counts.errors.load(Ordering::Relaxed),
                reconnects: counts.reconnects.load(Ordering::Relaxed),
                server_cpu_share: attack_cpu.as_secs_f64() / attack_secs,
                hwm_kib: hwm,
            },
        ));
        drop(server);
    }
    out
}

/// Who attacks, and the server's tokio worker threads.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Scenario {
    workers: usize,
    /// A client on the network at the connection cap (every class), or
    /// only a tenant's reviews through the API server.
    network: bool,
}

impl Scenario {
    fn describe(self) -> String {
        format!(
            "{} worker thread{}, {}",
            self.workers,
            if self.workers == 1 { "" } else { "s" },
            if self.network {
                "a network client at the connection cap"
            } else {
                "a tenant's reviews through the API server"
            }
        )
    }
}

const SCENARIOS: [Scenario; 4] = [
    Scenario {
        workers: 1,
        network: true,
    },
    Scenario {
        workers: 2,
        network: true,
    },
    Scenario {
        workers: 1,
        network: false,
    },
    Scenario {
        workers: 2,
        network: false,
    },
];

/// One scenario of one run: the ordinary reviews alone and under attack.
type Row = (Scenario, Phase, Phase, AttackTotals);

struct AttackTotals {
    answered: u64,
    refused: u64,
    errors: u64,
    reconnects: u64,
    /// Server CPU seconds per second during the attack.
    server_cpu_share: f64,
    hwm_kib: u64,
}

fn attack_main(o: &Options, nproc: usize) {
    let limit = raise_fd_limit();
    println!(
        "dljob load, attack mode: ordinary /mutate at {}/s on {ORDINARY} HTTP/2 connections, {} s alone then {} s under attack at the connection cap ({CONNECTION_CAP}), {} run(s), {nproc} CPUs shared by client, attacker and server (not pinned), open-file limit {limit}; server {}",
        o.rate,
        o.duration.as_secs_f64(),
        o.duration.as_secs_f64(),
        o.runs,
        o.server.display()
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(nproc)
        .enable_all()
        .build()
        .unwrap();
    let crafted: Vec<String> = attacks::worst_reviews(FIXTURES)
        .iter()
        .filter(|c| c.path == "/mutate")
        .map(|c| c.name.to_owned())
        .collect();
    println!(
        "crafted reviews (each to /mutate and /validate): {}",
        crafted.join("; ")
    );
    let mut rows: Vec<Row> = Vec::new();
    for run in 0..o.runs {
        for (scenario, alone, attacked, t) in runtime.block_on(attack_run(o, run)) {
            println!("run {}, {}:", run + 1, scenario.describe());
            report_phase("alone", &alone);
            report_phase("under attack", &attacked);
            println!(
                "  attacker: {} answered, {} refused (4xx/5xx), {} broken, {} (re)connects refused or closed; server CPU {:.2} s/s; VmHWM {:.1} MiB",
                t.answered,
                t.refused,
                t.errors,
                t.reconnects,
                t.server_cpu_share,
                t.hwm_kib as f64 / 1024.0
            );
            rows.push((scenario, alone, attacked, t));
        }
    }
    println!("medians over {} run(s):", o.runs);
    for scenario in SCENARIOS {
        let of: Vec<_> = rows.iter().filter(|r| r.0 == scenario).collect();
        let m = |f: &dyn Fn(&Row) -> f64| median(of.iter().map(|r| f(r)).collect());
        println!(
            "  {}: alone p50 {:.2} ms p99 {:.2} ms failed {:.0} | under attack p50 {:.2} ms p99 {:.2} ms max {:.1} ms failed {:.0} | peak RSS alone {:.1} MiB, under attack {:.1} MiB (VmHWM {:.1} MiB)",
            scenario.describe(),
            m(&|r| r.1.pct_ms(0.5)),
            m(&|r| r.1.pct_ms(0.99)),
            m(&|r| r.1.tally.failed as f64),
            m(&|r| r.2.pct_ms(0.5)),
            m(&|r| r.2.pct_ms(0.99)),
            m(&|r| r.2.tally.latency.max() as f64 / 1e6),
            m(&|r| r.2.tally.failed as f64),
            m(&|r| r.1.peak_rss_kib as f64 / 1024.0),
            m(&|r| r.2.peak_rss_kib as f64 / 1024.0),
            m(&|r| r.3.hwm_kib as f64 / 1024.0),
        );
    }
}

// ---------------------------------------------------------- hostage mode

#[path = "common/hostage.rs"]
mod hostage;

/// One attack of one run: the ordinary reviews alone and under it, what
/// the server closed and why, its VmHWM and CPU.
struct HostageRow {
    attack: hostage::Attack,
    alone: Phase,
    attacked: Phase,
    closed: Vec<(String, u64)>,
    hwm_kib: u64,
    server_cpu_share: f64,
    connected: u64,
    refused: u64,
    answered: u64,
    turned_away: u64,
}

/// `--hostage`: for each attack of `benches/common/hostage.rs`, a server
/// of its own (one tokio worker thread: the shipped 500m CPU limit), the
/// ordinary `/mutate` reviews at `--rate` over 4 HTTP/2 connections alone
/// and then while the attack runs with its worst parameters (3 s to take
/// hold first), the attackers on a runtime (one thread) of their own. An ordinary connection the server closes is opened again
/// for the next review, as the API server's client does; the review that
/// failed counts.
async fn hostage_run(
    o: &Options,
    run: usize,
    attack: hostage::Attack,
    attackers: &tokio::runtime::Handle,
) -> HostageRow {
    let cap = attack.cap().unwrap_or(CONNECTION_CAP);
    let mut server_args = o.server_args.clone();
    server_args.extend(["--max-connections".to_owned(), cap.to_string()]);
    let o = Options {
        workers: Some(1),
        proto: Proto::H2,
        server_args,
        ..o.clone()
    };
    let server = ServerProcess::start(&o, run);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut mutate_t = templates("mutate-create-pod-");
    let mut senders = Vec::new();
    for _ in 0..ORDINARY {
        senders.push(connect(server.addr, &server.ca_pem, Proto::H2).await);
    }
    check_templates(&mut senders[0], "/mutate", &mut mutate_t).await;
    let mutate_t = Arc::new(mutate_t);
    let tag = format!("h{run}-{attack:?}");
    let (alone, s) = phase(
        &server,
        &mut senders,
        Work::Review("/mutate"),
        &mutate_t,
        Some(o.rate),
        &o,
        &format!("{tag}-alone"),
    )
    .await;
    senders = s;
    let big = attacks::worst_reviews(FIXTURES)
        .into_iter()
        .find(|c| c.name.contains("volcano compat (allowed)") && c.path == "/mutate")
        .expect("the largest allowed answer");
    let target = Arc::new(hostage::Target {
        addr: server.addr,
        h1: tls_connector(&server.ca_pem, Proto::H1),
        h2: tls_connector(&server.ca_pem, Proto::H2),
        big: Bytes::from(big.body),
    });
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(hostage::Counts::default());
    let cpu0 = server.cpu();
    let started = Instant::now();
    let attackers = hostage::start(
        attackers,
        attack,
        attack.connections(cap, ORDINARY),
        target,
        stop.clone(),
        counts.clone(),
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (attacked, mut s) = phase(
        &server,
        &mut senders,
        Work::Review("/mutate"),
        &mutate_t,
        Some(o.rate),
        &o,
        &format!("{tag}-attacked"),
    )
    .await;
    let server_cpu_share =
        server.cpu().saturating_sub(cpu0).as_secs_f64() / started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for t in attackers {
        t.abort();
    }
    let (_, hwm_kib) = server.memory();
    let closed = closed_reasons(&mut s, &server).await;
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    HostageRow {
        attack,
        alone,
        attacked,
        closed,
        hwm_kib,
        server_cpu_share,
        connected: load(&counts.connected),
        refused: load(&counts.refused),
        answered: load(&counts.answered),
        turned_away: load(&counts.turned_away),
    }
}

/// The server's `dljob_webhook_connections_closed_total`, by reason.
async fn closed_reasons(senders: &mut [Sender], server: &ServerProcess) -> Vec<(String, u64)> {
    let mut sender = match senders.iter_mut().find(|s| !s.is_closed()) {
        Some(s) => std::mem::replace(s, connect(server.addr, &server.ca_pem, Proto::H2).await),
        None => connect(server.addr, &server.ca_pem, Proto::H2).await,
    };
    let req = Request::get("/metrics")
        .header("host", "localhost")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let Ok((_, body)) = sender.send(req).await else {
        return Vec::new();
    };
    let prefix = "dljob_webhook_connections_closed_total{reason=\"";
    String::from_utf8_lossy(&body)
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(prefix)?;
            let (reason, n) = rest.split_once("\"} ")?;
            Some((reason.to_owned(), n.trim().parse().ok()?))
        })
        .collect()
}

fn hostage_main(o: &Options, nproc: usize) {
    let limit = raise_fd_limit();
    println!(
        "dljob load, hostage mode: ordinary /mutate at {}/s on {ORDINARY} HTTP/2 connections, {} s alone then {} s under each attack alone (3 s after it starts), server with 1 tokio worker thread, {} run(s), {nproc} CPUs shared by client, attacker and server (not pinned), open-file limit {limit}; server {}",
        o.rate,
        o.duration.as_secs_f64(),
        o.duration.as_secs_f64(),
        o.runs,
        o.server.display()
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(nproc)
        .enable_all()
        .build()
        .unwrap();
    let attacks: Vec<hostage::Attack> = hostage::Attack::ALL
        .into_iter()
        .filter(|a| o.only.is_empty() || o.only.iter().any(|n| a.name().contains(n.as_str())))
        .collect();
    let mut rows = Vec::new();
    for run in 0..o.runs {
        for &attack in &attacks {
            let attack_rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            let r = runtime.block_on(hostage_run(o, run, attack, attack_rt.handle()));
            attack_rt.shutdown_timeout(Duration::from_secs(1));
            println!(
                "run {}, {} ({} attacking connections, cap {}):",
                run + 1,
                attack.name(),
                attack.connections(attack.cap().unwrap_or(CONNECTION_CAP), ORDINARY),
                attack.cap().unwrap_or(CONNECTION_CAP)
            );
            report_phase("alone", &r.alone);
            report_phase("under attack", &r.attacked);
            let closed: Vec<String> = r.closed.iter().map(|(k, n)| format!("{k} {n}")).collect();
            println!(
                "  attacker: {} connections opened, {} refused or failed, answers {} 2xx and {} 4xx/5xx; server CPU {:.2} s/s; VmHWM {:.1} MiB; closed: {}",
                r.connected,
                r.refused,
                r.answered,
                r.turned_away,
                r.server_cpu_share,
                r.hwm_kib as f64 / 1024.0,
                if closed.is_empty() { "none".to_owned() } else { closed.join(", ") }
            );
            rows.push(r);
        }
    }
    println!("medians over {} run(s):", o.runs);
    for &attack in &attacks {
        let of: Vec<&HostageRow> = rows.iter().filter(|r| r.attack == attack).collect();
        let m = |f: &dyn Fn(&HostageRow) -> f64| median(of.iter().map(|r| f(r)).collect());
        println!(
            "  {}: alone p99 {:.2} ms | under attack p50 {:.2} ms p99 {:.2} ms max {:.1} ms, answered {:.1} %, failed {:.0} | VmHWM {:.1} MiB | server CPU {:.2} s/s",
            attack.name(),
            m(&|r| r.alone.pct_ms(0.99)),
            m(&|r| r.attacked.pct_ms(0.5)),
            m(&|r| r.attacked.pct_ms(0.99)),
            m(&|r| r.attacked.tally.latency.max() as f64 / 1e6),
            m(&|r| {
                let t = &r.attacked.tally;
                100.0 * t.ok as f64 / (t.ok + t.failed).max(1) as f64
            }),
            m(&|r| r.attacked.tally.failed as f64),
            m(&|r| r.hwm_kib as f64 / 1024.0),
            m(&|r| r.server_cpu_share),
        );
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn report_phase(name: &str, p: &Phase) {
    println!(
        "  {name:<22} {:>9.0}/s  ok {:>8}  failed {:>3}  p50 {:>7.3} ms  p99 {:>7.3} ms  p99.9 {:>7.3} ms  max {:>8.3} ms  server CPU {:>6.1} µs/req  peak RSS {:>6.1} MiB",
        p.throughput(),
        p.tally.ok,
        p.tally.failed,
        p.pct_ms(0.50),
        p.pct_ms(0.99),
        p.pct_ms(0.999),
        p.tally.latency.max() as f64 / 1e6,
        p.cpu_us_per_request(),
        p.peak_rss_kib as f64 / 1024.0,
    );
    if let Some(why) = &p.tally.first_failure {
        println!("    first failure: {why}");
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|a| a == "--bench") {
        // `cargo test --benches` runs bench targets without `--bench`.
        println!("load: a load generator; run it with `cargo bench --bench load -- [options]`");
        return;
    }
    let o = match parse_options(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("load: {e}");
            std::process::exit(2);
        }
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let nproc = std::thread::available_parallelism().map_or(1, |n| n.get());
    if o.hostage {
        let o = Options {
            rate: if args.iter().any(|a| a == "--rate") {
                o.rate
            } else {
                200
            },
            ..o
        };
        hostage_main(&o, nproc);
        return;
    }
    if o.attack {
        let o = Options {
            rate: if args.iter().any(|a| a == "--rate") {
                o.rate
            } else {
                200
            },
            ..o
        };
        attack_main(&o, nproc);
        return;
    }
    if let Some(n) = o.idle_connections {
        let limit = raise_fd_limit();
        println!(
            "dljob load, idle mode: {n} TLS connections that send no request, {} run(s), open-file limit {limit}, server {} {}",
            o.runs,
            o.server.display(),
            o.server_args.join(" ")
        );
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(nproc)
            .enable_all()
            .build()
            .unwrap();
        for run in 0..o.runs {
            runtime.block_on(idle_run(&o, n, run));
        }
        return;
    }
    println!(
        "dljob load: {} connections ({}, TLS, keep-alive), {} s per phase, fixed rate {}/s, {} run(s), cap {} requests/phase, {nproc} CPUs shared by client and server (not pinned); server {}",
        o.connections,
        match o.proto {
            Proto::H1 => "HTTP/1.1",
            Proto::H2 => "HTTP/2",
        },
        o.duration.as_secs_f64(),
        o.rate,
        o.runs,
        o.max_requests,
        o.server.display()
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(nproc)
        .enable_all()
        .build()
        .unwrap();
    let mut results = Vec::new();
    for run in 0..o.runs {
        let r = runtime.block_on(run_once(&o, run));
        println!("run {}:", run + 1);
        println!(
            "  server RSS idle {:.1} MiB at start, {:.1} MiB after the load; VmHWM {:.1} MiB",
            r.idle_rss_start as f64 / 1024.0,
            r.idle_rss_end as f64 / 1024.0,
            r.hwm as f64 / 1024.0
        );
        report_phase("GET /healthz (floor)", &r.healthz);
        report_phase("POST /mutate", &r.mutate);
        report_phase("POST /validate", &r.validate);
        report_phase(&format!("POST /mutate @{}/s", o.rate), &r.fixed);
        println!(
            "  mutate/healthz throughput ratio {:.3}",
            r.mutate.throughput() / r.healthz.throughput()
        );
        results.push(r);
    }
    let m = |f: &dyn Fn(&RunResult) -> f64| median(results.iter().map(f).collect());
    println!("medians over {} run(s):", results.len());
    println!(
        "  healthz {:.0}/s | mutate {:.0}/s | validate {:.0}/s | mutate/healthz {:.3}",
        m(&|r| r.healthz.throughput()),
        m(&|r| r.mutate.throughput()),
        m(&|r| r.validate.throughput()),
        m(&|r| r.mutate.throughput() / r.healthz.throughput()),
    );
    println!(
        "  server CPU per request: healthz {:.1} µs | mutate {:.1} µs | validate {:.1} µs",
        m(&|r| r.healthz.cpu_us_per_request()),
        m(&|r| r.mutate.cpu_us_per_request()),
        m(&|r| r.validate.cpu_us_per_request()),
    );
    println!(
        "  mutate at {}/s: achieved {:.0}/s, p50 {:.3} ms, p99 {:.3} ms, p99.9 {:.3} ms, max {:.3} ms",
        o.rate,
        m(&|r| r.fixed.throughput()),
        m(&|r| r.fixed.pct_ms(0.5)),
        m(&|r| r.fixed.pct_ms(0.99)),
        m(&|r| r.fixed.pct_ms(0.999)),
        m(&|r| r.fixed.tally.latency.max() as f64 / 1e6),
    );
    println!(
        "  RSS: idle {:.1} MiB at start, {:.1} MiB after load; peak under load {:.1} MiB; VmHWM {:.1} MiB",
        m(&|r| r.idle_rss_start as f64 / 1024.0),
        m(&|r| r.idle_rss_end as f64 / 1024.0),
        m(&|r| {
            [&r.healthz, &r.mutate, &r.validate, &r.fixed]
                .iter()
                .map(|p| p.peak_rss_kib)
                .max()
                .unwrap() as f64
                / 1024.0
        }),
        m(&|r| r.hwm as f64 / 1024.0),
    );
    let failed: u64 = results
        .iter()
        .flat_map(|r| [&r.healthz, &r.mutate, &r.validate, &r.fixed])
        .map(|p| p.tally.failed)
        .sum();
    if failed > 0 {
        eprintln!("load: {failed} request(s) failed");
        std::process::exit(1);
    }
}
