//! Memory of `dljob serve` (webhook + reconciler) at scale, measured by
//! replaying what an API server sends. Figures go in BENCHMARKS.md.
//!
//! ```text
//! cargo build --release
//! cargo bench --bench replay -- [--jobs 2500] [--rate 1000] [--settle 30]
//!                               [--members pod|statefulset|job] [--members-per-job 4]
//!                               [--no-webhook] [--preexisting 0] [--no-restart]
//!                               [--runs 1] [--binary PATH] [--env K=V]...
//!                               [--tensorboard] [--gang volcano] [--probe-rate 0]
//! cargo bench --bench replay -- --help
//! ```
//!
//! It runs a fake kube-apiserver in this process (`replay/apiserver.rs`:
//! paged LISTs, watches, writes with their watch events, on plain HTTP on a
//! free 127.0.0.1 port), writes a kubeconfig for it in a temp dir and starts
//! the real binary (`target/release/dljob serve --listen 127.0.0.1:<port>
//! --self-signed-ca-out <tmp>/ca.pem`, or `--binary PATH`) as a child with
//! `KUBECONFIG` and `POD_NAMESPACE` set. Then, per run:
//!
//! **Scenario B, created after start** (the issue's measurement): `--jobs`
//! PyTorch jobs of `--members-per-job` (4) pods each are created: bare pods
//! (`master=1,worker=3`), or with `--members statefulset|job` one
//! StatefulSet or Indexed Job per job (`worker=N`, stored first, its review
//! sent to the webhook) and the pods its controller makes
//! (`replay/objects.rs`: the captured objects, mutated by the real
//! mutation). Pods are created at `--rate` pods/s: each pod's mutating and validating AdmissionReview is POSTed to
//! the child's webhook over TLS (unless `--no-webhook`; every answer must
//! be allowed, the mutation with a patch), then stored (an ADDED watch
//! event), and `--running-after` seconds later it is Running (a MODIFIED
//! event with a kubelet's status). The bench waits until the reconciler has
//! created every DLJob and Service (counted in the fake store), then
//! `--settle` seconds. `--preexisting N` pods are stored before the start
//! instead (the paged LIST path for part of them).
//!
//! **Scenario A, everything exists at start** (unless `--no-restart`): the
//! child is stopped (SIGTERM) and a new one started on the same store: it
//! LISTs (pages of 500) the pods, the DLJobs with the statuses the first
//! child wrote and the Services, takes the Lease again, reconciles, then
//! settles for `--settle` seconds. It also reports how long after the
//! sync, and how many CPU seconds of the child (`/proc/<pid>/stat`), it
//! took until `dljob_reconciles_total` reached the number of jobs: one
//! resync of every job. With `--probe-rate R`, an ordinary pod's mutating
//! review is sent R times a second on one connection while that resync
//! runs, and for 10 s once the child has settled (after the idle figure
//! below, which it would otherwise count): the p99 of each, the first 10
//! reviews of each connection (its warm-up) not counted.
//!
//! After `--settle` in each scenario: `idle: Y % of a core`, the child's CPU
//! over the settle period divided by its length.
//!
//! The child's VmRSS/VmHWM are sampled from /proc every `--sample-ms`
//! (250) ms. Printed per scenario: RSS at start (webhook listening), after
//! the LISTs (`/readyz` 200, the Lease held, every watch open), after
//! creation, peak, settled, VmHWM; how long after the last pod every DLJob
//! and Service existed; the API calls the child made per verb and resource,
//! with the writes and single-object reads it made for the jobs summed (in
//! scenario A, where every job exists and is unchanged, that is what one
//! resync of every job costs the API server), and the watch streams open
//! at the end. With `--runs N`, medians. `--tensorboard` and `--gang
//! volcano` give every job the objects those keys make the reconciler keep
//! (a TensorBoard Deployment and Service; a Volcano PodGroup).
//!
//! A binary built with `--features dhat-heap` writes `dhat-heap.json` when
//! it stops, or with `--dhat` when the scenario has settled (the bench
//! creates the file `DLJOB_DHAT_TRIGGER` names); the bench copies it to
//! `--dhat-dir` (default `target/replay-dhat/`) as
//! `<scenario>-run<N>.json`, for `benches/dhat_summary.py`.
//!
//! Bounded: every wait has a timeout (`--wait-timeout`, default 300 s), the
//! child is killed at the end and on panic (a guard), only 127.0.0.1 is
//! used and the temp dir is removed. Under `cargo test --benches` (no
//! `--bench` argument) it does nothing.

#[path = "replay/apiserver.rs"]
mod apiserver;
#[path = "common/child.rs"]
mod child;
use child::{cpu_seconds, free_addr, memory, wait_listening};
#[path = "replay/objects.rs"]
mod objects;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use apiserver::ApiServer;
use objects::Generator;

const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const IDENTITY: &str = "dljob-replay-0";
const POD_NAMESPACE: &str = "dljob-system";
/// The file whose existence makes a dhat build write its profile.
const DHAT_TRIGGER: &str = "dhat-trigger";

