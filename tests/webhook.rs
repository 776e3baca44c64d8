//! The real `dljob serve` server, started in-process on 127.0.0.1:0 and
//! spoken to over TLS by a rustls client that trusts the generated CA.
//!
//! Fixtures: `tests/fixtures/admission/` holds reviews captured from a
//! real kube-apiserver; `tests/fixtures/review-*.json` are real-shaped
//! reviews derived from them. Every test is bounded by a timeout; expected
//! values are computed by hand from ARCHITECTURE.md §2–§3 (host = `j-r-i.j.ns.svc`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use dljob::certs::CaOrigin;
use dljob::config::Config;
use dljob::object::Subject;
use dljob::validate::{NoPeers, PeerSource};
use dljob::webhook::{self, Inputs, Running, Settings, TlsSource};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::{http1, http2};
use hyper::{Request, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use prometheus_client::registry::Registry;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

const LIMIT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------- harness

fn tempdir(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "dljob-webhook-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn localhost() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

struct Server {
    running: Running,
    addr: SocketAddr,
    ca: String,
    _dir: TempDir,
}

/// Removes the directory (the self-signed CA a server wrote) when dropped:
/// tests leave no files behind.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A server with a self-signed certificate and the default config.
/// A server with default settings, a self-signed certificate whose CA is kept
/// at `ca_out`, and `peers`.
async fn run_self_signed(ca_out: PathBuf, peers: Arc<dyn PeerSource>) -> Running {
    let (config, _) = webhook::reload::watch_config(None, Duration::from_secs(1), None).unwrap();
    let tls = TlsSource::SelfSigned {
        ca_out,
        extra_sans: vec![],
    };
    webhook::run(
        Settings::new(localhost(), tls),
        Inputs { config, peers },
        Registry::default(),
    )
    .await
    .unwrap()
}

async fn start(tweak: impl FnOnce(&mut Settings)) -> Server {
    let (config, _) = webhook::reload::watch_config(None, Duration::from_secs(1), None).unwrap();
    start_with(tweak, config).await
}

async fn start_with(
    tweak: impl FnOnce(&mut Settings),
    config: tokio::sync::watch::Receiver<Config>,
) -> Server {
    start_on(tweak, config, Arc::new(NoPeers)).await
}

/// [`start_with`] whose peer checks are `peers`'.
async fn start_on(
    tweak: impl FnOnce(&mut Settings),
    config: tokio::sync::watch::Receiver<Config>,
    peers: Arc<dyn PeerSource>,
) -> Server {
    let dir = tempdir("ss");
    let mut settings = Settings::new(
        localhost(),
        TlsSource::SelfSigned {
            ca_out: dir.join("ca.pem"),
            extra_sans: vec!["dljob.example.test".into()],
        },
    );
    tweak(&mut settings);
    let running = webhook::run(settings, Inputs { config, peers }, Registry::default())
        .await
        .unwrap();
    let ca = running.ca_pem().expect("self-signed").to_owned();
    Server {
        addr: running.local_addr(),
        running,
        ca,
        _dir: TempDir(dir),
    }
}

fn tls_connector(ca_pem: &str, alpn: &[&[u8]]) -> TlsConnector {
    tls_connector_as(ca_pem, alpn, None)
}

/// A client certificate and its key (PEM).
type Identity = (String, String);

/// [`tls_connector`] that presents `identity`, when given.
fn tls_connector_as(ca_pem: &str, alpn: &[&[u8]], identity: Option<&Identity>) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let mut config = match identity {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                CertificateDer::pem_slice_iter(cert.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .unwrap(),
                rustls::pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    TlsConnector::from(Arc::new(config))
}

async fn tls(
    addr: SocketAddr,
    ca_pem: &str,
    alpn: &[&[u8]],
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    // As the API server's client: a request's HEADERS and DATA are not
    // held back by Nagle's algorithm.
    tcp.set_nodelay(true)?;
    tls_connector(ca_pem, alpn)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Proto {
    H1,
    H2,
}

#[derive(Clone)]
enum Sender {
    H1(Arc<tokio::sync::Mutex<http1::SendRequest<Full<Bytes>>>>),
    H2(http2::SendRequest<Full<Bytes>>),
}

/// One client connection (HTTP/1.1 keep-alive or HTTP/2).
#[derive(Clone)]
struct Conn {
    sender: Sender,
    peer_cert: Vec<u8>,
}

async fn connect(addr: SocketAddr, ca_pem: &str, proto: Proto) -> std::io::Result<Conn> {
    let alpn: &[&[u8]] = match proto {
        Proto::H1 => &[b"http/1.1"],
        Proto::H2 => &[b"h2"],
    };
    let stream = tls(addr, ca_pem, alpn).await?;
    let (_, session) = stream.get_ref();
    let peer_cert = session.peer_certificates().unwrap()[0].to_vec();
    let negotiated = session.alpn_protocol().map(<[u8]>::to_vec);
    let io = TokioIo::new(stream);
    let sender = match proto {
        Proto::H1 => {
            assert_eq!(negotiated.as_deref(), Some(&b"http/1.1"[..]));
            let (s, conn) = http1::handshake(io).await.map_err(std::io::Error::other)?;
            tokio::spawn(conn);
            Sender::H1(Arc::new(tokio::sync::Mutex::new(s)))
        }
        Proto::H2 => {
            assert_eq!(negotiated.as_deref(), Some(&b"h2"[..]));
            let (s, conn) = http2::handshake(TokioExecutor::new(), io)
                .await
                .map_err(std::io::Error::other)?;
            tokio::spawn(conn);
            Sender::H2(s)
        }
    };
    Ok(Conn { sender, peer_cert })
}

impl Conn {
    async fn send(
        &self,
        method: &str,
        path: &str,
        body: Vec<u8>,
    ) -> Result<(StatusCode, Bytes), hyper::Error> {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "localhost")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let resp = match &self.sender {
            Sender::H1(s) => {
                let mut s = s.lock().await;
                s.ready().await?;
                s.send_request(req).await?
            }
            Sender::H2(s) => {
                let mut s = s.clone();
                s.ready().await?;
                s.send_request(req).await?
            }
        };
        let status = resp.status();
        let body = resp.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }

    async fn post(&self, path: &str, body: &Value) -> (StatusCode, Value) {
        let (status, bytes) = self
            .send("POST", path, serde_json::to_vec(body).unwrap())
            .await
            .unwrap();
        assert_eq!(
            status,
            StatusCode::OK,
            "{}",
            String::from_utf8_lossy(&bytes)
        );
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    async fn get(&self, path: &str) -> (StatusCode, String) {
        let (s, b) = self.send("GET", path, Vec::new()).await.unwrap();
        (s, String::from_utf8(b.to_vec()).unwrap())
    }
}

/// Runs `f` bounded by [`LIMIT`].
async fn bounded<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, f)
        .await
        .expect("test timed out")
}

/// A captured AdmissionReview (`tests/fixtures/admission/`).
fn captured(name: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/admission/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}")))
        .unwrap()
}

fn local(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}")))
        .unwrap()
}

/// The decoded patch of a response; asserts the wire shape (`patchType`
/// and a base64 *string*, as the AdmissionReview v1 schema documents).
fn patch_of(response: &Value) -> Option<json_patch::Patch> {
    let r = &response["response"];
    match r.get("patch") {
        None => {
            assert!(r.get("patchType").is_none(), "patchType without patch: {r}");
            None
        }
        Some(Value::String(b64)) => {
            assert_eq!(r["patchType"], "JSONPatch");
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .expect("patch is base64");
            let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
            assert!(!patch.0.is_empty(), "an empty patch must be left out");
            Some(patch)
        }
        Some(other) => panic!("patch must be a base64 string, got {other}"),
    }
}

/// The review's object with the response's patch applied.
fn patched(review: &Value, response: &Value) -> Value {
    let mut object = review["request"]["object"].clone();
    if let Some(p) = patch_of(response) {
        json_patch::patch(&mut object, &p.0).expect("the patch applies to the object");
    }
    object
}

/// A review of `object` (the one before, re-sent as the API server does
/// with reinvocationPolicy IfNeeded).
fn review_again(review: &Value, object: Value, uid: &str) -> Value {
    let mut r = review.clone();
    r["request"]["object"] = object;
    r["request"]["uid"] = json!(uid);
    r
}