const HELP: &str = "\
replay: memory of `dljob serve` replaying an API server's LISTs and watch events

cargo bench --bench replay -- [options]
  --jobs N            PyTorch jobs (default 2500; at most 100 000, and 1 000 000 pods)
  --members KIND      a job's members: pod (bare pods, master=1,worker=N-1; the default),
                      statefulset or job (one StatefulSet or Indexed Job of N, worker=N)
  --members-per-job N pods per job (default 4; at most 10 000)
  --probe-rate R      ordinary reviews a second timed during scenario A's resync and
                      for 10 s once it has settled (after the idle measure; the
                      first 10 of each not counted; default 0: none)
  --namespaces N      namespaces the jobs are spread over (default 5)
  --tensorboard       every job has a TensorBoard (a Deployment and a Service more)
  --gang NAME         every job's dljob.dev/gang (volcano: a PodGroup more)
  --rate R            pods created per second (default 1000; the issue's run: 118)
  --running-after S   seconds from a pod's creation to its Running status (default 2)
  --no-webhook        do not POST the AdmissionReviews to the webhook
  --connections N     TLS connections to the webhook (default 8)
  --preexisting N     pods stored (Running) before the child starts (default 0)
  --settle S          seconds to wait once everything exists (default 30)
  --no-restart        skip scenario A (a second child on the full store)
  --runs N            repeat, print medians (default 1, at most 5)
  --wait-timeout S    bound of every wait (default 300)
  --sample-ms MS      RSS sampling period (default 250)
  --binary PATH       the dljob binary (default target/release/dljob)
  --env K=V           extra environment for the child (repeatable)
  --dhat              the binary is built with --features dhat-heap: make it write
                      its profile when settled (the live heap), before SIGTERM
  --dhat-dir DIR      where dhat-heap.json files go (default target/replay-dhat)
  --log PATH          keep the child's log (stderr) there, appended
  --help              this text";

// ------------------------------------------------------------------ options

#[derive(Clone, Debug)]
struct Options {
    jobs: usize,
    namespaces: usize,
    rate: f64,
    running_after: Duration,
    webhook: bool,
    connections: usize,
    preexisting: usize,
    settle: Duration,
    restart: bool,
    runs: usize,
    wait_timeout: Duration,
    sample: Duration,
    binary: PathBuf,
    env: Vec<(String, String)>,
    dhat_dir: PathBuf,
    dhat: bool,
    log: Option<PathBuf>,
    tensorboard: bool,
    gang: Option<String>,
    members: objects::Members,
    per_job: usize,
    probe_rate: f64,
}

fn parse_options(args: &[String]) -> Result<Option<Options>, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut o = Options {
        jobs: 2500,
        namespaces: 5,
        rate: 1000.0,
        running_after: Duration::from_secs(2),
        webhook: true,
        connections: 8,
        preexisting: 0,
        settle: Duration::from_secs(30),
        restart: true,
        runs: 1,
        wait_timeout: Duration::from_secs(300),
        sample: Duration::from_millis(250),
        binary: root.join("target/release/dljob"),
        env: Vec::new(),
        dhat_dir: root.join("target/replay-dhat"),
        dhat: false,
        log: None,
        tensorboard: false,
        gang: None,
        members: objects::Members::Pod,
        per_job: 4,
        probe_rate: 0.0,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().cloned().ok_or(format!("{a} needs a value"));
        let num = |v: String| v.parse::<f64>().map_err(|e| format!("{a} {v}: {e}"));
        let secs = |v: String| num(v).map(|s| Duration::from_secs_f64(s.clamp(0.0, 3600.0)));
        match a.as_str() {
            "--bench" => {}
            "--help" | "-h" => return Ok(None),
            "--jobs" => o.jobs = num(value()?)?.clamp(1.0, 100_000.0) as usize,
            "--namespaces" => o.namespaces = num(value()?)?.clamp(1.0, 1000.0) as usize,
            "--rate" => o.rate = num(value()?)?.clamp(1.0, 20_000.0),
            "--running-after" => o.running_after = secs(value()?)?,
            "--no-webhook" => o.webhook = false,
            "--connections" => o.connections = num(value()?)?.clamp(1.0, 64.0) as usize,
            "--preexisting" => o.preexisting = num(value()?)? as usize,
            "--settle" => o.settle = secs(value()?)?,
            "--no-restart" => o.restart = false,
            "--runs" => o.runs = num(value()?)?.clamp(1.0, 5.0) as usize,
            "--wait-timeout" => o.wait_timeout = secs(value()?)?,
            "--sample-ms" => {
                o.sample = Duration::from_millis(num(value()?)?.clamp(10.0, 10_000.0) as u64)
            }
            "--binary" => {
                let p = PathBuf::from(value()?);
                // The child runs in the temp dir: a relative path must not move.
                o.binary = std::path::absolute(&p).unwrap_or(p);
            }
            "--env" => {
                let v = value()?;
                let (k, val) = v.split_once('=').ok_or(format!("--env {v}: K=V"))?;
                o.env.push((k.to_owned(), val.to_owned()));
            }
            "--dhat-dir" => o.dhat_dir = PathBuf::from(value()?),
            "--dhat" => o.dhat = true,
            "--log" => o.log = Some(PathBuf::from(value()?)),
            "--tensorboard" => o.tensorboard = true,
            "--gang" => o.gang = Some(value()?),
            "--members" => o.members = objects::Members::parse(&value()?)?,
            "--members-per-job" => o.per_job = num(value()?)?.clamp(1.0, 10_000.0) as usize,
            "--probe-rate" => o.probe_rate = num(value()?)?.clamp(0.0, 1000.0),
            other => return Err(format!("unknown argument {other} (see --help)")),
        }
    }
    if o.jobs * o.per_job > 1_000_000 {
        return Err(format!(
            "{} jobs of {} pods: at most 1 000 000 pods",
            o.jobs, o.per_job
        ));
    }
    o.preexisting = o.preexisting.min(o.jobs * o.per_job);
    Ok(Some(o))
}