fn env_of(pod_spec: &Value, container: &str) -> BTreeMap<String, String> {
    let c = pod_spec["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == container)
        .unwrap_or_else(|| panic!("no container {container}"));
    c["env"]
        .as_array()
        .map(|env| {
            env.iter()
                .filter_map(|e| {
                    Some((
                        e["name"].as_str()?.to_owned(),
                        e["value"].as_str()?.to_owned(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn assert_allowed(resp: &Value, uid: &str) {
    assert_eq!(resp["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(resp["kind"], "AdmissionReview");
    assert_eq!(resp["response"]["uid"], uid);
    assert_eq!(resp["response"]["allowed"], true, "{resp}");
}

fn assert_denied(resp: &Value, uid: &str, code: u16, reason: &str, message_has: &str) {
    let r = &resp["response"];
    assert_eq!(r["uid"], uid);
    assert_eq!(r["allowed"], false, "{resp}");
    assert_eq!(r["status"]["code"], code, "{resp}");
    assert_eq!(r["status"]["reason"], reason, "{resp}");
    let msg = r["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains(message_has),
        "{msg:?} should contain {message_has:?}"
    );
    assert!(r.get("patch").is_none());
}

fn uid(review: &Value) -> String {
    review["request"]["uid"].as_str().unwrap().to_owned()
}

/// TF_CONFIG of the `resnet` job in `team-a` (chief=1,worker=2,ps=1; port 2222).
fn resnet_tf_config(role: &str, index: u32, port: u16) -> Value {
    let h = |r: &str, i: u32| format!("resnet-{r}-{i}.resnet.team-a.svc:{port}");
    json!({
        "cluster": {
            "chief": [h("chief", 0)],
            "worker": [h("worker", 0), h("worker", 1)],
            "ps": [h("ps", 0)],
        },
        "task": {"type": role, "index": index},
        "environment": "cloud",
    })
}

// ---------------------------------------------------------------- reviews

#[tokio::test]
async fn pod_create_is_patched_with_tf_config_and_a_second_review_yields_no_patch() {
    bounded(async {
        let s = start(|_| {}).await;
        let c = connect(s.addr, &s.ca, Proto::H2).await.unwrap();
        let review = captured("mutate-create-pod-resnet-chief.json");
        // The API server POSTs with a query string.
        let (_, resp) = c.post("/mutate?timeout=5s", &review).await;
        assert_allowed(&resp, &uid(&review));
        let pod = patched(&review, &resp);

        assert_eq!(pod["spec"]["hostname"], "resnet-chief-0");
        assert_eq!(pod["spec"]["subdomain"], "resnet");
        let env = env_of(&pod["spec"], "tensorflow");
        let tf: Value = serde_json::from_str(&env["TF_CONFIG"]).unwrap();
        assert_eq!(tf, resnet_tf_config("chief", 0, 2222));
        assert_eq!(env["DLJOB_JOB"], "resnet");
        assert_eq!(env["DLJOB_ROLE"], "chief");
        assert_eq!(env["DLJOB_INDEX"], "0");
        assert_eq!(env["DLJOB_WORLD_SIZE"], "4");
        assert_eq!(env["DLJOB_REPLICAS"], "chief=1,worker=2,ps=1");
        assert_eq!(env["DLJOB_HOST_PATTERN"], "resnet-{role}-{index}.resnet.team-a.svc");
        let ports = pod["spec"]["containers"][0]["ports"].as_array().unwrap();
        assert!(ports.contains(&json!({"name": "dljob", "containerPort": 2222, "protocol": "TCP"})));
        // The captured service-account volume and mount are kept.
        assert_eq!(pod["spec"]["volumes"][0], review["request"]["object"]["spec"]["volumes"][0]);

        let again = review_again(&review, pod, "second-review");
        let (_, resp) = c.post("/mutate", &again).await;
        assert_eq!(resp["response"], json!({"uid": "second-review", "allowed": true}));
    })
    .await
}

#[tokio::test]
async fn response_patch_is_a_base64_string_on_the_wire() {
    bounded(async {
        let s = start(|_| {}).await;
        let c = connect(s.addr, &s.ca, Proto::H1).await.unwrap();
        let review = captured("mutate-create-pod-resnet-ps.json");
        let (status, raw) = c
            .send("POST", "/mutate", serde_json::to_vec(&review).unwrap())
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK);
        let text = std::str::from_utf8(&raw).unwrap();
        assert!(
            text.contains(r#""patch":""#) && text.contains(r#""patchType":"JSONPatch""#),
            "{text}"
        );
        let v: Value = serde_json::from_str(text).unwrap();
        assert!(v["response"]["patch"].is_string());
    })
    .await
}

#[tokio::test]
async fn dry_run_gets_the_same_answer() {
    bounded(async {
        let s = start(|_| {}).await;
        let c = connect(s.addr, &s.ca, Proto::H2).await.unwrap();
        let dry = captured("mutate-create-pod-resnet-ps.json");
        assert_eq!(dry["request"]["dryRun"], true);
        let mut wet = dry.clone();
        wet["request"]["dryRun"] = json!(false);
        let (_, a) = c.post("/mutate", &dry).await;
        let (_, b) = c.post("/mutate", &wet).await;
        assert_eq!(a, b);
        let pod = patched(&dry, &a);
        let tf: Value =
            serde_json::from_str(&env_of(&pod["spec"], "tensorflow")["TF_CONFIG"]).unwrap();
        assert_eq!(tf, resnet_tf_config("ps", 0, 2222));

        let dry = captured("validate-create-pod-resnet-ps.json");
        let mut wet = dry.clone();
        wet["request"]["dryRun"] = json!(false);
        assert_eq!(
            c.post("/validate", &dry).await.1,
            c.post("/validate", &wet).await.1
        );
    })
    .await
}

#[tokio::test]
async fn statefulset_template_is_mutated_and_its_pods_get_identity_from_the_ordinal() {
    bounded(async {
        let s = start(|_| {}).await;
        let c = connect(s.addr, &s.ca, Proto::H1).await.unwrap();

        // The captured StatefulSet says everything but the port and gang it
        // is wired with; those are added on it and its template, and the
        // object as patched needs nothing more.
        let review = captured("mutate-create-statefulset-resnet-worker.json");
        let (_, resp) = c.post("/mutate", &review).await;
        assert_allowed(&resp, &uid(&review));
        let sts = patched(&review, &resp);
        for meta in [&sts["metadata"], &sts["spec"]["template"]["metadata"]] {
            assert_eq!(meta["annotations"]["dljob.dev/port"], "2222");
            assert_eq!(meta["annotations"]["dljob.dev/gang"], "none");
        }
        let (_, resp) = c
            .post("/mutate", &review_again(&review, sts, "resnet-again"))
            .await;
        assert_eq!(
            resp["response"],
            json!({"uid": "resnet-again", "allowed": true})
        );

        // One the API server defaulted to OrderedReady, without serviceName.
        let review = local("review-mutate-create-statefulset-mx-servers.json");
        let (_, resp) = c.post("/mutate", &review).await;
        assert_allowed(&resp, &uid(&review));
        let sts = patched(&review, &resp);
        assert_eq!(sts["spec"]["podManagementPolicy"], "Parallel");
        assert_eq!(sts["spec"]["serviceName"], "mx");
        assert_eq!(
            sts["spec"]["template"]["metadata"]["labels"],
            json!({"app": "mx-servers", "dljob.dev/job": "mx", "dljob.dev/role": "server"})
        );
        assert_eq!(
            sts["spec"]["template"]["metadata"]["annotations"]["dljob.dev/replicas"],
            "scheduler=1,server=2,worker=2"
        );
        let (_, resp) = c
            .post("/mutate", &review_again(&review, sts, "sts-again"))
            .await;
        assert_eq!(
            resp["response"],
            json!({"uid": "sts-again", "allowed": true})
        );

        // Its pod with ordinal 1: identity from the topology, not the pod name.
        let review = local("review-mutate-create-pod-mx-servers-1.json");
        let (_, resp) = c.post("/mutate", &review).await;
        assert_allowed(&resp, &uid(&review));
        let pod = patched(&review, &resp);
        assert_eq!(pod["spec"]["hostname"], "mx-server-1");
        assert_eq!(pod["spec"]["subdomain"], "mx");
        let env = env_of(&pod["spec"], "mxnet");
        for (k, v) in [
            ("DMLC_ROLE", "server"),
            ("DMLC_PS_ROOT_URI", "mx-scheduler-0.mx.ml.svc"),
            ("DMLC_PS_ROOT_PORT", "9091"),
            ("DMLC_NUM_SERVER", "2"),
            ("DMLC_NUM_WORKER", "2"),
            ("DMLC_USE_KUBERNETES", "1"),
            ("DLJOB_INDEX", "1"),
        ] {
            assert_eq!(env.get(k).map(String::as_str), Some(v), "{k}");
        }
        let (_, resp) = c
            .post("/mutate", &review_again(&review, pod, "pod-again"))
            .await;
        assert_eq!(
            resp["response"],
            json!({"uid": "pod-again", "allowed": true})
        );

        // The captured StatefulSet pod, ordinal 1 of worker=2.
        let review = captured("mutate-create-pod-resnet-worker-1.json");
        let (_, resp) = c.post("/mutate", &review).await;
        let pod = patched(&review, &resp);
        assert_eq!(pod["spec"]["hostname"], "resnet-worker-1");
        let tf: Value =
            serde_json::from_str(&env_of(&pod["spec"], "tensorflow")["TF_CONFIG"]).unwrap();
        assert_eq!(tf, resnet_tf_config("worker", 1, 2222));

        // Ordinal 2 after the StatefulSet was scaled past worker=2.
        for (path, name) in [
            ("/mutate", "mutate-create-pod-resnet-worker-2.json"),
            ("/validate", "validate-create-pod-resnet-worker-2.json"),
        ] {
            let review = captured(name);
            let (_, resp) = c.post(path, &review).await;
            assert_denied(
                &resp,
                &uid(&review),
                422,
                "Invalid",
                "scale StatefulSet \"resnet-worker\" back to 2",
            );
        }
    })
    .await
}

#[tokio::test]
async fn indexed_job_and_the_pods_of_its_mutated_template() {
    bounded(async {
        let s = start(|_| {}).await;
        let c = connect(s.addr, &s.ca, Proto::H2).await.unwrap();
        let job_review = captured("mutate-create-job-gpt-worker.json");
        let (_, resp) = c.post("/mutate", &job_review).await;
        assert_allowed(&resp, &uid(&job_review));
        let job = patched(&job_review, &resp);
        let template_annotations = job["spec"]["template"]["metadata"]["annotations"].clone();
        assert_eq!(template_annotations["dljob.dev/replicas"], "worker=2");
        let (_, resp) = c
            .post("/mutate", &review_again(&job_review, job, "job-again"))
            .await;
        assert_eq!(
            resp["response"],
            json!({"uid": "job-again", "allowed": true})
        );

        // As captured, the pods come from the unmutated template: denied
        // with a message that says what to do.
        let as_captured = captured("mutate-create-pod-gpt-worker-1.json");
        let (_, resp) = c.post("/mutate", &as_captured).await;
        assert_denied(
            &resp,
            &uid(&as_captured),
            422,
            "Invalid",
            "add dljob.dev/replicas to the template",
        );

        // The same pod created from the mutated template.
        for (name, index) in [
            ("mutate-create-pod-gpt-worker-0.json", 0),
            ("mutate-create-pod-gpt-worker-1.json", 1),
        ] {
            let mut review = captured(name);
            review["request"]["object"]["metadata"]["annotations"] = template_annotations.clone();
            review["request"]["object"]["metadata"]["annotations"]
                ["batch.kubernetes.io/job-completion-index"] = json!(index.to_string());
            let (_, resp) = c.post("/mutate", &review).await;
            assert_allowed(&resp, &uid(&review));
            let pod = patched(&review, &resp);
            assert_eq!(
                pod["metadata"]["name"],
                Value::Null,
                "generateName pods stay unnamed"
            );
            assert_eq!(pod["spec"]["hostname"], format!("gpt-worker-{index}"));
            assert_eq!(pod["spec"]["subdomain"], "gpt");
            let env = env_of(&pod["spec"], "jax");
            assert_eq!(
                env["JAX_COORDINATOR_ADDRESS"],
                "gpt-worker-0.gpt.team-a.svc:6666"
            );
            assert_eq!(env["JAX_NUM_PROCESSES"], "2");
            assert_eq!(env["JAX_PROCESS_ID"], index.to_string());
            let (_, resp) = c
                .post("/mutate", &review_again(&review, pod, "again"))
                .await;
            assert_eq!(resp["response"], json!({"uid": "again", "allowed": true}));
        }
    })
    .await
}

#[tokio::test]
async fn generate_name_pytorch_pod_uses_the_request_namespace() {
    bounded(async {
        let s = start(|_| {}).await;
        let c = connect(s.addr, &s.ca, Proto::H1).await.unwrap();
        let review = captured("mutate-create-pod-ddp-worker.json");
        let (_, resp) = c.post("/mutate", &review).await;
        assert_allowed(&resp, &uid(&review));
        let pod = patched(&review, &resp);
        let container = pod["spec"]["containers"][0]["name"].as_str().unwrap();
        let env = env_of(&pod["spec"], container);
        assert_eq!(env["MASTER_ADDR"], "ddp-worker-0.ddp.team-a.svc");
        assert_eq!(env["MASTER_PORT"], "23456");
        assert_eq!(env["WORLD_SIZE"], "1");
        assert_eq!(env["RANK"], "0");
        let (_, resp) = c
            .post(
                "/validate",
                &captured("validate-create-pod-ddp-worker-rkzbv.json"),
            )
            .await;
        assert_allowed(&resp, "e23f1ff1-e2a4-4de9-bd15-6cecb4460446");
    })
    .await
}

#[tokio::test]
async fn every_captured_validating_review_gets_its_decision() {
    bounded(async {
        let s = start(|_| {}).await;
        let c = connect(s.addr, &s.ca, Proto::H2).await.unwrap();
        for (name, allowed) in [
            ("validate-create-job-gpt-worker.json", true),
            ("validate-create-pod-ddp-worker-rkzbv.json", true),
            ("validate-create-pod-gpt-worker-0-fnczs.json", false),
            ("validate-create-pod-gpt-worker-1-qtb4g.json", false),
            ("validate-create-pod-resnet-chief.json", true),
            ("validate-create-pod-resnet-ps.json", true),
            ("validate-create-pod-resnet-worker-0.json", true),
            ("validate-create-pod-resnet-worker-1.json", true),
            ("validate-create-pod-resnet-worker-2.json", false),
            ("validate-create-statefulset-resnet-worker.json", true),
            ("validate-update-pod-resnet-chief.json", true),
            ("validate-update-statefulset-resnet-worker.json", false),
        ] {
            let review = captured(name);
            let (_, resp) = c.post("/validate", &review).await;
            assert_eq!(resp["response"]["uid"], uid(&review), "{name}");
            assert_eq!(resp["response"]["allowed"], allowed, "{name}: {resp}");
            assert!(
                resp["response"].get("patch").is_none(),
                "{name}: validate never patches"
            );
            if !allowed {
                assert_eq!(resp["response"]["status"]["code"], 422, "{name}");
            }
        }
    })
    .await
}

#[tokio::test]
async fn update_validates_identity_keys_and_mutates_only_what_is_missing() {
    bounded(async {
        let s = start(|_| {}).await;
        let c = connect(s.addr, &s.ca, Proto::H1).await.unwrap();

        // An annotation added to a running pod: allowed, nothing to patch.
        let review = captured("mutate-update-pod-resnet-chief.json");
        let (_, resp) = c.post("/mutate", &review).await;
        assert_eq!(
            resp["response"],
            json!({"uid": uid(&review), "allowed": true})
        );

        // A wired StatefulSet applied again unchanged (the captured UPDATE,
        // without its replicas change): no patch, so no spurious rollout.
        let mut review = captured("mutate-update-statefulset-resnet-worker.json");
        review["request"]["object"]["spec"]["replicas"] =
            review["request"]["oldObject"]["spec"]["replicas"].clone();
        let (_, resp) = c.post("/mutate", &review).await;
        assert_eq!(
            resp["response"],
            json!({"uid": uid(&review), "allowed": true})
        );

        // The role of an existing member changed.
        let review = local("review-validate-update-pod-resnet-chief-role-changed.json");
        let (_, resp) = c.post("/validate", &review).await;
        assert_denied(
            &resp,
            &uid(&review),
            422,
            "Invalid",
            "dljob.dev/role cannot change on an existing member",
        );
        assert!(resp["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .contains("delete and recreate"));

        // spec.replicas of a StatefulSet member patched from 2 to 3.
        let review = captured("validate-update-statefulset-resnet-worker.json");
        let (_, resp) = c.post("/validate", &review).await;
        assert_denied(
            &resp,
            &uid(&review),
            422,
            "Invalid",
            "StatefulSet replicas is 3",
        );

        // A StatefulSet whose template lost the job labels gets them back on UPDATE.
        let create = local("review-mutate-create-statefulset-mx-servers.json");
        let mut update = create.clone();
        update["request"]["operation"] = json!("UPDATE");
        update["request"]["uid"] = json!("sts-update");
        update["request"]["oldObject"] = create["request"]["object"].clone();
        let (_, resp) = c.post("/mutate", &update).await;
        assert_allowed(&resp, "sts-update");
        let sts = patched(&update, &resp);
        assert_eq!(
            sts["spec"]["template"]["metadata"]["labels"]["dljob.dev/job"],
            "mx"
        );
        assert_eq!(
            sts["spec"]["podManagementPolicy"], "OrderedReady",
            "podManagementPolicy is immutable: only CREATE sets it"
        );
    })
    .await
}

#[tokio::test]
async fn delete_connect_unknown_kinds_and_reviews_without_object_pass_untouched() {
    bounded(async {
        let s = start(|_| {}).await;
        let c = connect(s.addr, &s.ca, Proto::H2).await.unwrap();
        let delete = local("review-mutate-delete-pod-resnet-chief.json");
        assert!(delete["request"].get("object").is_none());
        let deployment = local("review-mutate-create-deployment-labelled.json");
        let mut connect_review = captured("mutate-create-pod-resnet-chief.json");
        connect_review["request"]["operation"] = json!("CONNECT");
        connect_review["request"]["subResource"] = json!("exec");
        connect_review["request"]["object"] = json!({"kind": "PodExecOptions", "apiVersion": "v1"});
        let mut status = captured("mutate-update-pod-resnet-chief.json");
        status["request"]["subResource"] = json!("status");
        status["request"]["object"]["metadata"]["labels"]["dljob.dev/role"] = json!("ps");
        for review in [delete, deployment, connect_review, status] {
            for path in ["/mutate", "/validate"] {
                let (_, resp) = c.post(path, &review).await;
                assert_eq!(
                    resp["response"],
                    json!({"uid": uid(&review), "allowed": true}),
                    "{path} {review}"
                );
            }
        }
        // CREATE with no object at all: a malformed review, denied as such.
        let mut review = captured("mutate-create-pod-resnet-chief.json");
        review["request"].as_object_mut().unwrap().remove("object");
        let (_, resp) = c.post("/mutate", &review).await;
        assert_denied(
            &resp,
            &uid(&review),
            400,
            "BadRequest",
            "request.object is missing",
        );
    })
    .await
}

/// `kubectl debug` adds an ephemeral container through the
/// `pods/ephemeralcontainers` subresource: the validating webhook judges it
/// as the pod's UPDATE — one mounting dljob's hostfile volume is refused,
/// a plain one is not.
#[tokio::test]
async fn debug_containers_may_not_mount_dljobs_volumes() {
    bounded(async {
        let s = start(|_| {}).await;
        let c = connect(s.addr, &s.ca, Proto::H2).await.unwrap();
        let debug = |mounts: Value| {
            let mut review = captured("validate-update-pod-resnet-chief.json");
            review["request"]["subResource"] = json!("ephemeralcontainers");
            review["request"]["object"]["spec"]["ephemeralContainers"] = json!([{
                "name": "debugger-x7k2p", "image": "busybox",
                "terminationMessagePolicy": "File", "volumeMounts": mounts
            }]);
            review
        };
        let review = debug(json!([{"name": "dljob-hostfile", "mountPath": "/h"}]));
        let (_, resp) = c.post("/validate", &review).await;
        assert_denied(
            &resp,
            &uid(&review),
            422,
            "Invalid",
            "ephemeral container \"debugger-x7k2p\" mounts volume \"dljob-hostfile\" at /h, which dljob reserves",
        );
        let review = debug(json!([]));
        let (_, resp) = c.post("/validate", &review).await;
        assert_allowed(&resp, &uid(&review));
        // The mutating webhook is not asked about debug containers.
        let (_, resp) = c.post("/mutate", &review).await;
        assert_eq!(resp["response"], json!({"uid": uid(&review), "allowed": true}));
    })
    .await
}

#[tokio::test]
async fn warnings_name_user_values_that_are_kept() {
    bounded(async {
        let s = start(|_| {}).await;
        let c = connect(s.addr, &s.ca, Proto::H1).await.unwrap();
        let mut review = captured("mutate-create-pod-resnet-chief.json");
        review["request"]["object"]["spec"]["containers"][0]["env"] =
            json!([{"name": "TF_CONFIG", "value": "{\"mine\":true}"}]);
        let (_, resp) = c.post("/mutate", &review).await;
        assert_allowed(&resp, &uid(&review));
        let warnings = resp["response"]["warnings"].as_array().expect("warnings");
        assert!(
            warnings
                .iter()
                .any(|w| w.as_str().unwrap().contains("TF_CONFIG")),
            "{warnings:?}"
        );
        let pod = patched(&review, &resp);
        assert_eq!(
            env_of(&pod["spec"], "tensorflow")["TF_CONFIG"],
            "{\"mine\":true}"
        );
    })
    .await
}

// ---------------------------------------------------------------- bad input

/// Writes `request` raw on a new HTTP/1.1 TLS connection and reads the
/// whole answer (the server closes the connection).
async fn raw_exchange(s: &Server, request: &[u8]) -> String {
    let mut stream = tls(s.addr, &s.ca, &[b"http/1.1"]).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out).await;
    String::from_utf8_lossy(&out).into_owned()
}

fn raw_post(path: &str, body: &[u8], extra_headers: &str) -> Vec<u8> {
    let mut r = format!(
        "POST {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n{extra_headers}\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

async fn still_serves(s: &Server) {
    let c = connect(s.addr, &s.ca, Proto::H1).await.unwrap();
    let review = captured("mutate-create-pod-resnet-chief.json");
    let (_, resp) = c.post("/mutate", &review).await;
    assert_allowed(&resp, &uid(&review));
}

#[tokio::test]
async fn malformed_bodies_get_400_or_a_denial_when_the_uid_is_known() {
    bounded(async {
        let s = start(|_| {}).await;
        let c = connect(s.addr, &s.ca, Proto::H1).await.unwrap();
        for (body, has) in [
            (&b""[..], "empty body"),
            (b"not json", "not JSON"),
            (b"{\"apiVersion\":", "not JSON"),
            (b"[1,2,3]", "no request"),
            (b"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\"}", "no request"),
            (b"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\",\"request\":{\"operation\":\"CREATE\"}}", "request.uid is missing"),
            (b"{\"request\":{\"uid\":42}}", "request.uid is missing"),
        ] {
            for path in ["/mutate", "/validate"] {
                let (status, text) = c.send("POST", path, body.to_vec()).await.unwrap();
                assert_eq!(status, StatusCode::BAD_REQUEST, "{body:?}");
                let text = String::from_utf8(text.to_vec()).unwrap();
                assert!(text.contains(has), "{text:?} should contain {has:?}");
            }
        }

        let mut review = captured("mutate-create-pod-resnet-chief.json");
        review["apiVersion"] = json!("admission.k8s.io/v1beta1");
        let (_, resp) = c.post("/mutate", &review).await;
        assert_denied(&resp, &uid(&review), 400, "BadRequest", "admissionReviewVersions");
        let mut review = captured("mutate-create-pod-resnet-chief.json");
        review["kind"] = json!("ConfigMap");
        let (_, resp) = c.post("/validate", &review).await;
        assert_denied(&resp, &uid(&review), 400, "BadRequest", "AdmissionReview admission.k8s.io/v1");
        let mut review = captured("mutate-create-pod-resnet-chief.json");
        review["request"]["kind"] = json!("Pod");
        let (_, resp) = c.post("/mutate", &review).await;
        assert_denied(&resp, &uid(&review), 400, "BadRequest", "malformed AdmissionReview request");

        let (status, _) = c.send("GET", "/mutate", Vec::new()).await.unwrap();
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
        let (status, _) = c.send("POST", "/nope", Vec::new()).await.unwrap();
        assert_eq!(status, StatusCode::NOT_FOUND);
        still_serves(&s).await;
    })
    .await
}

/// A labelled UPDATE review padded to `size` bytes with an annotation.
fn padded_update(size: usize) -> Vec<u8> {
    let mut review = captured("validate-update-pod-resnet-chief.json");
    let base = serde_json::to_vec(&review).unwrap().len();
    let pad = "x".repeat(size.saturating_sub(base + 40));
    review["request"]["object"]["metadata"]["annotations"]["example.com/padding"] = json!(pad);
    let body = serde_json::to_vec(&review).unwrap();
    assert!(body.len().abs_diff(size) < 100, "{} vs {size}", body.len());
    body
}

#[tokio::test]
async fn default_body_limit_is_3_mib() {
    bounded(async {
        let s = start(|_| {}).await;
        let c = connect(s.addr, &s.ca, Proto::H2).await.unwrap();
        let (status, body) = c
            .send("POST", "/validate", padded_update(2_900_000))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK);
        let resp: Value = serde_json::from_slice(&body).unwrap();
        assert_allowed(&resp, "028b152e-ae5d-4fda-8b50-1a4d665f9ced");

        let (status, _) = c
            .send("POST", "/validate", padded_update(3 * 1024 * 1024 + 1000))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        still_serves(&s).await;
    })
    .await
}

#[tokio::test]
async fn bodies_over_the_limit_get_413_declared_or_chunked() {
    bounded(async {
        let s = start(|s| s.max_body_bytes = 64 * 1024).await;
        // Declared by Content-Length beyond what is worth reading (16 MiB):
        // refused before the body is read.
        let answer = raw_exchange(
            &s,
            format!(
                "POST /mutate HTTP/1.1\r\nhost: localhost\r\ncontent-length: {}\r\n\r\n",
                20 * 1024 * 1024
            )
            .as_bytes(),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");

        // Chunked, no length: refused once the limit is passed.
        let mut req =
            b"POST /validate HTTP/1.1\r\nhost: localhost\r\ntransfer-encoding: chunked\r\n\r\n"
                .to_vec();
        for _ in 0..20 {
            req.extend_from_slice(format!("{:x}\r\n", 8192).as_bytes());
            req.extend_from_slice(&[b' '; 8192]);
            req.extend_from_slice(b"\r\n");
        }
        req.extend_from_slice(b"0\r\n\r\n");
        let answer = raw_exchange(&s, &req).await;
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
        assert!(answer.contains("--max-body-bytes"), "{answer}");

        // Over HTTP/2 too.
        let c = connect(s.addr, &s.ca, Proto::H2).await.unwrap();
        let (status, _) = c
            .send("POST", "/mutate", vec![b' '; 100 * 1024])
            .await
            .unwrap();
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);

        // curl over HTTP/2 gets the 413 and its message, not a stream reset
        // (it reported "(92) Stream error in the HTTP/2 framing layer" when
        // the answer came before the body was read).
        let dir = tempdir("curl-413");
        std::fs::write(dir.join("ca.pem"), &s.ca).unwrap();
        std::fs::write(dir.join("body"), vec![b'a'; 70 * 1024]).unwrap();
        let url = format!("https://localhost:{}/mutate", s.addr.port());
        let (ca, body) = (dir.join("ca.pem"), dir.join("body"));
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new("curl")
                .args(["-sS", "--max-time", "20", "--http2", "--cacert"])
                .arg(ca)
                .arg("--data-binary")
                .arg(format!("@{}", body.display()))
                .args(["-w", "\n%{http_code} %{http_version}"])
                .arg(url)
                .output()
        })
        .await
        .unwrap()
        .expect("curl runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            stdout,
            "dljob: request body is larger than 65536 bytes: raise --max-body-bytes\n\n413 2"
        );
        let _ = std::fs::remove_dir_all(dir);
        still_serves(&s).await;
    })
    .await
}

#[tokio::test]
async fn slow_and_stalled_clients_are_cut_off_and_the_server_keeps_serving() {
    bounded(async {
        let s = start(|s| s.read_timeout = Duration::from_millis(500)).await;

        // Headers sent, body stalled: 408.
        let review = serde_json::to_vec(&captured("mutate-create-pod-resnet-chief.json")).unwrap();
        let mut stream = tls(s.addr, &s.ca, &[b"http/1.1"]).await.unwrap();
        let full = raw_post("/mutate", &review, "");
        let head_and_some = full.len() - review.len() + 100;
        stream.write_all(&full[..head_and_some]).await.unwrap();
        let mut out = Vec::new();
        let _ = stream.read_to_end(&mut out).await;
        let answer = String::from_utf8_lossy(&out);
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");

        // Half a request line, then nothing: disconnected.
        let mut stream = tls(s.addr, &s.ca, &[b"http/1.1"]).await.unwrap();
        stream.write_all(b"POST /mut").await.unwrap();
        let mut out = Vec::new();
        let _ = stream.read_to_end(&mut out).await;

        // TCP connected, no TLS handshake: disconnected.
        let mut tcp = TcpStream::connect(s.addr).await.unwrap();
        let mut out = Vec::new();
        let _ = tcp.read_to_end(&mut out).await;
        assert!(out.is_empty());

        // HTTP/2 stream whose body stalls: 408 on that stream.
        let stream = tls(s.addr, &s.ca, &[b"h2"]).await.unwrap();
        let (mut sender, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        let (mut tx, body) = futures_channel_body();
        tx.send_data(Bytes::from_static(b"{\"apiVersion\":")).await;
        let req = Request::post("/mutate")
            .header("host", "localhost")
            .body(body)
            .unwrap();
        let resp = sender.send_request(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::REQUEST_TIMEOUT);
        drop(tx);

        still_serves(&s).await;
        let c = connect(s.addr, &s.ca, Proto::H1).await.unwrap();
        let (_, metrics) = c.get("/metrics").await;
        assert!(
            metrics.contains(
                r#"dljob_webhook_rejected_requests_total{endpoint="mutate",reason="timeout"} 2"#
            ),
            "{metrics}"
        );
    })
    .await
}

/// Waits until the server closes `stream` (end of stream or an error),
/// at most `within`; how long it took.
async fn closed_within(
    stream: &mut TlsStream<TcpStream>,
    within: Duration,
) -> Result<Duration, tokio::time::error::Elapsed> {
    let start = std::time::Instant::now();
    let mut buf = [0u8; 64];
    tokio::time::timeout(within, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await?;
    Ok(start.elapsed())
}

/// At the cap a new connection takes the place of the one that has waited
/// longest on its client (here: the first of ten silent ones); the others
/// stay open.
#[tokio::test]
async fn at_the_connection_cap_the_longest_waiting_connection_makes_room() {
    bounded(async {
        let s = start(|s| {
            s.connections = webhook::Limits {
                max_connections: 10,
                first_request: Duration::from_secs(60),
                idle: Duration::from_secs(60),
            }
        })
        .await;
        let mut open = Vec::new();
        for i in 0..10 {
            let alpn: &[&[u8]] = if i % 2 == 0 { &[b"http/1.1"] } else { &[b"h2"] };
            open.push(tls(s.addr, &s.ca, alpn).await.unwrap());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // An eleventh is served; the oldest silent one is closed for it.
        let c = connect(s.addr, &s.ca, Proto::H1).await.unwrap();
        let review = captured("mutate-create-pod-resnet-chief.json");
        let (_, resp) = c.post("/mutate", &review).await;
        assert_allowed(&resp, &uid(&review));
        closed_within(&mut open[0], Duration::from_secs(5))
            .await
            .expect("the oldest silent connection stayed open");
        for stream in &mut open[1..] {
            assert!(
                closed_within(stream, Duration::from_millis(50))
                    .await
                    .is_err(),
                "a younger connection was closed"
            );
        }
        let (_, metrics) = c.get("/metrics").await;
        assert_eq!(
            counter(
                &metrics,
                r#"dljob_webhook_connections_closed_total{reason="evicted"}"#
            ),
            1,
            "{metrics}"
        );
        assert!(
            metrics.contains("dljob_webhook_connections 10\n"),
            "{metrics}"
        );
    })
    .await
}

#[tokio::test]
async fn idle_connections_are_closed_at_their_deadlines() {
    bounded(async {
        let first = Duration::from_millis(500);
        let idle = Duration::from_millis(800);
        let s = start(|s| {
            s.connections = webhook::Limits {
                max_connections: 1024,
                first_request: first,
                idle,
            }
        })
        .await;

        // 200 connections that finish the TLS handshake (half h1, half h2)
        // and never send an HTTP byte: each is closed at its deadline.
        let mut idle_ones = Vec::new();
        for i in 0..200 {
            let alpn: &[&[u8]] = if i % 2 == 0 { &[b"http/1.1"] } else { &[b"h2"] };
            idle_ones.push(tls(s.addr, &s.ca, alpn).await.unwrap());
        }
        for stream in &mut idle_ones {
            closed_within(stream, Duration::from_secs(20))
                .await
                .expect("an idle connection stayed open");
        }
        drop(idle_ones);

        // A connection that keeps sending requests, each within the idle
        // timeout, stays open longer than the timeout; once it stops, it is
        // closed.
        let mut stream = tls(s.addr, &s.ca, &[b"http/1.1"]).await.unwrap();
        let started = std::time::Instant::now();
        while started.elapsed() < idle * 2 {
            stream
                .write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")
                .await
                .unwrap();
            let mut buf = [0u8; 256];
            let n = stream.read(&mut buf).await.unwrap();
            assert!(
                buf[..n].starts_with(b"HTTP/1.1 200"),
                "{}",
                String::from_utf8_lossy(&buf[..n])
            );
            tokio::time::sleep(idle / 4).await;
        }
        closed_within(&mut stream, Duration::from_secs(20))
            .await
            .expect("the connection stayed open after its last request");

        let c = connect(s.addr, &s.ca, Proto::H1).await.unwrap();
        let (_, metrics) = c.get("/metrics").await;
        for (reason, n) in [("first_request_timeout", 200), ("idle_timeout", 1)] {
            assert_eq!(
                counter(
                    &metrics,
                    &format!(r#"dljob_webhook_connections_closed_total{{reason="{reason}"}}"#)
                ),
                n,
                "{reason}: {metrics}"
            );
        }
        assert!(
            metrics.contains("dljob_webhook_connections 1\n"),
            "{metrics}"
        );
    })
    .await
}

/// A server whose budget of bytes in flight for big bodies (over 256 KiB)
/// is one body of 600 000 bytes.
async fn budget_of_one_body(timeout: Duration) -> Server {
    start(|s| {
        s.read_timeout = timeout;
        s.max_body_bytes = 600_000;
        s.max_body_bytes_in_flight = 600_000;
    })
    .await
}

/// The captured review with a 300 000-byte annotation: a big body.
fn big_review() -> Value {
    let mut review = captured("mutate-create-pod-resnet-chief.json");
    review["request"]["object"]["metadata"]["annotations"]["example.com/pad"] =
        json!("x".repeat(300_000));
    review
}

/// Opens a client that declares 600 000 bytes and sends 599 990: all the
/// big bodies' room, held until the read timeout.
async fn hog_the_big_lane(s: &Server) -> TlsStream<TcpStream> {
    let mut hog = tls(s.addr, &s.ca, &[b"http/1.1"]).await.unwrap();
    hog.write_all(
        b"POST /mutate HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 600000\r\n\r\n",
    )
    .await
    .unwrap();
    hog.write_all(&vec![b' '; 599_990]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    hog
}

/// Big request bodies share one budget of bytes in flight, taken as the
/// bytes arrive. A client that stalls holding all of it is evicted for a
/// newer request once it has sent nothing for 50 ms, and its room handed
/// over: the newer review is answered long before the read timeout, and
/// the stalled client's connection is closed without an answer.
#[tokio::test]
async fn a_stalled_body_gives_its_room_to_a_newer_request() {
    bounded(async {
        let timeout = Duration::from_secs(5);
        let s = budget_of_one_body(timeout).await;
        // The newer request's client has read an answer before (as the API
        // server's connections have): only such a client evicts others.
        let c = connect(s.addr, &s.ca, Proto::H1).await.unwrap();
        let first = captured("mutate-create-pod-resnet-chief.json");
        let (_, resp) = c.post("/mutate", &first).await;
        assert_allowed(&resp, &uid(&first));
        let mut hog = hog_the_big_lane(&s).await;
        let review = big_review();
        let asked = std::time::Instant::now();
        let (_, resp) = c.post("/mutate", &review).await;
        assert_allowed(&resp, &uid(&review));
        let took = asked.elapsed();
        assert!(
            took < timeout / 2,
            "answered after {took:?}: the stalled body was not evicted"
        );
        let mut out = Vec::new();
        let _ = hog.read_to_end(&mut out).await;
        assert!(out.is_empty(), "{}", String::from_utf8_lossy(&out));
        let (_, metrics) = c.get("/metrics").await;
        assert_eq!(
            counter(
                &metrics,
                r#"dljob_webhook_connections_closed_total{reason="evicted"}"#
            ),
            1,
            "{metrics}"
        );
    })
    .await
}

/// An ordinary review (a body of at most 256 KiB) has a lane of its own:
/// answered at once while a client that keeps sending (so is never the one
/// waiting longest) holds all of the big bodies' room and another big one
/// waits for it (before, one budget served its waiters in order, so the
/// small review waited behind the big one until the hog timed out).
#[tokio::test]
async fn an_ordinary_review_does_not_wait_behind_big_bodies() {
    bounded(async {
        let timeout = Duration::from_secs(3);
        let s = budget_of_one_body(timeout).await;
        // 500 000 of a declared 600 000 bytes, then a byte every 10 ms:
        // most of the room, never stalled (so never evicted), and cut at
        // the read timeout.
        let mut hog = tls(s.addr, &s.ca, &[b"http/1.1"]).await.unwrap();
        hog.write_all(
            b"POST /mutate HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 600000\r\n\r\n",
        )
        .await
        .unwrap();
        hog.write_all(&vec![b' '; 500_000]).await.unwrap();
        let hogging = tokio::spawn(async move {
            while hog.write_all(b" ").await.is_ok() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        let big = tokio::spawn({
            let (addr, ca) = (s.addr, s.ca.clone());
            async move {
                let c = connect(addr, &ca, Proto::H1).await.unwrap();
                c.post("/mutate", &big_review()).await
            }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let took = ordinary_review_answered(&s).await;
        assert!(
            took < timeout / 3,
            "answered after {took:?}, behind the big bodies"
        );
        assert!(!big.is_finished(), "the big review did not wait for room");
        // The big one is answered once the hog's body is cut at the read
        // timeout.
        let (status, resp) = big.await.unwrap();
        assert_eq!(status, StatusCode::OK);
        assert_eq!(resp["response"]["allowed"], true);
        hogging.abort();
    })
    .await
}

/// A declared length is not room taken: clients that each declare the
/// whole budget and send a byte hold a byte each, and a review is answered
/// while they wait (before any of them times out).
#[tokio::test]
async fn a_declared_length_holds_no_budget_until_its_bytes_come() {
    bounded(async {
        let timeout = Duration::from_secs(5);
        let s = budget_of_one_body(timeout).await;
        let mut hogs = Vec::new();
        for _ in 0..4 {
            let mut hog = tls(s.addr, &s.ca, &[b"http/1.1"]).await.unwrap();
            hog.write_all(
                b"POST /mutate HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 200000\r\n\r\n{",
            )
            .await
            .unwrap();
            hogs.push(hog);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let took = ordinary_review_answered(&s).await;
        assert!(
            took < timeout / 2,
            "answered after {took:?}: the declared lengths held the budget"
        );
        drop(hogs);
    })
    .await
}

/// Sends the captured chief review on a new connection, checks that it is
/// allowed, and returns how long the answer took.
async fn ordinary_review_answered(s: &Server) -> Duration {
    let c = connect(s.addr, &s.ca, Proto::H1).await.unwrap();
    let review = captured("mutate-create-pod-resnet-chief.json");
    let asked = std::time::Instant::now();
    let (_, resp) = c.post("/mutate", &review).await;
    assert_allowed(&resp, &uid(&review));
    asked.elapsed()
}

/// A request body fed chunk by chunk from the test.
fn futures_channel_body() -> (BodyTx, http_body_util::StreamBody<tokio_stream_like::Rx>) {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    (
        BodyTx(tx),
        http_body_util::StreamBody::new(tokio_stream_like::Rx(rx)),
    )
}

struct BodyTx(tokio::sync::mpsc::Sender<Result<hyper::body::Frame<Bytes>, std::io::Error>>);

impl BodyTx {
    async fn send_data(&mut self, b: Bytes) {
        self.0.send(Ok(hyper::body::Frame::data(b))).await.unwrap();
    }
}

mod tokio_stream_like {
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use hyper::body::{Bytes, Frame};

    pub(crate) struct Rx(pub tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, std::io::Error>>);

    impl futures::Stream for Rx {
        type Item = Result<Frame<Bytes>, std::io::Error>;
        fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
            self.0.poll_recv(cx)
        }
    }
}

// ---------------------------------------------------------------- concurrency

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_concurrent_reviews_each_get_their_own_uid() {
    bounded(async {
        let s = start(|_| {}).await;
        let mut conns = Vec::new();
        for i in 0..4 {
            conns.push(
                connect(s.addr, &s.ca, if i < 3 { Proto::H2 } else { Proto::H1 })
                    .await
                    .unwrap(),
            );
        }
        let template = captured("mutate-create-pod-resnet-worker-0.json");
        let reviews = (0..500).map(|i| {
            let conn = conns[i % 4].clone();
            let mut review = template.clone();
            review["request"]["uid"] = json!(format!("concurrent-{i}"));
            async move {
                let (_, resp) = conn.post("/mutate", &review).await;
                (i, resp)
            }
        });
        let answers = futures::future::join_all(reviews).await;
        assert_eq!(answers.len(), 500);
        let first_patch = answers[0].1["response"]["patch"].clone();
        for (i, resp) in answers {
            assert_allowed(&resp, &format!("concurrent-{i}"));
            assert_eq!(resp["response"]["patch"], first_patch);
        }
    })
    .await
}

// ---------------------------------------------------------------- TLS

fn write_atomically(path: &Path, contents: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The value of the sample `series` in a metrics text (0 when absent).
fn counter(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0)
}

fn der_of(pem: &str) -> Vec<u8> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .unwrap()
        .unwrap()
        .to_vec()
}

#[tokio::test]
async fn certificate_files_are_reloaded_without_dropping_open_connections() {
    bounded(async {
        let dir = tempdir("rotate");
        let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        let sans = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
        let first = dljob::certs::generate(&sans, 30).unwrap();
        write_atomically(&cert, &first.cert_pem);
        write_atomically(&key, &first.key_pem);
        let mut settings = Settings::new(
            localhost(),
            TlsSource::Files {
                cert: cert.clone(),
                key: key.clone(),
            },
        );
        settings.reload_interval = Duration::from_millis(100);
        settings.read_timeout = Duration::from_secs(30);
        let (config, _) =
            webhook::reload::watch_config(None, Duration::from_secs(1), None).unwrap();
        let running = webhook::run(
            settings,
            Inputs {
                config,
                peers: Arc::new(NoPeers),
            },
            Registry::default(),
        )
        .await
        .unwrap();
        assert!(running.ca_pem().is_none());
        let addr = running.local_addr();

        let old_h1 = connect(addr, &first.ca_pem, Proto::H1).await.unwrap();
        let old_h2 = connect(addr, &first.ca_pem, Proto::H2).await.unwrap();
        assert_eq!(old_h1.peer_cert, der_of(&first.cert_pem));
        assert_eq!(old_h1.get("/healthz").await.0, StatusCode::OK);

        // Rotate: a new CA and certificate, as a Secret update would.
        let second = dljob::certs::generate(&sans, 30).unwrap();
        write_atomically(&key, &second.key_pem);
        write_atomically(&cert, &second.cert_pem);
        let fresh = loop {
            if let Ok(c) = connect(addr, &second.ca_pem, Proto::H1).await {
                break c;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(fresh.peer_cert, der_of(&second.cert_pem));
        assert!(
            connect(addr, &first.ca_pem, Proto::H1).await.is_err(),
            "new connections get the new certificate"
        );

        // Connections opened before the rotation keep working.
        let review = captured("mutate-create-pod-resnet-chief.json");
        for c in [&old_h1, &old_h2, &fresh] {
            let (_, resp) = c.post("/mutate", &review).await;
            assert_allowed(&resp, &uid(&review));
        }

        // A broken certificate file is refused; the last good one stays.
        let failures =
            |m: &str| counter(m, r#"dljob_webhook_tls_reloads_total{outcome="failure"}"#);
        let before = failures(&fresh.get("/metrics").await.1);
        std::fs::write(&cert, "not a certificate").unwrap();
        while failures(&fresh.get("/metrics").await.1) == before {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let c = connect(addr, &second.ca_pem, Proto::H2).await.unwrap();
        assert_eq!(c.peer_cert, der_of(&second.cert_pem));
        assert_eq!(c.get("/readyz").await.0, StatusCode::OK);
        running.shutdown(Duration::from_secs(5)).await.unwrap();
        let _ = std::fs::remove_dir_all(dir);
    })
    .await
}

#[tokio::test]
async fn self_signed_ca_is_written_and_both_http_versions_are_served() {
    bounded(async {
        let s = start(|_| {}).await;
        let written = std::fs::read_to_string(s._dir.0.join("ca.pem")).unwrap();
        assert_eq!(written, s.ca);
        for proto in [Proto::H1, Proto::H2] {
            let c = connect(s.addr, &s.ca, proto).await.unwrap();
            assert_eq!(c.get("/healthz").await, (StatusCode::OK, "ok\n".into()));
            assert_eq!(c.get("/readyz").await, (StatusCode::OK, "ok\n".into()));
        }
        // Clients naming 127.0.0.1 or an extra SAN are served too; others not.
        for (name, ok) in [
            ("127.0.0.1", true),
            ("dljob.example.test", true),
            ("example.com", false),
        ] {
            let tcp = TcpStream::connect(s.addr).await.unwrap();
            let server_name = ServerName::try_from(name).unwrap();
            let handshake = tls_connector(&s.ca, &[b"h2"])
                .connect(server_name, tcp)
                .await;
            assert_eq!(handshake.is_ok(), ok, "{name}");
        }
    })
    .await
}

// ---------------------------------------------------------------- config, metrics, shutdown

#[tokio::test]
async fn config_file_is_reloaded_and_an_invalid_one_is_ignored() {
    bounded(async {
        let dir = tempdir("config");
        let path = dir.join("config.yaml");
        std::fs::write(&path, "ports:\n  tensorflow: 3333\n").unwrap();
        let interval = Duration::from_millis(100);
        let (config, task) =
            webhook::reload::watch_config(Some(path.clone()), interval, None).unwrap();
        let s = start_with(|_| {}, config).await;
        let c = connect(s.addr, &s.ca, Proto::H2).await.unwrap();
        let review = captured("mutate-create-pod-resnet-chief.json");
        let tf_port = || async {
            let (_, resp) = c.post("/mutate", &review).await;
            let pod = patched(&review, &resp);
            let tf: Value =
                serde_json::from_str(&env_of(&pod["spec"], "tensorflow")["TF_CONFIG"]).unwrap();
            let host = tf["cluster"]["chief"][0].as_str().unwrap().to_owned();
            host.rsplit(':').next().unwrap().parse::<u16>().unwrap()
        };
        assert_eq!(tf_port().await, 3333);

        write_atomically(&path, "ports:\n  tensorflow: 4444\n");
        while tf_port().await != 4444 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        // Invalid: an unknown key. The previous config stays in force for
        // as long as the file is broken (checked over several reloads).
        write_atomically(&path, "ports:\n  tensorflow: 5555\nbogus: true\n");
        for _ in 0..10 {
            assert_eq!(tf_port().await, 4444);
            tokio::time::sleep(interval / 2).await;
        }
        write_atomically(&path, "");
        while tf_port().await != 2222 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        task.abort();
        let _ = std::fs::remove_dir_all(dir);
    })
    .await
}

#[tokio::test]
async fn metrics_count_reviews_by_endpoint_kind_operation_and_decision() {
    bounded(async {
        let s = start(|_| {}).await;
        let c = connect(s.addr, &s.ca, Proto::H1).await.unwrap();
        c.post("/mutate", &captured("mutate-create-pod-resnet-chief.json")).await;
        c.post("/mutate", &captured("mutate-create-pod-resnet-ps.json")).await;
        c.post("/validate", &captured("validate-update-statefulset-resnet-worker.json")).await;
        c.send("POST", "/mutate", b"nope".to_vec()).await.unwrap();
        let (status, m) = c.get("/metrics").await;
        assert_eq!(status, StatusCode::OK);
        for line in [
            r#"dljob_webhook_reviews_total{endpoint="mutate",kind="Pod",operation="CREATE",allowed="true"} 2"#,
            r#"dljob_webhook_reviews_total{endpoint="validate",kind="StatefulSet",operation="UPDATE",allowed="false"} 1"#,
            // The denial's rule: the StatefulSet was scaled past its role.
            r#"dljob_webhook_denials_total{endpoint="validate",rule="SizeMismatch"} 1"#,
            r#"dljob_webhook_rejected_requests_total{endpoint="mutate",reason="bad_request"} 1"#,
            r#"dljob_webhook_review_duration_seconds_count{endpoint="mutate"} 3"#,
            r#"dljob_webhook_review_duration_seconds_count{endpoint="validate"} 1"#,
        ] {
            assert!(m.lines().any(|l| l == line), "missing {line:?} in\n{m}");
        }
        assert!(m.contains("# TYPE dljob_webhook_review_duration_seconds histogram"));
        assert!(m.trim_end().ends_with("# EOF"));
    })
    .await
}

/// With --metrics-listen, /metrics moves to its own plain-HTTP port (for a
/// NetworkPolicy to open to the scraper alone) and leaves the webhook port.
#[tokio::test]
async fn metrics_can_have_a_port_of_their_own() {
    bounded(async {
        let s = start(|s| s.metrics_listen = Some(localhost())).await;
        let at = s.running.metrics_addr().expect("a metrics port");
        assert_ne!(at, s.addr);
        let c = connect(s.addr, &s.ca, Proto::H2).await.unwrap();
        c.post("/mutate", &captured("mutate-create-pod-resnet-chief.json")).await;
        assert_eq!(c.get("/metrics").await.0, StatusCode::NOT_FOUND);
        assert_eq!(c.get("/healthz").await.0, StatusCode::OK);
        let mut tcp = TcpStream::connect(at).await.unwrap();
        tcp.write_all(b"GET /metrics HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = Vec::new();
        tcp.read_to_end(&mut out).await.unwrap();
        let text = String::from_utf8_lossy(&out);
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        assert!(
            text.contains(r#"dljob_webhook_reviews_total{endpoint="mutate",kind="Pod",operation="CREATE",allowed="true"} 1"#),
            "{text}"
        );
        // Only /metrics there: no reviews over plain HTTP.
        let mut tcp = TcpStream::connect(at).await.unwrap();
        tcp.write_all(&raw_post("/mutate", b"{}", "")).await.unwrap();
        let mut out = Vec::new();
        tcp.read_to_end(&mut out).await.unwrap();
        assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 404"));
    })
    .await
}

#[tokio::test]
async fn during_the_drain_reviews_are_served_on_h1_and_h2_while_readyz_is_503() {
    bounded(async {
        let s = start(|_| {}).await;
        let Server {
            running,
            addr,
            ca,
            _dir,
        } = s;
        let h2 = connect(addr, &ca, Proto::H2).await.unwrap();
        let review = captured("mutate-create-pod-resnet-chief.json");
        let drain = tokio::spawn(running.drain(Duration::from_secs(2), Duration::from_secs(5)));
        // Not ready at once...
        while h2.get("/readyz").await.0 == StatusCode::OK {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            h2.get("/readyz").await,
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "draining: shutting down\n".into()
            )
        );
        // ...but every review is still answered, on an open connection and on
        // a new one of either protocol.
        let h1 = connect(addr, &ca, Proto::H1).await.unwrap();
        for c in [&h2, &h1] {
            let (status, resp) = c.post("/mutate", &review).await;
            assert_eq!(status, StatusCode::OK);
            assert_allowed(&resp, &uid(&review));
        }
        assert!(!drain.is_finished(), "still draining");
        drain.await.unwrap().unwrap();
        assert!(
            TcpStream::connect(addr).await.is_err(),
            "stopped after the drain"
        );
    })
    .await
}

#[tokio::test]
async fn the_dev_ca_is_reused_across_restarts_and_replaced_when_unusable() {
    bounded(async {
        let dir = tempdir("ca-reuse");
        let ca_out = dir.join("dev-ca.pem");
        let key = dir.join("dev-ca.key");
        let load = || {
            webhook::tls::load(
                &TlsSource::SelfSigned {
                    ca_out: ca_out.clone(),
                    extra_sans: vec![],
                },
                None,
            )
            .unwrap()
        };
        let first = load();
        assert!(matches!(first.ca_origin, Some(CaOrigin::Created(_))));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&key).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "the CA key is private");
        }
        // A restart presents the same CA (and a server signed by it).
        let second = load();
        assert_eq!(second.ca_origin, Some(CaOrigin::Reused));
        assert_eq!(second.ca_pem, first.ca_pem);
        let written = std::fs::read_to_string(&ca_out).unwrap();
        assert_eq!(Some(written), first.ca_pem.clone());
        let running = run_self_signed(ca_out.clone(), Arc::new(NoPeers)).await;
        let c = connect(running.local_addr(), first.ca_pem.as_ref().unwrap(), Proto::H2)
            .await
            .expect("the first run's CA verifies the restarted server");
        assert_eq!(c.get("/healthz").await.0, StatusCode::OK);
        running.shutdown(Duration::from_secs(1)).await.unwrap();

        // A key that is not the CA's: a new CA, and the reason.
        let other = rcgen::KeyPair::generate().unwrap().serialize_pem();
        std::fs::write(&key, other).unwrap();
        let third = load();
        assert_eq!(
            third.ca_origin,
            Some(CaOrigin::Created(format!(
                "{} does not hold the key of {}",
                key.display(),
                ca_out.display()
            )))
        );
        assert_ne!(third.ca_pem, first.ca_pem);

        // An expired CA: a new one.
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        let old_key = rcgen::KeyPair::generate().unwrap();
        let old = params.self_signed(&old_key).unwrap();
        std::fs::write(&ca_out, old.pem()).unwrap();
        std::fs::write(&key, old_key.serialize_pem()).unwrap();
        let fourth = load();
        assert_eq!(
            fourth.ca_origin,
            Some(CaOrigin::Created(format!(
                "{} has expired or expires within a day",
                ca_out.display()
            )))
        );
        // Nothing there: a new one, saying so.
        std::fs::remove_file(&key).unwrap();
        let fifth = load();
        assert!(
            matches!(&fifth.ca_origin, Some(CaOrigin::Created(why)) if why.starts_with(&format!("{} not readable", key.display()))),
            "{:?}",
            fifth.ca_origin
        );
        let _ = std::fs::remove_dir_all(dir);
    })
    .await
}

#[tokio::test]
async fn graceful_shutdown_finishes_in_flight_reviews_and_stops_accepting() {
    bounded(async {
        let s = start(|_| {}).await;
        let Server {
            running,
            addr,
            ca,
            _dir,
        } = s;
        let review = captured("mutate-create-pod-resnet-chief.json");
        let body = serde_json::to_vec(&review).unwrap();
        let full = raw_post("/mutate", &body, "");
        let split = full.len() - body.len() + 10;

        // A review whose body is still arriving when the shutdown starts.
        let mut stream = tls(addr, &ca, &[b"http/1.1"]).await.unwrap();
        stream.write_all(&full[..split]).await.unwrap();
        stream.flush().await.unwrap();
        let idle = connect(addr, &ca, Proto::H2).await.unwrap();
        assert_eq!(idle.get("/healthz").await.0, StatusCode::OK);
        let shutdown = tokio::spawn(running.shutdown(Duration::from_secs(30)));
        while TcpStream::connect(addr).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!shutdown.is_finished(), "waits for the in-flight review");
        stream.write_all(&full[split..]).await.unwrap();
        let mut out = Vec::new();
        stream.read_to_end(&mut out).await.unwrap();
        let answer = String::from_utf8_lossy(&out);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(
            answer.contains(&format!("\"uid\":\"{}\"", uid(&review))),
            "{answer}"
        );
        shutdown.await.unwrap().unwrap();
    })
    .await
}

// ---------------------------------------------------------------- the binary

/// `dljob serve` as a process with no cluster, JSON logs at INFO on a
/// channel, the drain `drain_seconds` long.
#[cfg(unix)]
fn spawn_serve(
    dir: &std::path::Path,
    ca_path: &std::path::Path,
    drain_seconds: &str,
) -> (
    std::process::Child,
    tokio::sync::mpsc::UnboundedReceiver<Value>,
) {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_dljob"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--log-format",
            "json",
            "--drain-seconds",
            drain_seconds,
            "--self-signed-ca-out",
        ])
        .arg(ca_path)
        .env("KUBECONFIG", dir.join("no-such-kubeconfig"))
        .env("HOME", dir)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let line = line.unwrap();
            let v: Value =
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            if tx.send(v).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

/// The next log line whose message starts with `prefix`.
#[cfg(unix)]
async fn logged(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Value>, prefix: &str) -> Value {
    loop {
        let line = rx.recv().await.expect("the server logs on");
        if line["message"].as_str().unwrap_or("").starts_with(prefix) {
            return line;
        }
    }
}

/// Waits for the serve process to exit, which must be with 0, and removes
/// its directory.
#[cfg(unix)]
async fn exits_0(mut child: std::process::Child, dir: std::path::PathBuf) {
    let exit = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert_eq!(exit.code(), Some(0));
    let _ = std::fs::remove_dir_all(dir);
}

/// Ctrl-C at a terminal starts the drain; a second one stops at once
/// rather than after `--drain-seconds` (here longer than the test may
/// take).
#[cfg(unix)]
#[tokio::test]
async fn a_second_interrupt_stops_serve_without_the_rest_of_the_drain() {
    bounded(async {
        let dir = tempdir("second-signal");
        let (child, mut rx) = spawn_serve(&dir, &dir.join("ca.pem"), "600");
        logged(&mut rx, "webhook listening").await;
        let interrupt = || {
            let status = std::process::Command::new("kill")
                .arg("-INT")
                .arg(child.id().to_string())
                .status()
                .unwrap();
            assert!(status.success());
        };
        interrupt();
        let line = logged(&mut rx, "draining").await;
        assert_eq!(line["drain_seconds"], 600);
        assert!(line["message"]
            .as_str()
            .unwrap()
            .contains("a second Ctrl-C or SIGTERM stops at once"));
        interrupt();
        let line = logged(&mut rx, "stopping without the rest of the drain").await;
        assert_eq!(line["signal"], "SIGINT");
        exits_0(child, dir).await;
    })
    .await
}

/// `dljob serve` as a process: no cluster reachable, JSON logs, a line for
/// a denial but none for a plain allowed review, a drain then exit 0 on
/// SIGTERM.
#[cfg(unix)]
#[tokio::test]
async fn serve_binary_runs_alone_without_a_cluster_logs_json_and_exits_0_on_sigterm() {
    use std::process::Command;

    bounded(async {
        let dir = tempdir("bin");
        let ca_path = dir.join("ca.pem");
        let (child, mut rx) = spawn_serve(&dir, &ca_path, "1");
        let mut said_alone = false;
        let addr: SocketAddr = loop {
            let line = rx.recv().await.expect("the server logs its address");
            let msg = line["message"].as_str().unwrap_or_default();
            said_alone |= msg.contains("serving the webhook alone");
            if msg.starts_with("webhook listening") {
                assert!(
                    msg.contains(&format!("curl --cacert {}", ca_path.display())),
                    "{msg}"
                );
                break line["address"].as_str().unwrap().parse().unwrap();
            }
        };
        assert!(said_alone, "says it runs without the reconciler");

        let ca = std::fs::read_to_string(&ca_path).unwrap();
        let c = connect(addr, &ca, Proto::H2).await.unwrap();
        let review = captured("mutate-create-pod-resnet-chief.json");
        // An allowed review without warnings is not logged at the default
        // level; a denial is, with its message under its own key: the first
        // review line is the denial's.
        c.post("/mutate", &review).await;
        let refused = captured("validate-create-pod-resnet-worker-2.json");
        c.post("/validate", &refused).await;
        let line = loop {
            let line = rx.recv().await.unwrap();
            if line["message"] == "review" {
                break line;
            }
        };
        assert_eq!(line["uid"], uid(&refused));
        assert_eq!(line["endpoint"], "validate");
        assert_eq!(line["kind"], "Pod");
        assert_eq!(line["object"], "team-a/resnet-worker-2");
        assert_eq!(line["operation"], "CREATE");
        assert_eq!(line["allowed"], false);
        assert_eq!(line["rule"], "IndexOutOfRange");
        assert_eq!(line["patch_ops"], 0);
        assert!(line["latency_ms"].is_number());
        assert!(
            line["denial"]
                .as_str()
                .unwrap()
                .contains("StatefulSet pod index 2 is out of range"),
            "{line}"
        );

        let status = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
        let line = logged(&mut rx, "draining").await;
        assert_eq!(line["drain_seconds"], 1);
        exits_0(child, dir).await;
    })
    .await
}

#[tokio::test]
async fn readyz_waits_for_the_reconcilers_member_caches() {
    bounded(async {
        let dir = tempdir("synced");
        let index = Arc::new(dljob::reconciler::index::MemberIndex::default());
        let running = run_self_signed(dir.join("ca.pem"), index.clone()).await;
        let c = connect(running.local_addr(), running.ca_pem().unwrap(), Proto::H2)
            .await
            .unwrap();
        assert_eq!(
            c.get("/readyz").await,
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "waiting for the reconciler's member caches to list\n".into()
            )
        );
        // Alive all along, and reviews are answered.
        assert_eq!(c.get("/healthz").await.0, StatusCode::OK);
        index.mark_synced();
        assert_eq!(c.get("/readyz").await, (StatusCode::OK, "ok\n".into()));
        running.shutdown(Duration::from_secs(1)).await.unwrap();
        let _ = std::fs::remove_dir_all(dir);
    })
    .await
}

/// The server reads a review through a view that leaves out what the core
/// never reads (`metadata.managedFields`, the status, a pod's tolerations
/// and DNS settings, a container's terminal settings, the envelope's other
/// fields). For
/// every captured review, on both endpoints, its answer is the core's own
/// answer on the whole object as the API server sent it: same patch, same
/// warnings, same denial message.
#[test]
fn the_pruned_review_view_answers_as_the_core_does_on_the_whole_object() {
    use dljob::mutate::{self, Operation};
    use dljob::object::Kind;
    use dljob::webhook::admission::{review, Answer, Endpoint};
    let dir = format!("{}/tests/fixtures/admission", env!("CARGO_MANIFEST_DIR"));
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert!(names.len() >= 20, "{names:?}");
    let config = Config::default();
    let mut with_managed_fields = 0;
    let mut with_pod_defaults = 0;
    for name in &names {
        let whole = captured(name);
        let request = &whole["request"];
        let object = &request["object"];
        if object["metadata"].get("managedFields").is_some() {
            with_managed_fields += 1;
        }
        if object["spec"].get("dnsPolicy").is_some()
            && object["spec"]["containers"][0]
                .get("terminationMessagePath")
                .is_some()
        {
            with_pod_defaults += 1;
        }
        let gvk = &request["kind"];
        let kind = Kind::from_gvk(
            gvk["group"].as_str().unwrap(),
            gvk["version"].as_str().unwrap(),
            gvk["kind"].as_str().unwrap(),
        )
        .unwrap();
        let namespace = request["namespace"].as_str();
        let operation = match request["operation"].as_str().unwrap() {
            "CREATE" => Operation::Create,
            _ => Operation::Update,
        };
        let body = serde_json::to_vec(&whole).unwrap();
        for endpoint in [Endpoint::Mutate, Endpoint::Validate] {
            let Answer::Review { body, summary } = review(endpoint, &body, &config, &NoPeers)
            else {
                panic!("{name}: a review")
            };
            let answer: Value = serde_json::from_slice(&body).unwrap();
            let answer = &answer["response"];
            let core = match endpoint {
                Endpoint::Mutate => {
                    mutate::mutate_patch(Subject::new(kind, object, namespace), operation, &config)
                        .map(|a| {
                            a.map_or((None, Vec::new()), |a| {
                                (
                                    Some(a.patch.to_json_patch()).filter(|p| !p.0.is_empty()),
                                    a.warnings,
                                )
                            })
                        })
                }
                Endpoint::Validate => {
                    let old = request.get("oldObject").filter(|o| o.is_object());
                    dljob::validate::validate(
                        Subject::new(kind, object, namespace).with_old(old),
                        &config,
                        &[],
                    )
                    .map(|w| (None, w))
                }
            };
            match core {
                Ok((patch, warnings)) => {
                    assert!(summary.allowed, "{name} {endpoint:?}: {answer}");
                    let sent = patch_of(&json!({ "response": answer }));
                    assert_eq!(sent, patch, "{name} {endpoint:?}");
                    assert_eq!(
                        answer.get("warnings").cloned().unwrap_or(json!([])),
                        json!(warnings),
                        "{name}"
                    );
                }
                Err(v) => {
                    assert!(!summary.allowed, "{name} {endpoint:?}");
                    let message = answer["status"]["message"].as_str().unwrap();
                    assert!(message.ends_with(&v.to_string()), "{name}: {message} / {v}");
                }
            }
        }
    }
    assert!(
        with_managed_fields >= 20,
        "the fixtures carry managedFields"
    );
    assert!(
        with_pod_defaults >= 15,
        "the pods' fixtures carry the API server's defaults: {with_pod_defaults}"
    );
}

/// A CA (its certificate, PEM) and a client certificate it signed.
fn client_ca() -> (String, Identity) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "webhook clients");
    let ca = rcgen::CertifiedIssuer::self_signed(params, ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut leaf = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    leaf.distinguished_name
        .push(rcgen::DnType::CommonName, "kube-apiserver");
    leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let cert = leaf.signed_by(&key, &ca).unwrap();
    (ca.pem(), (cert.pem(), key.serialize_pem()))
}

/// With a client CA the webhook port answers only a client that presents
/// a certificate it signed (the API server, configured so): one without a
/// certificate, or with another CA's, gets no answer; the CA's file is
/// re-read when it changes (before, it was read once, at start). The
/// probes move to the metrics port, where the kubelet (which presents
/// none) reaches them.
#[tokio::test]
async fn with_a_client_ca_only_its_clients_are_answered() {
    bounded(async {
        let (ca, identity) = client_ca();
        let (other_ca, stranger) = client_ca();
        let dir = tempdir("client-ca");
        let ca_file = dir.join("client-ca.pem");
        std::fs::write(&ca_file, &ca).unwrap();
        let s = start(|s| {
            s.metrics_listen = Some(localhost());
            s.client_ca = Some(ca_file.clone());
            s.reload_interval = Duration::from_millis(100);
        })
        .await;
        let answered = |identity: Option<Identity>| {
            let (addr, ca) = (s.addr, s.ca.clone());
            async move {
                let tcp = TcpStream::connect(addr).await.unwrap();
                let stream = tls_connector_as(&ca, &[b"http/1.1"], identity.as_ref())
                    .connect(ServerName::try_from("localhost").unwrap(), tcp)
                    .await?;
                let (mut sender, conn) = http1::handshake(TokioIo::new(stream))
                    .await
                    .map_err(std::io::Error::other)?;
                tokio::spawn(conn);
                let req = Request::builder()
                    .method("POST")
                    .uri("/mutate")
                    .header("host", "localhost")
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from(
                        serde_json::to_vec(&captured("mutate-create-pod-resnet-chief.json"))
                            .unwrap(),
                    )))
                    .unwrap();
                let resp = sender
                    .send_request(req)
                    .await
                    .map_err(std::io::Error::other)?;
                Ok::<_, std::io::Error>(resp.status())
            }
        };
        assert_eq!(
            answered(Some(identity.clone())).await.unwrap(),
            StatusCode::OK
        );
        assert!(
            answered(None).await.is_err(),
            "answered without a certificate"
        );
        assert!(
            answered(Some(stranger.clone())).await.is_err(),
            "answered another CA's client"
        );
        // The CA file replaced (a rotation): new connections are judged
        // by the new CA, as the serving certificate is reloaded.
        write_atomically(&ca_file, &other_ca);
        let reloaded = std::time::Instant::now();
        while answered(Some(stranger.clone())).await.is_err() {
            assert!(
                reloaded.elapsed() < Duration::from_secs(10),
                "the new client CA was not read"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            answered(Some(identity.clone())).await.is_err(),
            "the old CA's client is still answered"
        );
        // A file that is no CA is logged and the last good one kept.
        write_atomically(&ca_file, "not a certificate");
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(answered(Some(stranger)).await.unwrap(), StatusCode::OK);
        let _ = std::fs::remove_dir_all(&dir);
        // The probes, over plain HTTP on the metrics port.
        let at = s.running.metrics_addr().expect("a metrics port");
        for (path, expected) in [("/healthz", "HTTP/1.1 200"), ("/readyz", "HTTP/1.1 200")] {
            let mut tcp = TcpStream::connect(at).await.unwrap();
            let request =
                format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n");
            tcp.write_all(request.as_bytes()).await.unwrap();
            let mut out = Vec::new();
            tcp.read_to_end(&mut out).await.unwrap();
            assert!(
                String::from_utf8_lossy(&out).starts_with(expected),
                "{path}"
            );
        }
    })
    .await
}

/// A small body (at most 256 KiB) must arrive within 2 s of its headers:
/// one trickled byte by byte is cut there with 408, well before the read
/// timeout, so that clients trickling small bodies hold the ordinary
/// reviews' lane only as long as they keep sending it anew.
#[tokio::test]
async fn a_small_body_must_arrive_within_two_seconds() {
    bounded(async {
        let s = start(|s| s.read_timeout = Duration::from_secs(8)).await;
        let mut slow = tls(s.addr, &s.ca, &[b"http/1.1"]).await.unwrap();
        slow.write_all(
            b"POST /mutate HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{",
        )
        .await
        .unwrap();
        let sent = std::time::Instant::now();
        let (mut reader, mut writer) = tokio::io::split(slow);
        let trickle = async move {
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                if writer.write_all(b" ").await.is_err() {
                    break;
                }
            }
        };
        let mut out = Vec::new();
        tokio::select! {
            _ = reader.read_to_end(&mut out) => {}
            _ = trickle => {}
            _ = tokio::time::sleep(Duration::from_secs(8)) => {}
        }
        let text = String::from_utf8_lossy(&out);
        assert!(text.starts_with("HTTP/1.1 408"), "{text}");
        assert!(
            sent.elapsed() < Duration::from_secs(4),
            "cut after {:?}",
            sent.elapsed()
        );
    })
    .await
}

// ------------------------------------------------------- held hostage

#[path = "../benches/common/h2frames.rs"]
mod h2frames;

#[allow(dead_code)]
#[path = "../benches/common/attacks.rs"]
mod attacks;

/// A TLS connection whose socket has a small receive buffer, so that what
/// the client does not read soon blocks the server's writes.
async fn tls_not_reading(addr: SocketAddr, ca_pem: &str, alpn: &[&[u8]]) -> TlsStream<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let tcp = socket.connect(addr).await.unwrap();
    tls_connector(ca_pem, alpn)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap()
}

/// An HTTP/2 connection of the `h2` crate's client whose streams open no
/// window to the server (`SETTINGS_INITIAL_WINDOW_SIZE` = `window`), and
/// the task driving it (ends when the server closes it).
async fn h2_client(
    s: &Server,
    window: u32,
) -> (
    h2::client::SendRequest<Bytes>,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
) {
    let stream = tls(s.addr, &s.ca, &[b"h2"]).await.unwrap();
    let (client, conn) = h2::client::Builder::new()
        .initial_window_size(window)
        .handshake(stream)
        .await
        .unwrap();
    (client, tokio::spawn(conn))
}

/// Sends `body` to `path` on an `h2` client; the response's head.
async fn h2_post(
    client: &h2::client::SendRequest<Bytes>,
    path: &str,
    body: &[u8],
) -> h2::client::ResponseFuture {
    let mut client = client.clone().ready().await.unwrap();
    let req = Request::post(path)
        .header("content-type", "application/json")
        .header("content-length", body.len())
        .body(())
        .unwrap();
    let (resp, mut send) = client.send_request(req, false).unwrap();
    send.send_data(Bytes::copy_from_slice(body), true).unwrap();
    resp
}

/// The server's counter of connections closed for `reason`.
async fn closed_for(s: &Server, reason: &str) -> u64 {
    let c = connect(s.addr, &s.ca, Proto::H1).await.unwrap();
    let (_, metrics) = c.get("/metrics").await;
    counter(
        &metrics,
        &format!(r#"dljob_webhook_connections_closed_total{{reason="{reason}"}}"#),
    )
}

/// Polls [`closed_for`] until it reaches `n` (at most `within`).
async fn until_closed_for(s: &Server, reason: &str, n: u64, within: Duration) {
    let started = std::time::Instant::now();
    loop {
        let now = closed_for(s, reason).await;
        if now >= n {
            assert_eq!(now, n, "{reason}");
            return;
        }
        assert!(
            started.elapsed() < within,
            "{reason}: {now} connections closed after {within:?}, not {n}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An HTTP/2 client that opens no window gets its answers' heads but not
/// a byte of their bodies. Before, such a connection kept its answers (and
/// their room) for as long as it stayed open, and a `GET /healthz` every
/// few seconds kept it open past the idle timeout. Now an answer not taken
/// whole within the read timeout closes its connection, whatever else it
/// sends, and everyone else is answered meanwhile.
#[tokio::test]
async fn an_answer_not_taken_closes_its_connection_at_the_read_timeout() {
    bounded(async {
        let read_timeout = Duration::from_secs(1);
        let s = start(|s| {
            s.read_timeout = read_timeout;
            s.connections.idle = Duration::from_millis(500);
        })
        .await;
        let (client, driver) = h2_client(&s, 0).await;
        let opened = std::time::Instant::now();
        let review = serde_json::to_vec(&captured("mutate-create-pod-resnet-chief.json")).unwrap();
        let resp = h2_post(&client, "/mutate", &review).await.await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        // The client keeps asking, every 200 ms, for more it cannot read.
        let keep_asking = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let Ok(mut c) = client.clone().ready().await else {
                    return;
                };
                let req = Request::get("/healthz").body(()).unwrap();
                if c.send_request(req, true).is_err() {
                    return;
                }
            }
        });
        let took = ordinary_review_answered(&s).await;
        assert!(took < Duration::from_millis(500), "answered after {took:?}");
        let _ = tokio::time::timeout(Duration::from_secs(10), driver)
            .await
            .expect("the connection of the unread answer stayed open");
        let lived = opened.elapsed();
        assert!(
            lived >= read_timeout && lived < read_timeout * 4,
            "closed after {lived:?}"
        );
        keep_asking.abort();
        assert_eq!(closed_for(&s, "answer_unread").await, 1);
        assert_eq!(closed_for(&s, "idle_timeout").await, 0);
    })
    .await
}

/// The review with the largest answer dljob gives (0.7 MiB: a Volcano
/// pod's hosts in its env, as many as the job's ConfigMap holds).
fn largest_answer() -> attacks::Crafted {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/admission");
    attacks::worst_reviews(fixtures)
        .into_iter()
        .find(|c| c.name.contains("volcano compat (allowed)") && c.path == "/mutate")
        .expect("the largest allowed answer")
}

/// One connection holds at most its share (4 MiB) of the answers' budget:
/// of ten reviews with the largest answer dljob gives (0.7 MiB, a Volcano
/// pod) on a connection that reads none, those that came while its
/// share had room for one more answer of 1 MiB are answered, and the rest
/// refused with 503 at once; another connection is answered as ever.
#[tokio::test]
async fn one_connection_holds_at_most_its_share_of_unsent_answers() {
    bounded(async {
        let s = start(|s| s.read_timeout = Duration::from_secs(30)).await;
        let big = largest_answer();
        // How big its answer is, read whole on an ordinary connection.
        let c = connect(s.addr, &s.ca, Proto::H2).await.unwrap();
        let (status, answer) = c.send("POST", "/mutate", big.body.clone()).await.unwrap();
        assert_eq!(status, StatusCode::OK);
        // Reviewed while the connection's unsent answers leave room in its
        // share for one more of the largest (1 MiB): the rest are refused
        // before anything is computed for them.
        let fit = (3 * 1024 * 1024) / answer.len() + 1;
        assert!(
            (2..10).contains(&fit),
            "an answer of {} bytes",
            answer.len()
        );

        let (client, _driver) = h2_client(&s, 0).await;
        // Each answer kept unread (a response dropped resets its stream).
        let (mut statuses, mut unread) = (Vec::new(), Vec::new());
        for _ in 0..10 {
            let resp = h2_post(&client, "/mutate", &big.body).await.await.unwrap();
            statuses.push(resp.status().as_u16());
            unread.push(resp);
        }
        let mut expected = vec![200; fit];
        expected.resize(10, 503);
        assert_eq!(statuses, expected);
        let took = ordinary_review_answered(&s).await;
        assert!(took < Duration::from_millis(500), "answered after {took:?}");
    })
    .await
}

/// A client that pipelines reviews and never reads their answers stops
/// taking bytes; its connection is closed once an answer has not been
/// taken whole within the read timeout (before, it held its place until
/// the idle timeout, then came again). A write stalled with no answer
/// under way (PING acknowledgements, a GOAWAY) is closed the same way, at
/// the same bound (`webhook::conn`'s unit tests).
#[tokio::test]
async fn a_connection_whose_writes_stall_is_closed() {
    bounded(async {
        let read_timeout = Duration::from_secs(1);
        let s = start(|s| s.read_timeout = read_timeout).await;
        let mut stream = tls_not_reading(s.addr, &s.ca, &[b"http/1.1"]).await;
        let request = raw_post("/mutate", &largest_answer().body, "");
        let sent = std::time::Instant::now();
        // Until the server stops reading (its answers are not taken).
        while let Ok(Ok(())) =
            tokio::time::timeout(Duration::from_millis(500), stream.write_all(&request)).await
        {
            assert!(sent.elapsed() < Duration::from_secs(30), "never blocked");
        }
        until_closed_for(&s, "answer_unread", 1, read_timeout * 5).await;
        still_serves(&s).await;
    })
    .await
}

/// Streams whose bodies never come, on connections whose clients have
/// never read an answer (as every hostage-taker's): together they hold
/// at most three quarters of the 512 reviews in flight the server allows
/// (384), the rest refused at once, and a newcomer that has read nothing
/// is refused too. Clients that read an answer before the attack then
/// hold the last quarter the same way (8 connections of 16 streams). An ordinary
/// review, on a connection whose client has read its answers, then takes
/// the place of one connection that has never read an answer (one, its
/// streams freed) instead of being refused.
#[tokio::test]
async fn held_streams_give_their_places_to_an_ordinary_review() {
    bounded(async {
        let s = start(|s| {
            s.read_timeout = Duration::from_secs(30);
        })
        .await;
        let ordinary = connect(s.addr, &s.ca, Proto::H2).await.unwrap();
        let review = captured("mutate-create-pod-resnet-chief.json");
        let body = serde_json::to_vec(&review).unwrap();
        let (_, resp) = ordinary.post("/mutate", &review).await;
        assert_allowed(&resp, &uid(&review));
        let (mut held, mut drivers, mut refused) = (Vec::new(), Vec::new(), 0);
        let hold = |client: &h2::client::SendRequest<Bytes>| {
            let client = client.clone();
            async move {
                let mut c = client.ready().await.unwrap();
                let req = Request::post("/mutate")
                    .header("content-type", "application/json")
                    .body(())
                    .unwrap();
                c.send_request(req, false).unwrap()
            }
        };
        // Clients that read an answer, before the attack.
        let mut readers = Vec::new();
        for _ in 0..8 {
            let (client, driver) = h2_client(&s, 65_535).await;
            let resp = h2_post(&client, "/mutate", &body).await.await.unwrap();
            assert_eq!(resp.status(), StatusCode::OK);
            let mut answer = resp.into_body();
            while let Some(chunk) = answer.data().await {
                let chunk = chunk.unwrap();
                let _ = answer.flow_control().release_capacity(chunk.len());
            }
            readers.push((client, driver));
        }
        for _ in 0..32 {
            let (client, driver) = h2_client(&s, 65_535).await;
            for _ in 0..16 {
                held.push(hold(&client).await);
            }
            drivers.push((client, driver));
        }
        // The untrusted three quarters are full: what did not fit is
        // refused with a 503 each.
        tokio::time::sleep(Duration::from_millis(300)).await;
        for (resp, _) in &mut held {
            if let Some(r) = futures::FutureExt::now_or_never(&mut *resp) {
                assert_eq!(r.unwrap().status(), StatusCode::SERVICE_UNAVAILABLE);
                refused += 1;
            }
        }
        assert_eq!(refused, 512 - 384, "untrusted streams refused");
        let newcomer = connect(s.addr, &s.ca, Proto::H2).await.unwrap();
        let (status, _) = newcomer
            .send("POST", "/mutate", body.clone())
            .await
            .unwrap();
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        // The readers hold the last quarter.
        for (client, _) in &readers {
            for _ in 0..16 {
                held.push(hold(client).await);
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(closed_for(&s, "evicted").await, 0, "room was free");
        let asked = std::time::Instant::now();
        let (_, resp) = ordinary.post("/mutate", &review).await;
        assert_allowed(&resp, &uid(&review));
        let took = asked.elapsed();
        assert!(took < Duration::from_secs(2), "answered after {took:?}");
        assert_eq!(closed_for(&s, "evicted").await, 1);
        drop((held, drivers, readers));
    })
    .await
}

/// A raw HTTP/2 connection: TLS with `h2` negotiated, the preface sent.
async fn raw_h2(s: &Server) -> TlsStream<TcpStream> {
    let mut stream = tls(s.addr, &s.ca, &[b"h2"]).await.unwrap();
    stream.write_all(&h2frames::preface()).await.unwrap();
    stream
}

/// A header block that never ends is closed at the read timeout (before,
/// the `h2` crate held it — up to 96 KiB a connection — until the
/// first-request deadline, and none at all once a request had come).
#[tokio::test]
async fn an_unfinished_header_block_is_closed_at_the_read_timeout() {
    bounded(async {
        let read_timeout = Duration::from_secs(1);
        let s = start(|s| {
            s.read_timeout = read_timeout;
            s.connections.first_request = Duration::from_secs(60);
        })
        .await;
        let mut stream = raw_h2(&s).await;
        stream
            .write_all(&h2frames::frame(1, 0, 1, &h2frames::unfinished_block(1000)))
            .await
            .unwrap();
        let lived = closed_within(&mut stream, Duration::from_secs(10))
            .await
            .expect("the unfinished header block's connection stayed open");
        assert!(lived >= read_timeout / 2, "closed after {lived:?}");
        assert_eq!(closed_for(&s, "header_block").await, 1);
    })
    .await
}

/// Unfinished header blocks share a budget of 1 MiB over every connection:
/// twelve connections each holding 80 KiB of one fit; the thirteenth,
/// whose fifth frame goes past, is closed, and so is a fourteenth.
#[tokio::test]
async fn unfinished_header_blocks_share_one_budget() {
    bounded(async {
        let s = start(|s| {
            s.read_timeout = Duration::from_secs(30);
            s.connections.first_request = Duration::from_secs(60);
        })
        .await;
        let mut held = Vec::new();
        for _ in 0..14 {
            let mut stream = raw_h2(&s).await;
            let mut block = h2frames::frame(1, 0, 1, &h2frames::unfinished_block(16_384 - 5));
            for _ in 0..4 {
                block.extend(h2frames::frame(9, 0, 1, &[b'a'; 16_384]));
            }
            stream.write_all(&block).await.unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
            held.push(stream);
        }
        assert_eq!(closed_for(&s, "header_block").await, 2);
        for (i, stream) in held.iter_mut().enumerate() {
            let closed = closed_within(stream, Duration::from_millis(20))
                .await
                .is_ok();
            assert_eq!(closed, i >= 12, "connection {i}");
        }
        still_serves(&s).await;
    })
    .await
}

/// Sends `frames` and then a PING on a raw HTTP/2 connection; how long its
/// acknowledgement took to come.
async fn ping_after(stream: &mut TlsStream<TcpStream>, frames: &[u8]) -> Duration {
    let started = std::time::Instant::now();
    let mut out = frames.to_vec();
    out.extend(h2frames::frame(6, 0, 0, b"dljob-ok"));
    stream.write_all(&out).await.unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed");
        seen.extend_from_slice(&buf[..n]);
        // The ACK: PING, flag ACK, with the payload sent.
        if seen
            .windows(13)
            .any(|w| w[..5] == [0, 0, 8, 6, 1] && &w[9..13] == b"dljo")
        {
            return started.elapsed();
        }
    }
}

/// A connection may send 1 000 control frames a second (a burst of as
/// many); past that its reads pause. 500 WINDOW_UPDATEs are read at once;
/// 3 000 more take the two seconds the excess costs, while another
/// connection is answered as ever (before, a flood of them took a core).
#[tokio::test]
async fn control_frames_past_the_rate_pause_the_connection() {
    bounded(async {
        let s = start(|_| {}).await;
        let mut stream = raw_h2(&s).await;
        let updates = |n: usize| -> Vec<u8> {
            (0..n)
                .flat_map(|_| h2frames::frame(8, 0, 0, &1u32.to_be_bytes()))
                .collect()
        };
        let quick = ping_after(&mut stream, &updates(500)).await;
        assert!(quick < Duration::from_millis(500), "{quick:?}");
        tokio::time::sleep(Duration::from_millis(600)).await;
        let flood = tokio::spawn(async move { ping_after(&mut stream, &updates(3_000)).await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        let took = ordinary_review_answered(&s).await;
        assert!(took < Duration::from_millis(500), "answered after {took:?}");
        let slow = flood.await.unwrap();
        assert!(
            (Duration::from_millis(1500)..Duration::from_secs(6)).contains(&slow),
            "{slow:?}"
        );
    })
    .await
}

/// A client that answers refusals by asking again at once is slowed to 16
/// refusals a second (a burst of as many), its connection's reads paused
/// meanwhile; another connection is answered as ever.
#[tokio::test]
async fn a_connection_refused_again_and_again_is_slowed_to_the_refusal_rate() {
    bounded(async {
        let s = start(|_| {}).await;
        let c = connect(s.addr, &s.ca, Proto::H2).await.unwrap();
        let started = std::time::Instant::now();
        for _ in 0..16 {
            let (status, _) = c.send("POST", "/mutate", b"{".to_vec()).await.unwrap();
            assert_eq!(status, StatusCode::BAD_REQUEST);
        }
        let burst = started.elapsed();
        assert!(
            burst < Duration::from_millis(500),
            "the burst took {burst:?}"
        );
        for _ in 0..24 {
            let (status, _) = c.send("POST", "/mutate", b"{".to_vec()).await.unwrap();
            assert_eq!(status, StatusCode::BAD_REQUEST);
        }
        let all = started.elapsed();
        assert!(
            all >= Duration::from_millis(1300),
            "40 refusals took {all:?}: not slowed to 16 a second"
        );
        let took = ordinary_review_answered(&s).await;
        assert!(took < Duration::from_millis(500), "answered after {took:?}");
    })
    .await
}

/// A peer source whose every answer panics: a defect inside a review.
struct PanickingPeers;

impl PeerSource for PanickingPeers {
    fn peers(&self, _namespace: &str, _job: &str) -> Vec<dljob::member::MemberSpec> {
        panic!("a defect for the test");
    }
    fn names_peers(&self) -> bool {
        false
    }
}

/// A review that panics inside dljob is answered 500 on both paths (an
/// ordinary body computed inline, a body over 256 KiB computed off the
/// async workers), counted as its own rejection (`panic`), and the server
/// and the connection go on serving.
#[tokio::test]
async fn a_review_that_panics_is_answered_500_and_the_server_goes_on() {
    bounded(async {
        let (config, _) =
            webhook::reload::watch_config(None, Duration::from_secs(1), None).unwrap();
        let s = start_on(|_| {}, config, Arc::new(PanickingPeers)).await;
        let (ca, addr) = (s.ca.clone(), s.addr);
        let review = captured("mutate-create-pod-resnet-chief.json");
        let mut big = review.clone();
        big["request"]["object"]["metadata"]["annotations"]["example.com/notes"] =
            json!("n".repeat(300 * 1024));
        for proto in [Proto::H1, Proto::H2] {
            let c = connect(addr, &ca, proto).await.unwrap();
            for body in [&review, &big] {
                let (status, said) = c
                    .send("POST", "/validate", serde_json::to_vec(body).unwrap())
                    .await
                    .unwrap();
                assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{proto:?}");
                let said = String::from_utf8_lossy(&said);
                assert!(said.contains("the review failed inside dljob"), "{said}");
            }
            // The same connection still answers.
            assert_eq!(c.get("/healthz").await.0, StatusCode::OK);
        }
        let c = connect(addr, &ca, Proto::H1).await.unwrap();
        let (_, metrics) = c.get("/metrics").await;
        assert_eq!(
            counter(
                &metrics,
                r#"dljob_webhook_rejected_requests_total{endpoint="validate",reason="panic"}"#
            ),
            4
        );
    })
    .await
}

/// The review view keeps a framework container's `envFrom`: over the
/// wire, as offline, the user is told that dljob's env wins over it.
#[test]
fn env_from_reaches_the_core_through_the_review_view() {
    use dljob::webhook::admission::{review, Answer, Endpoint};
    let mut whole = captured("mutate-create-pod-resnet-chief.json");
    whole["request"]["object"]["spec"]["containers"][0]["envFrom"] =
        json!([{"configMapRef": {"name": "training-env"}}]);
    let body = serde_json::to_vec(&whole).unwrap();
    let Answer::Review { body, .. } = review(Endpoint::Mutate, &body, &Config::default(), &NoPeers)
    else {
        panic!("a review")
    };
    let answer: Value = serde_json::from_slice(&body).unwrap();
    let warnings = answer["response"]["warnings"].as_array().unwrap();
    assert!(
        warnings.iter().any(|w| w
            .as_str()
            .unwrap()
            .contains("takes env from ConfigMap training-env (envFrom)")),
        "{warnings:?}"
    );
}