// ------------------------------------------------------------ temp dir, child

/// A temp dir removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("dljob-replay-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `dljob serve` as a child; killed on drop if still running.
struct ServerProcess {
    child: Child,
    addr: SocketAddr,
    ca_pem: String,
    log_path: PathBuf,
}

/// `dljob_reconciles_total` from the child's `/metrics`.
async fn reconciles(client: &mut Sender) -> Option<u64> {
    let (status, body) = send(client, Method::GET, "/metrics", String::new())
        .await
        .ok()?;
    if status != StatusCode::OK {
        return None;
    }
    String::from_utf8_lossy(&body)
        .lines()
        .find_map(|l| l.strip_prefix("dljob_reconciles_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}

/// The last 40 lines of a log file.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

impl ServerProcess {
    fn start(o: &Options, dir: &Path, kubeconfig: &Path) -> Self {
        assert!(
            o.binary.exists(),
            "{} is missing: run `cargo build --release` first (or pass --binary PATH)",
            o.binary.display()
        );
        let ca = dir.join("ca.pem");
        let addr = free_addr();
        let log_path = dir.join("server.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap();
        let mut cmd = Command::new(&o.binary);
        cmd.arg("serve")
            .arg("--listen")
            .arg(addr.to_string())
            .arg("--self-signed-ca-out")
            .arg(&ca)
            .arg("--drain-seconds")
            .arg("1")
            .current_dir(dir)
            .env("KUBECONFIG", kubeconfig)
            .env("POD_NAMESPACE", POD_NAMESPACE)
            .env("POD_NAME", IDENTITY)
            .env("DLJOB_DHAT_TRIGGER", dir.join(DHAT_TRIGGER));
        for k in [
            "RUST_LOG",
            "DLJOB_CONFIG",
            "DLJOB_TLS_CERT",
            "DLJOB_TLS_KEY",
            "DLJOB_LISTEN",
            "DLJOB_DRAIN_SECONDS",
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
            "KUBERNETES_SERVICE_HOST",
        ] {
            cmd.env_remove(k);
        }
        for (k, v) in &o.env {
            cmd.env(k, v);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", o.binary.display()));
        let mut server = Self {
            child,
            addr,
            ca_pem: String::new(),
            log_path,
        };
        let log_path = server.log_path.clone();
        server.ca_pem = wait_listening(
            &mut server.child,
            &ca,
            addr,
            Duration::from_secs(30),
            || tail(&log_path),
        );
        server
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log(&self) -> String {
        tail(&self.log_path)
    }

    /// SIGTERM, then wait up to `grace` (a dhat build writes its profile
    /// then), then SIGKILL.
    fn stop(&mut self, grace: Duration) -> Option<std::process::ExitStatus> {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid().to_string())
            .status();
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("replay: the server did not stop in {grace:?}: killed");
        let _ = self.child.kill();
        let _ = self.child.wait();
        None
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Samples the child's VmRSS/VmHWM until dropped.
struct Sampler {
    samples: Arc<Mutex<Vec<(Instant, u64, u64)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    fn start(pid: u32, every: Duration) -> Self {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (samples, stop) = (samples.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Some((rss, hwm)) = memory(pid) {
                        samples.lock().unwrap().push((Instant::now(), rss, hwm));
                    }
                    std::thread::sleep(every);
                }
            })
        };
        Self {
            samples,
            stop,
            thread: Some(thread),
        }
    }
    fn peak_since(&self, t: Instant) -> u64 {
        self.samples
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.0 >= t)
            .map(|s| s.1)
            .max()
            .unwrap_or(0)
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

// ------------------------------------------------------------- webhook client

type Sender = http1::SendRequest<Full<Bytes>>;

async fn connect(addr: SocketAddr, ca_pem: &str) -> Sender {
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
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let tls = TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let (s, conn) = http1::handshake(TokioIo::new(tls)).await.unwrap();
    tokio::spawn(conn);
    s
}

async fn send(
    s: &mut Sender,
    method: Method,
    path: &str,
    body: String,
) -> Result<(StatusCode, Bytes), String> {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let work = async {
        s.ready().await.map_err(|e| e.to_string())?;
        let resp = s.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((status, body))
    };
    tokio::time::timeout(REQUEST_TIMEOUT, work)
        .await
        .map_err(|_| "timed out".to_owned())?
}

/// The reviews a scenario sends to the webhook: their uids, and those that
/// failed.
#[derive(Clone, Default)]
struct Reviews {
    uids: Arc<AtomicU64>,
    failures: Arc<AtomicU64>,
    first_failure: Arc<Mutex<Option<String>>>,
}

impl Reviews {
    /// `name`'s mutating then validating review (`body(uid, validate)`),
    /// each answer checked with [`review_ok`].
    async fn both(&self, c: &mut Sender, name: &str, body: impl Fn(&str, bool) -> String) {
        for (path, validate) in [
            ("/mutate?timeout=10s", false),
            ("/validate?timeout=10s", true),
        ] {
            let uid = uid_of(self.uids.fetch_add(1, Ordering::Relaxed) + 1);
            let r = send(c, Method::POST, path, body(&uid, validate)).await;
            if let Err(e) = review_ok(&r, &uid, !validate) {
                self.failures.fetch_add(1, Ordering::Relaxed);
                self.first_failure
                    .lock()
                    .unwrap()
                    .get_or_insert(format!("{path} {name}: {e}"));
            }
        }
    }
}

/// Checks one review's answer: 200, the uid echoed, allowed, and for the
/// mutation a patch.
fn review_ok(
    r: &Result<(StatusCode, Bytes), String>,
    uid: &str,
    want_patch: bool,
) -> Result<(), String> {
    let (status, body) = r.as_ref().map_err(Clone::clone)?;
    if *status != StatusCode::OK {
        return Err(format!("HTTP {status}"));
    }
    let v: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let resp = &v["response"];
    if resp["uid"] != uid {
        return Err("uid not echoed".into());
    }
    if resp["allowed"] != true {
        return Err(format!("denied: {}", resp["status"]["message"]));
    }
    if want_patch && resp["patch"].as_str().is_none_or(str::is_empty) {
        return Err("no patch".into());
    }
    Ok(())
}

// ------------------------------------------------------------------ the run

fn kib_mib(k: u64) -> f64 {
    k as f64 / 1024.0
}

#[derive(Clone, Debug, Default)]
struct Scenario {
    name: &'static str,
    rss_start: u64,
    rss_synced: u64,
    synced_after: Duration,
    rss_created: Option<u64>,
    created_in: Option<Duration>,
    all_owned_after_last_pod: Option<Duration>,
    rss_peak: u64,
    rss_settled: u64,
    hwm: u64,
    review_failures: u64,
    first_review_failure: Option<String>,
    calls: BTreeMap<(String, String), u64>,
    watches: BTreeMap<String, (usize, usize)>,
    /// Scenario A: how long after the sync, and how many CPU seconds,
    /// until every DLJob was reconciled once (one resync of every job).
    resync: Option<(Duration, f64)>,
    /// The child's CPU over the settle period, in % of a core.
    idle: Option<f64>,
    /// Scenario A with `--probe-rate`: ordinary reviews' latencies while
    /// the resync ran, and while the child settled.
    probe: Option<(Vec<Duration>, Vec<Duration>)>,
    dljobs: usize,
    services: usize,
    events: usize,
    lease_holder: String,
    exit: String,
}

fn uid_of(n: u64) -> String {
    format!("00000000-0000-4000-8000-{n:012x}")
}

fn diff_calls(
    after: &BTreeMap<(String, String), u64>,
    before: &BTreeMap<(String, String), u64>,
) -> BTreeMap<(String, String), u64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect()
}

/// Waits for `cond` (polled every 100 ms) up to `timeout`.
async fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "replay: timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Until the child's member caches have listed (`/readyz`), it holds the
/// Lease and each of its watches is open (every LIST is done).
async fn wait_synced(
    o: &Options,
    srv: &ApiServer,
    server: &ServerProcess,
    before: &BTreeMap<(String, String), u64>,
) {
    let deadline = Instant::now() + o.wait_timeout;
    let mut client = connect(server.addr, &server.ca_pem).await;
    loop {
        assert!(
            Instant::now() < deadline,
            "replay: /readyz not 200 in {:?}; log:\n{}",
            o.wait_timeout,
            server.log()
        );
        if let Ok((StatusCode::OK, _)) =
            send(&mut client, Method::GET, "/readyz", String::new()).await
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_for("the Lease and every watch", o.wait_timeout, || {
        let held = srv
            .get(
                "coordination.k8s.io",
                "leases",
                POD_NAMESPACE,
                "dljob-reconciler",
            )
            .is_some_and(|l| l["spec"]["holderIdentity"] == IDENTITY);
        let calls = diff_calls(&srv.calls(), before);
        let watched = |r: &str| calls.get(&("watch".into(), r.into())).copied().unwrap_or(0);
        held && watched("pods") >= 1
            && watched("statefulsets.apps") >= 1
            && watched("jobs.batch") >= 1
            && watched("services") >= 1
            && watched("dljobs.dljob.dev") >= 1
    })
    .await;
}

fn write_kubeconfig(dir: &Path, addr: SocketAddr) -> PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: replay\n  cluster:\n    server: http://{addr}\n\
             users:\n- name: replay\n  user: {{}}\ncontexts:\n- name: replay\n  context:\n    cluster: replay\n    user: replay\n    namespace: default\n\
             current-context: replay\n"
        ),
    )
    .unwrap();
    path
}

/// A started child and what its scenario measures from.
struct Live {
    server: ServerProcess,
    sampler: Sampler,
    started: Instant,
    before: BTreeMap<(String, String), u64>,
}

fn finish(o: &Options, sc: &mut Scenario, srv: &ApiServer, live: Live, dir: &Path, run: usize) {
    let Live {
        mut server,
        sampler,
        started,
        before,
    } = live;
    let server = &mut server;
    let before = &before;
    sc.rss_peak = sampler.peak_since(started);
    let (rss, hwm) = memory(server.pid()).unwrap_or_default();
    sc.rss_settled = rss;
    sc.hwm = hwm;
    sc.rss_peak = sc.rss_peak.max(rss);
    drop(sampler);
    sc.calls = diff_calls(&srv.calls(), before);
    sc.watches = srv.watches();
    sc.dljobs = srv.len("dljob.dev", "dljobs");
    sc.services = srv.len("", "services");
    sc.events = srv.len("events.k8s.io", "events");
    sc.lease_holder = srv
        .get(
            "coordination.k8s.io",
            "leases",
            POD_NAMESPACE,
            "dljob-reconciler",
        )
        .map(|l| {
            l["spec"]["holderIdentity"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .unwrap_or_default();
    if o.dhat {
        // The live heap of the settled server, not what is left after the
        // drop at exit.
        std::fs::write(dir.join(DHAT_TRIGGER), b"").unwrap();
        let deadline = Instant::now() + o.wait_timeout;
        while !std::fs::read_to_string(&server.log_path)
            .unwrap_or_default()
            .contains("dhat: The data has been saved")
        {
            assert!(
                Instant::now() < deadline,
                "replay: no dhat profile in {:?}",
                o.wait_timeout
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        let _ = std::fs::remove_file(dir.join(DHAT_TRIGGER));
    }
    let status = server.stop(Duration::from_secs(600));
    sc.exit = status.map_or("killed".into(), |s| s.to_string());
    if let Some(log) = &o.log {
        if let Ok(text) = std::fs::read(&server.log_path) {
            use std::io::Write as _;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .unwrap();
            let _ = writeln!(f, "=== scenario {} run {run}", sc.name);
            let _ = f.write_all(&text);
        }
    }
    let _ = std::fs::remove_file(&server.log_path);
    let dhat = dir.join("dhat-heap.json");
    if dhat.exists() {
        std::fs::create_dir_all(&o.dhat_dir).unwrap();
        let to = o.dhat_dir.join(format!("{}-run{run}.json", sc.name));
        std::fs::copy(&dhat, &to).unwrap();
        let _ = std::fs::remove_file(&dhat);
        println!("  dhat profile: {}", to.display());
    }
}

/// Starts the child and waits until it has synced (lists done, Lease
/// held), recording its RSS at start and then.
async fn start_child(
    name: &'static str,
    o: &Options,
    srv: &Arc<ApiServer>,
    dir: &Path,
    kubeconfig: &Path,
) -> (Scenario, Live) {
    let mut sc = Scenario {
        name,
        ..Scenario::default()
    };
    let before = srv.calls();
    let t0 = Instant::now();
    let server = ServerProcess::start(o, dir, kubeconfig);
    let sampler = Sampler::start(server.pid(), o.sample);
    sc.rss_start = memory(server.pid()).unwrap().0;
    wait_synced(o, srv, &server, &before).await;
    sc.synced_after = t0.elapsed();
    sc.rss_synced = memory(server.pid()).unwrap().0;
    let live = Live {
        server,
        sampler,
        started: t0,
        before,
    };
    (sc, live)
}

async fn scenario_created(
    o: &Options,
    srv: &Arc<ApiServer>,
    generator: &Arc<Generator>,
    dir: &Path,
    kubeconfig: &Path,
    run: usize,
) -> Scenario {
    let total = o.jobs * o.per_job;
    for i in 0..o.preexisting {
        let p = generator.pod(i, srv.uid());
        srv.put("", "pods", generator.running(i, &p.pending));
    }
    let (mut sc, live) = start_child("created", o, srv, dir, kubeconfig).await;
    let reviews = Reviews::default();

    // The workloads first, each reviewed as the API server would send it
    // (their pods follow at the rate).
    let mut client = if o.webhook && generator.members() != objects::Members::Pod {
        Some(connect(live.server.addr, &live.server.ca_pem).await)
    } else {
        None
    };
    for job in 0..o.jobs {
        let Some(w) = generator.workload(job) else {
            break;
        };
        if let Some(c) = client.as_mut() {
            reviews
                .both(c, &w.name, |uid, validate| {
                    generator.workload_review(&w, uid, validate)
                })
                .await;
        }
        srv.put(w.group, w.plural, w.stored);
    }
    drop(client);

    // Create the pods at the rate, through the webhook.
    let created_at = Instant::now();
    let (tx, rx) = tokio::sync::mpsc::channel::<usize>(1024);
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    let mut workers = Vec::new();
    for _ in 0..o.connections {
        let (rx, srv, generator, reviews) =
            (rx.clone(), srv.clone(), generator.clone(), reviews.clone());
        let mut client = if o.webhook {
            Some(connect(live.server.addr, &live.server.ca_pem).await)
        } else {
            None
        };
        let running_after = o.running_after;
        workers.push(tokio::spawn(async move {
            let mut pending_running = Vec::new();
            loop {
                let Some(i) = rx.lock().await.recv().await else {
                    break;
                };
                let p = generator.pod(i, srv.uid());
                if let Some(c) = client.as_mut() {
                    reviews
                        .both(c, &p.name, |uid, validate| {
                            if validate {
                                generator.validate_review(&p, uid)
                            } else {
                                generator.mutate_review(&p, uid)
                            }
                        })
                        .await;
                }
                srv.put("", "pods", p.pending.clone());
                let (srv, generator) = (srv.clone(), generator.clone());
                pending_running.push(tokio::spawn(async move {
                    tokio::time::sleep(running_after).await;
                    srv.put("", "pods", generator.running(i, &p.pending));
                }));
            }
            for t in pending_running {
                t.await.unwrap();
            }
        }));
    }
    let period = Duration::from_secs_f64(1.0 / o.rate);
    let mut next = tokio::time::Instant::now();
    for i in o.preexisting..total {
        tokio::time::sleep_until(next).await;
        next += period;
        tx.send(i).await.unwrap();
    }
    drop(tx);
    let last_pod_sent = Instant::now();
    for w in workers {
        tokio::time::timeout(o.wait_timeout, w)
            .await
            .expect("creating the pods timed out")
            .unwrap();
    }
    let last_pod = last_pod_sent;
    sc.created_in = Some(created_at.elapsed());
    sc.rss_created = Some(memory(live.server.pid()).unwrap().0);
    sc.review_failures = reviews.failures.load(Ordering::Relaxed);
    sc.first_review_failure = reviews.first_failure.lock().unwrap().clone();

    wait_for("every DLJob and Service", o.wait_timeout, || {
        srv.len("dljob.dev", "dljobs") >= o.jobs && srv.len("", "services") >= o.jobs
    })
    .await;
    sc.all_owned_after_last_pod = Some(last_pod.elapsed());
    sc.idle = Some(settle(o, live.server.pid()).await);
    finish(o, &mut sc, srv, live, dir, run);
    sc
}

/// Waits `--settle` seconds; the child's CPU over them, in % of a core.
async fn settle(o: &Options, pid: u32) -> f64 {
    let (cpu0, t0) = (cpu_seconds(pid).unwrap_or_default(), Instant::now());
    tokio::time::sleep(o.settle).await;
    let cpu = cpu_seconds(pid).unwrap_or_default() - cpu0;
    100.0 * cpu / t0.elapsed().as_secs_f64().max(1e-9)
}

/// Reviews a probe sends before it counts.
const PROBE_WARM_UP: usize = 10;

/// How long the settled probe runs, after the settle's idle measurement.
const PROBE_SETTLED: Duration = Duration::from_secs(10);

/// Ordinary reviews sent at `--probe-rate` on one connection until
/// stopped (after [`PROBE_WARM_UP`] not counted): their latencies.
struct Probe {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<Duration>>,
}

impl Probe {
    async fn start(o: &Options, server: &ServerProcess, generator: &Arc<Generator>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let mut client = connect(server.addr, &server.ca_pem).await;
        let (generator, halt) = (generator.clone(), stop.clone());
        let period = Duration::from_secs_f64(1.0 / o.probe_rate);
        let task = tokio::spawn(async move {
            let pod = generator.pod(0, "probe".into());
            let mut out = Vec::new();
            // The connection's first answers (the server's first reviews of
            // that pod) warm it up: not counted.
            for n in 0..PROBE_WARM_UP {
                let uid = format!("probe-warm-{n}");
                let body = generator.mutate_review(&pod, &uid);
                let _ = send(&mut client, Method::POST, "/mutate?timeout=10s", body).await;
            }
            let mut next = tokio::time::Instant::now();
            let mut n = 0u64;
            while !halt.load(Ordering::Relaxed) {
                let uid = format!("probe-{n}");
                n += 1;
                let body = generator.mutate_review(&pod, &uid);
                let t = Instant::now();
                let r = send(&mut client, Method::POST, "/mutate?timeout=10s", body).await;
                match review_ok(&r, &uid, true) {
                    Ok(()) => out.push(t.elapsed()),
                    Err(e) => eprintln!("replay: probe review {uid}: {e}"),
                }
                next += period;
                tokio::time::sleep_until(next).await;
            }
            out
        });
        Self { stop, task }
    }

    async fn stop(self) -> Vec<Duration> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap_or_default()
    }
}

/// The 99th percentile (nearest rank) of `v`, in ms.
fn p99_ms(v: &[Duration]) -> f64 {
    let mut v: Vec<f64> = v.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((v.len() as f64) * 0.99).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

async fn scenario_existing(
    o: &Options,
    srv: &Arc<ApiServer>,
    generator: &Arc<Generator>,
    dir: &Path,
    kubeconfig: &Path,
    run: usize,
) -> Scenario {
    let (mut sc, live) = start_child("existing", o, srv, dir, kubeconfig).await;
    let pid = live.server.pid();
    let probe = if o.probe_rate > 0.0 {
        Some(Probe::start(o, &live.server, generator).await)
    } else {
        None
    };
    let (cpu0, t0) = (cpu_seconds(pid).unwrap_or_default(), Instant::now());
    let mut client = connect(live.server.addr, &live.server.ca_pem).await;
    let deadline = t0 + o.wait_timeout;
    loop {
        if reconciles(&mut client).await.unwrap_or(0) >= o.jobs as u64 {
            let cpu = cpu_seconds(pid).unwrap_or_default() - cpu0;
            sc.resync = Some((t0.elapsed(), cpu));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "replay: {} jobs not reconciled within {:?}",
            o.jobs,
            o.wait_timeout
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let during = match probe {
        Some(p) => Some(p.stop().await),
        None => None,
    };
    // Idle: nothing sent to the child while it settles.
    sc.idle = Some(settle(o, pid).await);
    if let Some(during) = during {
        let p = Probe::start(o, &live.server, generator).await;
        tokio::time::sleep(PROBE_SETTLED).await;
        sc.probe = Some((during, p.stop().await));
    }
    finish(o, &mut sc, srv, live, dir, run);
    sc
}

fn print_scenario(o: &Options, sc: &Scenario) {
    let mib = kib_mib;
    println!("  scenario {}:", sc.name);
    println!(
        "    RSS: start {:.1} MiB | after LIST/sync {:.1} MiB ({:.1} s after start){} | peak {:.1} MiB | settled {:.1} MiB ({} s after) | VmHWM {:.1} MiB",
        mib(sc.rss_start),
        mib(sc.rss_synced),
        sc.synced_after.as_secs_f64(),
        sc.rss_created.map_or(String::new(), |r| format!(
            " | after creation {:.1} MiB (created in {:.1} s)",
            mib(r),
            sc.created_in.unwrap_or_default().as_secs_f64()
        )),
        mib(sc.rss_peak),
        mib(sc.rss_settled),
        o.settle.as_secs(),
        mib(sc.hwm),
    );
    if let Some(d) = sc.all_owned_after_last_pod {
        println!(
            "    every DLJob and Service existed {:.1} s after the last pod was created",
            d.as_secs_f64()
        );
    }
    if let Some((took, cpu)) = sc.resync {
        println!(
            "    resync: every DLJob reconciled once {:.1} s after the sync, {:.2} CPU s",
            took.as_secs_f64(),
            cpu
        );
    }
    if let Some((during, idle)) = &sc.probe {
        println!(
            "    webhook p99 (an ordinary pod's review, {}/s, one connection): {:.2} ms while the resync ran ({} reviews), {:.2} ms settled ({} reviews)",
            o.probe_rate,
            p99_ms(during),
            during.len(),
            p99_ms(idle),
            idle.len()
        );
    }
    if let Some(idle) = sc.idle {
        println!(
            "    idle: {idle:.2} % of a core (the child's CPU over the {} s settle)",
            o.settle.as_secs()
        );
    }
    println!(
        "    store: {} DLJobs, {} Services, {} Events; Lease holder {:?}; child exit: {}",
        sc.dljobs, sc.services, sc.events, sc.lease_holder, sc.exit
    );
    if o.webhook && sc.rss_created.is_some() {
        println!(
            "    webhook reviews failed: {}{}",
            sc.review_failures,
            sc.first_review_failure
                .as_ref()
                .map_or(String::new(), |f| format!(" (first: {f})"))
        );
    }
    // What the reconciler wrote and read for the jobs: leader election
    // (the Lease) and Events aside.
    let jobs_only = |verbs: &[&str]| -> u64 {
        sc.calls
            .iter()
            .filter(|((verb, res), _)| {
                verbs.iter().any(|v| verb.starts_with(v))
                    && !res.starts_with("leases")
                    && !res.starts_with("events")
            })
            .map(|(_, n)| n)
            .sum()
    };
    println!(
        "    writes for the jobs (create, update, patch, delete; no Lease, no Events): {} | reads of one object (get): {}",
        jobs_only(&["create", "update", "patch", "delete"]),
        jobs_only(&["get"]),
    );
    println!("    API calls by the child (verb resource: count):");
    for ((verb, res), n) in &sc.calls {
        println!("      {verb:<18} {res:<32} {n}");
    }
    println!("    watch streams open at the end / most open at once:");
    for (res, (open, max)) in &sc.watches {
        println!("      {res:<32} {open} / {max}");
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--help") {
        // `cargo test --benches` runs bench targets without `--bench`.
        println!("replay: a memory bench; run it with `cargo bench --bench replay -- [options]`");
        return;
    }
    let o = match parse_options(&args) {
        Ok(Some(o)) => o,
        Ok(None) => {
            println!("{HELP}");
            return;
        }
        Err(e) => {
            eprintln!("replay: {e}");
            std::process::exit(2);
        }
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let nproc = std::thread::available_parallelism().map_or(1, |n| n.get());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let generator = Arc::new(Generator::new(
        o.namespaces,
        o.tensorboard,
        o.gang.clone(),
        o.members,
        o.per_job,
    ));
    println!(
        "dljob replay: {} PyTorch jobs of {} ({}, {} pods each){}{} ({} pods, {} pre-existing) in {} namespaces, {}/s, webhook reviews {}, Running after {:.1} s, settle {} s, {} run(s), {nproc} CPUs shared with the child; binary {}{}",
        o.jobs,
        o.members.name(),
        generator.topology(),
        o.per_job,
        if o.tensorboard { ", TensorBoard" } else { "" },
        o.gang.as_ref().map_or(String::new(), |g| format!(", gang {g}")),
        o.jobs * o.per_job,
        o.preexisting,
        o.namespaces,
        o.rate,
        if o.webhook { "on" } else { "off" },
        o.running_after.as_secs_f64(),
        o.settle.as_secs(),
        o.runs,
        o.binary.display(),
        o.env.iter().map(|(k, v)| format!(" {k}={v}")).collect::<String>(),
    );
    {
        let p = generator.pod(1, "x".into());
        println!(
            "  pod as stored: {} B Pending, {} B Running (JSON); mutating review {} B",
            p.pending.to_string().len(),
            generator.running(1, &p.pending).to_string().len(),
            generator.mutate_review(&p, "x").len()
        );
    }
    let mut results: Vec<Vec<Scenario>> = Vec::new();
    for run in 1..=o.runs {
        let r = runtime.block_on(async {
            let srv = Arc::new(ApiServer::default());
            let addr = srv.start().await;
            let tmp = TempDir::new(&format!("run{run}"));
            let kubeconfig = write_kubeconfig(&tmp.0, addr);
            let mut out =
                vec![scenario_created(&o, &srv, &generator, &tmp.0, &kubeconfig, run).await];
            if o.restart {
                out.push(scenario_existing(&o, &srv, &generator, &tmp.0, &kubeconfig, run).await);
            }
            let unknown = srv.unknown();
            if !unknown.is_empty() {
                println!("  routes the fake API server does not serve (404): {unknown:?}");
            }
            out
        });
        println!("run {run}:");
        for sc in &r {
            print_scenario(&o, sc);
        }
        results.push(r);
    }
    if o.runs > 1 {
        println!("medians over {} runs:", o.runs);
        for (i, name) in results[0].iter().map(|s| s.name).enumerate() {
            let m =
                |f: &dyn Fn(&Scenario) -> f64| median(results.iter().map(|r| f(&r[i])).collect());
            let mut idle_and_probe = format!(
                "; idle {:.2} % of a core",
                m(&|s| s.idle.unwrap_or_default())
            );
            if results[0][i].probe.is_some() {
                idle_and_probe.push_str(&format!(
                    "; webhook p99 {:.2} ms during the resync, {:.2} ms settled",
                    m(&|s| s.probe.as_ref().map_or(f64::NAN, |p| p99_ms(&p.0))),
                    m(&|s| s.probe.as_ref().map_or(f64::NAN, |p| p99_ms(&p.1)))
                ));
            }
            println!(
                "  {name}: RSS start {:.1} | synced {:.1} | after creation {} | peak {:.1} | settled {:.1} | VmHWM {:.1} MiB{}{}",
                m(&|s| kib_mib(s.rss_start)),
                m(&|s| kib_mib(s.rss_synced)),
                if results[0][i].rss_created.is_some() {
                    format!("{:.1}", m(&|s| kib_mib(s.rss_created.unwrap_or(0))))
                } else {
                    "-".into()
                },
                m(&|s| kib_mib(s.rss_peak)),
                m(&|s| kib_mib(s.rss_settled)),
                m(&|s| kib_mib(s.hwm)),
                idle_and_probe,
                if results[0][i].all_owned_after_last_pod.is_some() {
                    format!("; all DLJobs/Services {:.1} s after the last pod", m(&|s| s.all_owned_after_last_pod.unwrap_or_default().as_secs_f64()))
                } else if results[0][i].resync.is_some() {
                    format!(
                        "; resync {:.1} s, {:.2} CPU s",
                        m(&|s| s.resync.unwrap_or_default().0.as_secs_f64()),
                        m(&|s| s.resync.unwrap_or_default().1)
                    )
                } else {
                    String::new()
                }
            );
        }
    }
    let failed: u64 = results.iter().flatten().map(|s| s.review_failures).sum();
    if failed > 0 {
        eprintln!("replay: {failed} webhook review(s) failed");
        std::process::exit(1);
    }
}
