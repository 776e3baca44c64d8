//! `dljob logs` and `dljob describe` against kube's mocked client: the
//! exact requests (method, path, query) and the exact output, with objects
//! shaped as `tests/fixtures/cluster/` captured them from a real
//! cluster after a TensorFlow job ran. And the binary's own edges: help,
//! flags, no cluster.

mod common;

use std::convert::Infallible;
use std::io::Write;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dljob::args::{LogsArgs, LogsOutput};
use dljob::inspect::{describe, follow, logs};
use futures::channel::mpsc::{unbounded, UnboundedSender};
use http::{Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame};
use k8s_openapi::jiff::Timestamp;
use kube::client::Body;
use kube::Client;
use serde_json::{json, Value};
use tower_test::mock;

type Reply = Response<BoxBody<Bytes, Infallible>>;
type Handle = mock::Handle<Request<Body>, Reply>;
type Chunks = UnboundedSender<Result<Frame<Bytes>, Infallible>>;

const NS: &str = "capture-397557";
const PODS: &str = "/api/v1/namespaces/capture-397557/pods";
const SELECTOR: &str = "labelSelector=dljob.dev%2Fjob%3Dtf-ps";

// ---- fixtures ---------------------------------------------------------------

fn fixture(name: &str) -> Value {
    let path = common::repo().join("tests/fixtures/cluster").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (the fixtures live beside the repository)",
            path.display()
        )
    });
    serde_json::from_str(&text).unwrap()
}

fn list(kind: &str, api_version: &str, items: Vec<Value>) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "metadata": {"resourceVersion": "64530"}, "items": items})
}

/// The captured chief pod: a bare Pod whose container exited 0.
fn chief() -> Value {
    fixture("pods.json")["items"][0].clone()
}

/// A worker StatefulSet's pod shaped like the captured chief, running.
fn worker(index: u32) -> Value {
    let name = format!("tf-ps-worker-{index}");
    let mut p = chief();
    let m = &mut p["metadata"];
    m["name"] = json!(name);
    m["uid"] = json!(format!("uid-{name}"));
    m["labels"] = json!({
        "dljob.dev/job": "tf-ps", "dljob.dev/role": "worker",
        "apps.kubernetes.io/pod-index": index.to_string(),
        "statefulset.kubernetes.io/pod-name": name,
    });
    m["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "StatefulSet",
        "name": "tf-ps-worker", "uid": "718eb407", "controller": true, "blockOwnerDeletion": true}]);
    p["spec"]["hostname"] = json!(name);
    p["spec"]["restartPolicy"] = json!("Always");
    p["spec"]["nodeName"] = json!(format!("gpu-node-{index}"));
    p["status"] = json!({
        "phase": "Running",
        "containerStatuses": [{"name": "tensorflow", "image": "x", "imageID": "x", "ready": true,
            "restartCount": index, "started": true, "containerID": format!("containerd://w{index}"),
            "state": {"running": {"startedAt": "2026-11-23T01:32:45Z"}},
            "lastState": if index == 1 {
                json!({"terminated": {"exitCode": 137, "reason": "OOMKilled", "containerID": "containerd://old"}})
            } else {
                json!({})
            }}]
    });
    p
}

/// A ps StatefulSet pod not scheduled yet: no node, no container status.
fn pending_ps() -> Value {
    let mut p = worker(0);
    let m = &mut p["metadata"];
    m["name"] = json!("tf-ps-ps-0");
    m["uid"] = json!("uid-tf-ps-ps-0");
    m["labels"]["dljob.dev/role"] = json!("ps");
    m["labels"]["statefulset.kubernetes.io/pod-name"] = json!("tf-ps-ps-0");
    m["ownerReferences"][0]["name"] = json!("tf-ps-ps");
    p["spec"]["hostname"] = json!("tf-ps-ps-0");
    p["spec"].as_object_mut().unwrap().remove("nodeName");
    p["status"] = json!({"phase": "Pending"});
    p
}

fn pod_list(pods: Vec<Value>) -> Value {
    list("PodList", "v1", pods)
}

// ---- the mocked API server -----------------------------------------------------

enum Answer {
    Json(u16, Value),
    Text(&'static str),
    /// A body whose chunks the test sends, open until the sender is dropped.
    Stream(futures::channel::mpsc::UnboundedReceiver<Result<Frame<Bytes>, Infallible>>),
    /// No answer at all (a watch the test does not need).
    Hold,
}

struct Route {
    /// `METHOD path?query`, exact, or a prefix of it.
    request: String,
    prefix: bool,
    answer: Option<Answer>,
}

fn get(uri: impl Into<String>, answer: Answer) -> Route {
    Route {
        request: format!("GET {}", uri.into()),
        prefix: false,
        answer: Some(answer),
    }
}

fn get_prefix(uri: impl Into<String>, answer: Answer) -> Route {
    Route {
        prefix: true,
        ..get(uri, answer)
    }
}

fn full(code: u16, bytes: Vec<u8>) -> Reply {
    Response::builder()
        .status(code)
        .body(Full::new(Bytes::from(bytes)).boxed())
        .unwrap()
}

fn not_found(what: &str) -> Answer {
    Answer::Json(
        404,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
               "code": 404, "message": format!("{what} not found")}),
    )
}

/// Serves the routes in whatever order the requests come, each route once;
/// a request no route expects gets a 404 and is recorded as UNEXPECTED.
/// Returns every request seen, `METHOD path?query`, in arrival order.
fn serve(
    mut handle: Handle,
    mut routes: Vec<Route>,
) -> (tokio::task::JoinHandle<()>, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Some((request, send)) = handle.next_request().await {
            let line = format!("{} {}", request.method(), request.uri());
            let found = routes.iter_mut().find(|r| {
                r.answer.is_some()
                    && if r.prefix {
                        line.starts_with(&r.request)
                    } else {
                        line == r.request
                    }
            });
            let answer = found.and_then(|r| r.answer.take());
            record.lock().unwrap().push(match answer {
                Some(_) => line.clone(),
                None => format!("UNEXPECTED {line}"),
            });
            match answer.unwrap_or_else(|| not_found("the request")) {
                Answer::Json(code, v) => {
                    send.send_response(full(code, serde_json::to_vec(&v).unwrap()))
                }
                Answer::Text(t) => send.send_response(full(200, t.as_bytes().to_vec())),
                Answer::Stream(rx) => send.send_response(
                    Response::builder()
                        .status(200)
                        .body(StreamBody::new(rx).boxed())
                        .unwrap(),
                ),
                Answer::Hold => held.push(send),
            }
        }
    });
    (task, seen)
}

fn client() -> (Client, Handle) {
    let (service, handle) = mock::pair::<Request<Body>, Reply>();
    (Client::new(service, "default"), handle)
}

/// What a command printed, shared with the test while it runs.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }

    /// Waits (up to 5 s) until the output contains `what`.
    async fn wait_for(&self, what: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !self.text().contains(what) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "never printed {what:?}; printed:\n{}",
                self.text()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

fn args(extra: impl FnOnce(&mut LogsArgs)) -> LogsArgs {
    let mut a = LogsArgs {
        job: "tf-ps".into(),
        namespace: Some(NS.into()),
        cluster: Default::default(),
        follow: false,
        role: None,
        since: None,
        tail: None,
        output: LogsOutput::Text,
        max_streams: 50,
        container: None,
    };
    extra(&mut a);
    a
}

/// Runs `dljob logs` (without -f) against the routes: (exit, stdout,
/// stderr, requests).
async fn fetch(a: &LogsArgs, routes: Vec<Route>) -> (ExitCode, String, String, Vec<String>) {
    let (client, handle) = client();
    let (server, seen) = serve(handle, routes);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = tokio::time::timeout(
        Duration::from_secs(10),
        logs::fetch(&client, NS, a, false, &mut out, &mut err),
    )
    .await
    .expect("logs timed out")
    .unwrap_or_else(|e| panic!("logs failed: {e:#}"));
    drop(client);
    server.await.unwrap();
    let seen = seen.lock().unwrap().clone();
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
        seen,
    )
}

fn log_uri(pod: &str, query: &str) -> String {
    format!("{PODS}/{pod}/log?{query}")
}

// ---- dljob logs -----------------------------------------------------------------

#[tokio::test]
async fn logs_lists_the_pods_then_reads_each_framework_container_in_replica_order() {
    let routes = vec![
        get(
            format!("{PODS}?&{SELECTOR}"),
            // The API server's order is not the replicas' order.
            Answer::Json(
                200,
                pod_list(vec![worker(1), pending_ps(), chief(), worker(0)]),
            ),
        ),
        get(
            log_uri(
                "tf-ps-chief",
                "&container=tensorflow&sinceSeconds=300&tailLines=10",
            ),
            Answer::Text("step 100 loss 2.31\nstep 200 loss 1.87\n"),
        ),
        get(
            log_uri(
                "tf-ps-worker-0",
                "&container=tensorflow&sinceSeconds=300&tailLines=10",
            ),
            Answer::Text("worker 0 ready\nstep 200 loss 1.90"),
        ),
        get(
            log_uri(
                "tf-ps-worker-1",
                "&container=tensorflow&sinceSeconds=300&tailLines=10",
            ),
            Answer::Text("worker 1 ready\n"),
        ),
    ];
    // One stream at a time: the requests come in replica order too.
    let a = args(|a| {
        a.tail = Some(10);
        a.since = Some(Duration::from_secs(300));
        a.max_streams = 1;
    });
    let (code, out, err, seen) = fetch(&a, routes).await;
    assert_eq!(
        seen,
        [
            format!("GET {PODS}?&{SELECTOR}"),
            format!(
                "GET {}",
                log_uri(
                    "tf-ps-chief",
                    "&container=tensorflow&sinceSeconds=300&tailLines=10"
                )
            ),
            format!(
                "GET {}",
                log_uri(
                    "tf-ps-worker-0",
                    "&container=tensorflow&sinceSeconds=300&tailLines=10"
                )
            ),
            format!(
                "GET {}",
                log_uri(
                    "tf-ps-worker-1",
                    "&container=tensorflow&sinceSeconds=300&tailLines=10"
                )
            ),
        ]
    );
    assert_eq!(
        out,
        "\
chief-0  | step 100 loss 2.31
chief-0  | step 200 loss 1.87
worker-0 | worker 0 ready
worker-0 | step 200 loss 1.90
worker-1 | worker 1 ready
"
    );
    assert_eq!(
        err,
        "ps-0: pod tf-ps-ps-0 is Pending (not scheduled yet); no logs yet\n"
    );
    assert_eq!(code, ExitCode::SUCCESS);
}

/// `-c dljob-wait-for-names`: the init container of each pod that has
/// run it, in replica order; a pod without it is said, not read.
#[tokio::test]
async fn logs_reads_an_init_container_by_name() {
    const WAIT: &str = "dljob-wait-for-names";
    let wait_log = |pod: &str| log_uri(pod, &format!("&container={WAIT}"));
    let with_wait = |mut pod: Value| {
        pod["spec"]["initContainers"] =
            json!([{"name": WAIT, "image": "ghcr.io/dljob/dljob:0.1.0"}]);
        pod["status"]["initContainerStatuses"] = json!([{"name": WAIT, "image": "x", "imageID": "x",
            "ready": true, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]);
        pod
    };
    let routes = vec![
        get(
            format!("{PODS}?&{SELECTOR}"),
            Answer::Json(
                200,
                pod_list(vec![with_wait(worker(1)), chief(), with_wait(worker(0))]),
            ),
        ),
        get(
            wait_log("tf-ps-worker-0"),
            Answer::Text("dljob: tf-ps-worker-0.tf-ps.capture-397557.svc resolves (waited 2s)\n"),
        ),
        get(
            wait_log("tf-ps-worker-1"),
            Answer::Text("dljob: tf-ps-worker-1.tf-ps.capture-397557.svc resolves (waited 0s)\n"),
        ),
    ];
    let a = args(|a| {
        a.container = Some(WAIT.into());
        a.max_streams = 1;
    });
    let (code, out, err, seen) = fetch(&a, routes).await;
    assert_eq!(
        seen,
        [
            format!("GET {PODS}?&{SELECTOR}"),
            format!("GET {}", wait_log("tf-ps-worker-0")),
            format!("GET {}", wait_log("tf-ps-worker-1")),
        ]
    );
    assert_eq!(
        out,
        "\
worker-0 | dljob: tf-ps-worker-0.tf-ps.capture-397557.svc resolves (waited 2s)
worker-1 | dljob: tf-ps-worker-1.tf-ps.capture-397557.svc resolves (waited 0s)
"
    );
    assert_eq!(
        err,
        "chief-0: pod tf-ps-chief has no container or init container dljob-wait-for-names\n"
    );
    // A pod that could not be read is an exit status of 1, as for any log.
    assert_eq!(code, ExitCode::from(1));
}

#[tokio::test]
async fn logs_reads_many_pods_at_once_and_still_prints_them_in_order() {
    let workers: Vec<Value> = (0..2).map(worker).collect();
    let routes = vec![
        get(
            format!("{PODS}?&{SELECTOR}"),
            Answer::Json(200, pod_list(workers)),
        ),
        get(
            log_uri("tf-ps-worker-0", "&container=tensorflow"),
            Answer::Text("zero\n"),
        ),
        get(
            log_uri("tf-ps-worker-1", "&container=tensorflow"),
            Answer::Text("one\n"),
        ),
    ];
    let (code, out, err, mut seen) = fetch(&args(|_| {}), routes).await;
    seen[1..].sort();
    assert_eq!(
        seen,
        [
            format!("GET {PODS}?&{SELECTOR}"),
            format!("GET {}", log_uri("tf-ps-worker-0", "&container=tensorflow")),
            format!("GET {}", log_uri("tf-ps-worker-1", "&container=tensorflow")),
        ]
    );
    assert_eq!(out, "worker-0 | zero\nworker-1 | one\n");
    assert_eq!((err.as_str(), code), ("", ExitCode::SUCCESS));
}

#[tokio::test]
async fn logs_as_json_carry_job_role_index_pod_and_container() {
    let routes = vec![
        get(
            format!("{PODS}?&labelSelector=dljob.dev%2Fjob%3Dtf-ps%2Cdljob.dev%2Frole%3Dworker"),
            Answer::Json(200, pod_list(vec![worker(1)])),
        ),
        get(
            log_uri("tf-ps-worker-1", "&container=tensorflow"),
            Answer::Text("loss 0.25\n"),
        ),
    ];
    let a = args(|a| {
        a.role = Some("worker".into());
        a.output = LogsOutput::Json;
    });
    let (_, out, _, seen) = fetch(&a, routes).await;
    assert_eq!(
        out,
        "{\"job\":\"tf-ps\",\"role\":\"worker\",\"index\":1,\"pod\":\"tf-ps-worker-1\",\"container\":\"tensorflow\",\"line\":\"loss 0.25\"}\n"
    );
    assert_eq!(seen.len(), 2, "{seen:?}");
}

#[tokio::test]
async fn a_log_that_cannot_be_read_is_reported_and_the_others_printed() {
    let routes = vec![
        get(
            format!("{PODS}?&{SELECTOR}"),
            Answer::Json(200, pod_list(vec![worker(0), worker(1)])),
        ),
        get(
            log_uri("tf-ps-worker-0", "&container=tensorflow"),
            Answer::Json(
                500,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500,
                "message": "Get \"https://gpu-node-0:10250/containerLogs/…\": dial tcp: i/o timeout"}),
            ),
        ),
        get(
            log_uri("tf-ps-worker-1", "&container=tensorflow"),
            Answer::Text("one\n"),
        ),
    ];
    let (code, out, err, _) = fetch(&args(|_| {}), routes).await;
    assert_eq!(out, "worker-1 | one\n");
    assert_eq!(
        err,
        "worker-0: cannot read the log of pod tf-ps-worker-0: Get \"https://gpu-node-0:10250/containerLogs/…\": dial tcp: i/o timeout\n"
    );
    assert_eq!(code, ExitCode::FAILURE);
}

async fn fetch_error(a: &LogsArgs, routes: Vec<Route>) -> (String, Vec<String>) {
    let (client, handle) = client();
    let (server, seen) = serve(handle, routes);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let e = logs::fetch(&client, NS, a, false, &mut out, &mut err)
        .await
        .expect_err("an error");
    drop(client);
    server.await.unwrap();
    let seen = seen.lock().unwrap().clone();
    (format!("{e:#}"), seen)
}

#[tokio::test]
async fn a_job_with_no_dljob_and_no_pods_is_an_error_naming_the_namespace() {
    let (e, seen) = fetch_error(
        &args(|_| {}),
        vec![
            get(
                format!("{PODS}?&{SELECTOR}"),
                Answer::Json(200, pod_list(vec![])),
            ),
            get(
                format!("/apis/dljob.dev/v1alpha1/namespaces/{NS}/dljobs/tf-ps"),
                not_found("dljobs.dljob.dev \"tf-ps\""),
            ),
        ],
    )
    .await;
    assert_eq!(
        e,
        "no job \"tf-ps\" in namespace \"capture-397557\": no DLJob and no pods labelled dljob.dev/job=tf-ps (`kubectl get dlj -A` lists the jobs of every namespace; -n chooses one)"
    );
    assert_eq!(seen.len(), 2, "{seen:?}");
}

#[tokio::test]
async fn a_role_without_pods_is_an_error_naming_the_role() {
    let (e, _) = fetch_error(
        &args(|a| a.role = Some("evaluator".into())),
        vec![
            get(
                format!(
                    "{PODS}?&labelSelector=dljob.dev%2Fjob%3Dtf-ps%2Cdljob.dev%2Frole%3Devaluator"
                ),
                Answer::Json(200, pod_list(vec![])),
            ),
            get(
                format!("{PODS}?&{SELECTOR}"),
                Answer::Json(200, pod_list(vec![chief()])),
            ),
        ],
    )
    .await;
    assert_eq!(
        e,
        "job \"tf-ps\" in namespace \"capture-397557\" has no pods of role \"evaluator\" (label dljob.dev/job=tf-ps,dljob.dev/role=evaluator)"
    );
}

#[tokio::test]
async fn a_finished_job_whose_pods_were_cleaned_up_says_so() {
    let dljob = fixture("dljob-succeeded.json")["items"][0].clone();
    let (code, out, err, _) = fetch(
        &args(|_| {}),
        vec![
            get(
                format!("{PODS}?&{SELECTOR}"),
                Answer::Json(200, pod_list(vec![])),
            ),
            get(
                format!("/apis/dljob.dev/v1alpha1/namespaces/{NS}/dljobs/tf-ps"),
                Answer::Json(200, dljob),
            ),
        ],
    )
    .await;
    assert_eq!(out, "");
    assert_eq!(
        err,
        "job \"tf-ps\" in namespace \"capture-397557\" has no pods; its DLJob is Succeeded, and its clean-pod policy may have removed them\n"
    );
    assert_eq!(code, ExitCode::SUCCESS);
}

// ---- dljob logs -f ----------------------------------------------------------------

fn chunk(text: &str) -> Result<Frame<Bytes>, Infallible> {
    Ok(Frame::data(Bytes::from(text.to_owned())))
}

fn watch_event(kind: &str, object: &Value) -> Result<Frame<Bytes>, Infallible> {
    let mut line = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap();
    line.push(b'\n');
    Ok(Frame::data(Bytes::from(line)))
}

#[tokio::test]
async fn follow_prints_lines_as_they_come_and_follows_a_recreated_pod() {
    let mut first = worker(0);
    first["metadata"]["resourceVersion"] = json!("100");
    let mut second = worker(0);
    second["metadata"]["uid"] = json!("uid-tf-ps-worker-0-again");
    second["metadata"]["resourceVersion"] = json!("102");
    second["status"]["containerStatuses"][0]["containerID"] = json!("containerd://again");

    let (first_log, first_rx) = unbounded();
    let (second_log, second_rx) = unbounded();
    let (watch, watch_rx) = unbounded();
    let routes = vec![
        // The command's own list, then the watch's list and watch.
        get(
            format!("{PODS}?&{SELECTOR}"),
            Answer::Json(200, pod_list(vec![first.clone()])),
        ),
        get(
            format!("{PODS}?&{SELECTOR}&limit=500"),
            Answer::Json(200, pod_list(vec![first.clone()])),
        ),
        get_prefix(format!("{PODS}?&watch=true"), Answer::Stream(watch_rx)),
        get_prefix(format!("{PODS}?&watch=true"), Answer::Hold),
        // The first pod with the user's --tail; the new one from its start.
        get(
            log_uri(
                "tf-ps-worker-0",
                "&container=tensorflow&follow=true&tailLines=5",
            ),
            Answer::Stream(first_rx),
        ),
        get(
            log_uri("tf-ps-worker-0", "&container=tensorflow&follow=true"),
            Answer::Stream(second_rx),
        ),
    ];
    let (client, handle) = client();
    let (_server, seen) = serve(handle, routes);
    let a = args(|a| {
        a.follow = true;
        a.tail = Some(5);
    });
    let (out, err) = (Captured::default(), Captured::default());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let drive = {
        let (out, err): (Captured, Captured) = (out.clone(), err.clone());
        async move {
            let (first_log, second_log, watch): (Chunks, Chunks, Chunks) =
                (first_log, second_log, watch);
            first_log.unbounded_send(chunk("epoch 1\nepoch")).unwrap();
            out.wait_for("worker-0 | epoch 1\n").await;
            // Half a line is never printed: it waits for its end.
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert_eq!(out.text(), "worker-0 | epoch 1\n");
            first_log.unbounded_send(chunk(" 2\n")).unwrap();
            out.wait_for("worker-0 | epoch 2\n").await;
            // The pod is recreated (a restart): the old one goes, a new uid comes.
            watch
                .unbounded_send(watch_event("DELETED", &first))
                .unwrap();
            drop(first_log);
            watch.unbounded_send(watch_event("ADDED", &second)).unwrap();
            err.wait_for("worker-0: following the new pod tf-ps-worker-0\n")
                .await;
            second_log.unbounded_send(chunk("epoch 1 again\n")).unwrap();
            out.wait_for("worker-0 | epoch 1 again\n").await;
            stop.send(()).unwrap();
            (second_log, watch)
        }
    };
    let mut out_w = out.clone();
    let mut err_w = err.clone();
    let run = follow::follow(&client, NS, &a, false, &mut out_w, &mut err_w, async {
        let _ = stopped.await;
    });
    let (code, _keep) =
        tokio::time::timeout(Duration::from_secs(10), async { tokio::join!(run, drive) })
            .await
            .expect("follow timed out");
    assert_eq!(code.unwrap(), ExitCode::SUCCESS);
    assert_eq!(
        out.text(),
        "worker-0 | epoch 1\nworker-0 | epoch 2\nworker-0 | epoch 1 again\n"
    );
    assert_eq!(
        err.text(),
        "worker-0: following the new pod tf-ps-worker-0\n"
    );
    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    let watch = seen
        .iter()
        .find(|s| s.contains("watch=true"))
        .cloned()
        .unwrap_or_default();
    assert!(
        watch.starts_with(&format!(
            "GET {PODS}?&watch=true&timeoutSeconds=290&{SELECTOR}"
        )),
        "{watch}"
    );
    seen.retain(|s| !s.contains("watch=true"));
    assert_eq!(
        seen,
        [
            format!(
                "GET {}",
                log_uri("tf-ps-worker-0", "&container=tensorflow&follow=true")
            ),
            format!(
                "GET {}",
                log_uri(
                    "tf-ps-worker-0",
                    "&container=tensorflow&follow=true&tailLines=5"
                )
            ),
            format!("GET {PODS}?&{SELECTOR}"),
            format!("GET {PODS}?&{SELECTOR}&limit=500"),
        ]
    );
}

#[tokio::test]
async fn follow_refuses_more_pods_than_streams() {
    let (client, handle) = client();
    let (_server, _) = serve(
        handle,
        vec![get(
            format!("{PODS}?&{SELECTOR}"),
            Answer::Json(200, pod_list(vec![worker(0), worker(1)])),
        )],
    );
    let a = args(|a| {
        a.follow = true;
        a.max_streams = 1;
    });
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let e = follow::follow(
        &client,
        NS,
        &a,
        false,
        &mut out,
        &mut err,
        std::future::pending(),
    )
    .await
    .expect_err("refused");
    assert_eq!(
        format!("{e:#}"),
        "following job \"tf-ps\" takes 2 log streams, more than --max-streams 1: pass --max-streams 2, or follow one role with --role"
    );
}

// ---- dljob describe -----------------------------------------------------------------

const DLJOB_URI: &str = "/apis/dljob.dev/v1alpha1/namespaces/capture-397557/dljobs/tf-ps";

fn metadata_list(objects: &Value) -> Value {
    let items: Vec<Value> = objects["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": o["metadata"]}))
        .collect();
    list("PartialObjectMetadataList", "meta.k8s.io/v1", items)
}

fn describe_routes(dljob: Answer, pods: Vec<Value>, events: Answer) -> Vec<Route> {
    vec![
        get(DLJOB_URI, dljob),
        get(
            format!("{PODS}?&{SELECTOR}"),
            Answer::Json(200, pod_list(pods)),
        ),
        get(
            format!("/apis/apps/v1/namespaces/{NS}/statefulsets?&{SELECTOR}"),
            Answer::Json(200, metadata_list(&fixture("statefulsets.json"))),
        ),
        get(
            format!("/apis/batch/v1/namespaces/{NS}/jobs?&{SELECTOR}"),
            Answer::Json(200, metadata_list(&json!({"items": []}))),
        ),
        get(format!("/api/v1/namespaces/{NS}/events?"), events),
    ]
}

fn describe_requests() -> Vec<String> {
    vec![
        format!("GET {DLJOB_URI}"),
        format!("GET {PODS}?&{SELECTOR}"),
        format!("GET /apis/apps/v1/namespaces/{NS}/statefulsets?&{SELECTOR}"),
        format!("GET /apis/batch/v1/namespaces/{NS}/jobs?&{SELECTOR}"),
        format!("GET /api/v1/namespaces/{NS}/events?"),
    ]
}

/// A minute after the captured chief exited.
fn a_minute_later() -> Timestamp {
    "2026-11-23T01:33:49Z".parse().unwrap()
}

async fn describe_with(routes: Vec<Route>) -> (anyhow::Result<String>, Vec<String>) {
    let (client, handle) = client();
    let (server, seen) = serve(handle, routes);
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        describe::observe(&client, NS, "tf-ps"),
    )
    .await
    .expect("describe timed out")
    .map(|o| describe::render(&o, a_minute_later()));
    drop(client);
    server.await.unwrap();
    let seen = seen.lock().unwrap().clone();
    (result, seen)
}

/// The captured Events (events.k8s.io/v1) as the API server serves the same
/// objects at core/v1.
fn events_fixture() -> Answer {
    let items = fixture("events.json")["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let mut core = json!({
                "apiVersion": "v1", "kind": "Event",
                "metadata": e["metadata"],
                "involvedObject": e["regarding"],
                "reason": e["reason"], "message": e["note"], "type": e["type"],
                "source": e["deprecatedSource"],
                "firstTimestamp": e["deprecatedFirstTimestamp"],
                "lastTimestamp": e["deprecatedLastTimestamp"],
                "eventTime": e["eventTime"],
                "reportingComponent": e.get("reportingController").cloned().unwrap_or(json!("")),
            });
            if let Some(n) = e.get("deprecatedCount") {
                core["count"] = n.clone();
            }
            core
        })
        .collect();
    Answer::Json(200, list("EventList", "v1", items))
}

#[tokio::test]
async fn describe_reads_the_dljob_pods_workloads_and_events_and_shows_one_screen() {
    let dljob = fixture("dljob-succeeded.json")["items"][0].clone();
    let (text, seen) = describe_with(describe_routes(
        Answer::Json(200, dljob),
        vec![chief(), worker(1), worker(0)],
        events_fixture(),
    ))
    .await;
    assert_eq!(seen, describe_requests());
    assert_eq!(
        text.unwrap(),
        "\
Name:         tf-ps
Namespace:    capture-397557
Framework:    tensorflow
Topology:     chief=1,worker=2,ps=2
Policies:     restart-policy=ExitCode backoff-limit=3 clean-pod-policy=Running
Phase:        Succeeded
Active:       0/5 (framework containers running / replicas)
Restarts:     0 (backoff limit 3)
Started:      2026-11-23T01:32:43Z (66s ago)
Completed:    2026-11-23T01:32:49Z (60s ago)
Coordinator:  chief-0 (pod tf-ps-chief) exited 0 (Completed)

Conditions:
  TYPE       STATUS  REASON                AGE  MESSAGE
  Created    True    Created               66s  the DLJob was created from its members' annotations
  Running    False   Succeeded             60s  chief-0 (pod tf-ps-chief) exited with exit code 0 (Completed)
  Succeeded  True    CoordinatorSucceeded  60s  chief-0 (pod tf-ps-chief) exited with exit code 0 (Completed)

Replicas:
  ROLE    PENDING  ACTIVE  SUCCEEDED  FAILED  RESTARTS
  chief   0        0       1          0       0
  worker  0        0       0          0       0
  ps      0        0       0          0       0

Pods:
  ROLE    INDEX  POD             NODE        PHASE      RESTARTS  LAST EXIT
  chief   0      tf-ps-chief     <none>      Succeeded  0         0 (Completed)
  worker  0      tf-ps-worker-0  gpu-node-0  Running    0         -
  worker  1      tf-ps-worker-1  gpu-node-1  Running    1         137 (OOMKilled)

Events:
  AGE  TYPE    REASON                OBJECT                    MESSAGE
  68s  Normal  SuccessfulCreate      statefulset/tf-ps-ps      Create Pod tf-ps-ps-0 in StatefulSet tf-ps-ps successful
  68s  Normal  SuccessfulCreate      statefulset/tf-ps-ps      Create Pod tf-ps-ps-1 in StatefulSet tf-ps-ps successful
  68s  Normal  SuccessfulCreate      statefulset/tf-ps-worker  Create Pod tf-ps-worker-0 in StatefulSet tf-ps-worker successful
  68s  Normal  SuccessfulCreate      statefulset/tf-ps-worker  Create Pod tf-ps-worker-1 in StatefulSet tf-ps-worker successful
  66s  Normal  Pending               dljob/tf-ps               0 of 5 replicas running
  63s  Normal  Running               dljob/tf-ps               all 5 replicas started
  60s  Normal  SuccessfulDelete      statefulset/tf-ps-ps      Delete Pod tf-ps-ps-1 in StatefulSet tf-ps-ps successful
  60s  Normal  SuccessfulDelete      statefulset/tf-ps-ps      Delete Pod tf-ps-ps-0 in StatefulSet tf-ps-ps successful
  60s  Normal  SuccessfulDelete      statefulset/tf-ps-worker  Delete Pod tf-ps-worker-1 in StatefulSet tf-ps-worker successful
  60s  Normal  SuccessfulDelete      statefulset/tf-ps-worker  Delete Pod tf-ps-worker-0 in StatefulSet tf-ps-worker successful
  60s  Normal  CoordinatorSucceeded  dljob/tf-ps               chief-0 (pod tf-ps-chief) exited with exit code 0 (Completed)
"
    );
}

/// A finished job whose coordinator's pod the clean-pod policy deleted:
/// the status still says who exited how, and describe says the pod went.
#[tokio::test]
async fn describe_says_a_finished_jobs_coordinator_pod_was_deleted() {
    let dljob = fixture("dljob-succeeded.json")["items"][0].clone();
    let (text, _) = describe_with(describe_routes(
        Answer::Json(200, dljob),
        vec![worker(1), worker(0)],
        events_fixture(),
    ))
    .await;
    let text = text.unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("Coordinator:"))
        .unwrap();
    assert_eq!(
        line,
        "Coordinator:  chief-0 (pod tf-ps-chief, since deleted) exited 0 (Completed)"
    );
}

#[tokio::test]
async fn describe_without_a_dljob_says_who_creates_it_and_lists_the_pods() {
    let (text, seen) = describe_with(describe_routes(
        not_found("dljobs.dljob.dev \"tf-ps\""),
        vec![pending_ps(), chief()],
        Answer::Json(403, json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403,
            "reason": "Forbidden",
            "message": "events is forbidden: User \"ada\" cannot list resource \"events\" in API group \"\" in the namespace \"capture-397557\""})),
    ))
    .await;
    assert_eq!(seen, describe_requests());
    assert_eq!(
        text.unwrap(),
        "\
Name:         tf-ps
Namespace:    capture-397557
DLJob:        not found: the reconciler has not created it (is `dljob serve` running with a cluster connection?)

Pods:
  ROLE   INDEX  POD          NODE    PHASE      RESTARTS  LAST EXIT
  chief  0      tf-ps-chief  <none>  Succeeded  0         0 (Completed)
  ps     0      tf-ps-ps-0   <none>  Pending    -         -

Events:       cannot list them: events is forbidden: User \"ada\" cannot list resource \"events\" in API group \"\" in the namespace \"capture-397557\"
"
    );
}

/// An elastic job's DLJob: the Replicas table gains each role's replicas
/// now, the elastic role's as resized (3 workers of a declared 2), the
/// others' their count.
#[tokio::test]
async fn describe_shows_an_elastic_roles_replicas_now() {
    let mut dljob = fixture("dljob-succeeded.json")["items"][0].clone();
    dljob["status"]["replicas"]["worker"]["replicas"] = json!(3);
    let (text, _) = describe_with(describe_routes(
        Answer::Json(200, dljob),
        vec![chief(), worker(1), worker(0)],
        events_fixture(),
    ))
    .await;
    let text = text.unwrap();
    let at = text.find("Replicas:").expect(&text);
    assert_eq!(
        &text[at..text.find("\nPods:").unwrap()],
        "\
Replicas:
  ROLE    REPLICAS  PENDING  ACTIVE  SUCCEEDED  FAILED  RESTARTS
  chief   1         0        0       1          0       0
  worker  3         0        0       0          0       0
  ps      2         0        0       0          0       0
"
    );
}

/// Pods whose wait for their names gave up or cannot run are listed under
/// the pods, with what their init container's status says; the others are
/// not.
#[tokio::test]
async fn describe_lists_the_name_waits_that_failed() {
    let mut gave_up = worker(0);
    gave_up["status"]["initContainerStatuses"] = json!([
        {"name": "dljob-wait-for-names", "image": "ghcr.io/dljob/dljob:0.1.0", "imageID": "x", "ready": true, "restartCount": 0,
         "state": {"terminated": {"exitCode": 0, "reason": "Completed",
            "message": "dljob: gave up after 600s: tf-ps-chief-0.tf-ps.capture-397557.svc does not resolve (Name or service not known); the framework starts anyway and may fail to reach it."}}}
    ]);
    let mut cannot_run = pending_ps();
    cannot_run["status"]["initContainerStatuses"] = json!([
        {"name": "dljob-wait-for-names", "image": "ghcr.io/dljob/dljob:0.1.0", "imageID": "", "ready": false, "restartCount": 0,
         "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"ghcr.io/dljob/dljob:0.1.0\""}}}
    ]);
    let mut found = worker(1);
    found["status"]["initContainerStatuses"] = json!([
        {"name": "dljob-wait-for-names", "image": "ghcr.io/dljob/dljob:0.1.0", "imageID": "x", "ready": true, "restartCount": 0,
         "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
    ]);
    let (text, _) = describe_with(describe_routes(
        not_found("dljobs.dljob.dev \"tf-ps\""),
        vec![cannot_run, gave_up, found],
        Answer::Json(
            200,
            json!({"kind": "EventList", "apiVersion": "v1", "metadata": {}, "items": []}),
        ),
    ))
    .await;
    let text = text.unwrap();
    let at = text.find("Name waits").expect(&text);
    assert_eq!(
        &text[at..text.find("\nEvents:").unwrap()],
        "\
Name waits that failed (kubectl logs POD -c dljob-wait-for-names):
  POD             WAIT
  tf-ps-worker-0  gave up after 600s: tf-ps-chief-0.tf-ps.capture-397557.svc does not resolve (Name or service not known)
  tf-ps-ps-0      cannot run: its image ghcr.io/dljob/dljob:0.1.0 cannot be pulled
"
    );
}

/// The captured DLJob with a TensorBoard (`logs:runs/tf-ps` on an nfs
/// volume) and clean-pod policy `None`, which leaves it running after the
/// job succeeded.
fn dljob_with_tensorboard() -> Value {
    let mut dljob = fixture("dljob-succeeded.json")["items"][0].clone();
    dljob["spec"]["tensorboard"] = json!("logs:runs/tf-ps");
    dljob["spec"]["cleanPodPolicy"] = json!("None");
    dljob["metadata"]["annotations"] = json!({
        "dljob.dev/tensorboard-volume": r#"{"name":"logs","nfs":{"path":"/exports/ml","server":"nfs.example.internal"}}"#
    });
    dljob
}

fn tensorboard_deployment(replicas: i32, ready: i32) -> Answer {
    Answer::Json(
        200,
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "tf-ps-tensorboard", "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"dljob.dev/tensorboard-of": "tf-ps"}},
                "template": {"spec": {"containers": [{"name": "tensorboard"}]}}},
            "status": {"replicas": replicas, "readyReplicas": ready}}),
    )
}

#[tokio::test]
async fn describe_says_how_to_reach_the_jobs_tensorboard() {
    const DEPLOYMENT: &str =
        "/apis/apps/v1/namespaces/capture-397557/deployments/tf-ps-tensorboard";
    const HEAD: &str = "\
Name:         tf-ps
Namespace:    capture-397557
Framework:    tensorflow
Topology:     chief=1,worker=2,ps=2
Policies:     restart-policy=ExitCode backoff-limit=3 clean-pod-policy=None
";
    for (deployment, tensorboard) in [
        (
            tensorboard_deployment(1, 1),
            "\
TensorBoard:  logs:runs/tf-ps, running (1/1 ready)
              kubectl port-forward -n capture-397557 svc/tf-ps-tensorboard 6006, then open http://localhost:6006
",
        ),
        (
            tensorboard_deployment(0, 0),
            "TensorBoard:  logs:runs/tf-ps, stopped: the job finished (its logs stay on the volume)\n",
        ),
        (
            not_found("deployments.apps \"tf-ps-tensorboard\""),
            "TensorBoard:  logs:runs/tf-ps, not created yet (the reconciler creates deployment/tf-ps-tensorboard)\n",
        ),
    ] {
        let mut routes = describe_routes(
            Answer::Json(200, dljob_with_tensorboard()),
            vec![chief()],
            events_fixture(),
        );
        routes.push(get(DEPLOYMENT, deployment));
        let (text, seen) = describe_with(routes).await;
        let mut requests = describe_requests();
        requests.push(format!("GET {DEPLOYMENT}"));
        assert_eq!(seen, requests);
        let text = text.unwrap();
        let expected = format!("{HEAD}{tensorboard}Phase:        Succeeded\n");
        assert_eq!(&text[..expected.len()], expected, "{text}");
    }
    // A DLJob without the recorded volume says why it has no TensorBoard.
    let mut dljob = dljob_with_tensorboard();
    dljob["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("annotations");
    let observed = describe::Observed {
        job: "tf-ps".into(),
        namespace: NS.into(),
        dljob: Some(serde_json::from_value(dljob).unwrap()),
        pods: vec![],
        workloads: vec![],
        events: Ok(vec![]),
        tensorboard: Some(Ok(None)),
    };
    let text = describe::render(&observed, a_minute_later());
    assert!(
        text.contains("\nTensorBoard:  logs:runs/tf-ps, not run: the DLJob has no dljob.dev/tensorboard-volume annotation: the reconciler records volume \"logs\" there when it creates the DLJob, if its JSON is at most 8192 bytes; delete the DLJob to have it created again\nPhase:"),
        "{text}"
    );
}

#[tokio::test]
async fn describe_of_no_job_is_an_error_after_two_reads() {
    let (result, seen) = describe_with(vec![
        get(DLJOB_URI, not_found("dljobs.dljob.dev \"tf-ps\"")),
        get(
            format!("{PODS}?&{SELECTOR}"),
            Answer::Json(200, pod_list(vec![])),
        ),
    ])
    .await;
    assert_eq!(
        format!("{:#}", result.unwrap_err()),
        "no job \"tf-ps\" in namespace \"capture-397557\": no DLJob and no pods labelled dljob.dev/job=tf-ps (`kubectl get dlj -A` lists the jobs of every namespace; -n chooses one)"
    );
    assert_eq!(seen, describe_requests()[..2]);
}

// ---- the binary ----------------------------------------------------------------------

#[test]
fn help_explains_both_commands_with_examples() {
    for (command, wanted) in [
        (
            "logs",
            &[
                "-f, --follow",
                "--role",
                "--since",
                "--tail",
                "-o, --output",
                "--max-streams",
                "Examples:",
                "dljob logs mnist -f --tail 20",
            ][..],
        ),
        (
            "describe",
            &["-n, --namespace", "Examples:", "dljob describe mnist"][..],
        ),
    ] {
        let run = common::dljob(&[command, "--help"], None);
        assert!(run.success(), "{run:?}");
        for w in wanted {
            assert!(
                run.stdout.contains(w),
                "{command} --help lacks {w:?}: {run:?}"
            );
        }
    }
}

#[test]
fn a_bad_duration_is_refused_before_any_cluster_call() {
    let run = common::dljob(&["logs", "tf-ps", "--since", "5x"], None);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(
        run.stderr.contains("invalid value '5x' for '--since <DURATION>': \"5x\" is not a duration: write e.g. 10s, 5m, 2h or 1h30m"),
        "{run:?}"
    );
}

#[test]
fn without_a_cluster_both_commands_say_so() {
    let dir = std::env::temp_dir().join(format!("dljob-inspect-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    // Port 1 on localhost: nothing listens, the connection is refused at once.
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
         clusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\n\
         users: [{name: u, user: {token: t}}]\n\
         contexts: [{name: c, context: {cluster: c, user: u}}]\n",
    )
    .unwrap();
    let env = [
        ("KUBECONFIG", Some(kubeconfig.to_str().unwrap())),
        ("KUBERNETES_SERVICE_HOST", None),
    ];
    for command in [
        &["logs", "tf-ps"][..],
        &["describe", "tf-ps", "-n", "ml"][..],
    ] {
        let run = common::dljob_with_env(command, None, &env);
        assert_eq!(run.code, Some(2), "{run:?}");
        assert!(
            run.stderr
                .starts_with("error: cannot reach the cluster: the API server does not answer: "),
            "{run:?}"
        );
        assert_eq!(run.stdout, "");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn kubectl_runs_the_binary_as_its_dljob_plugin() {
    // kubectl's plugin convention: an executable named kubectl-dljob on the
    // PATH is `kubectl dljob`. The real kubectl finds it and runs it.
    let dir = std::env::temp_dir().join(format!("dljob-plugin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plugin = dir.join("kubectl-dljob");
    let _ = std::fs::remove_file(&plugin);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_dljob"), &plugin).unwrap();
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = std::process::Command::new("kubectl")
        .args(["dljob", "describe", "--help"])
        .env("PATH", &path)
        .output()
        .expect("kubectl runs");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{run:?}");
    assert!(
        stdout.contains("Usage: kubectl dljob describe [OPTIONS] <JOB>"),
        "{stdout}"
    );
    assert!(stdout.contains("--context <NAME>"), "{stdout}");
    // Run directly under its plugin name, the binary says the same.
    let direct = std::process::Command::new(&plugin)
        .arg("--help")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&direct.stdout).contains("Usage: kubectl dljob <COMMAND>"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_kubeconfig_and_context_flags_choose_the_cluster() {
    let dir = std::env::temp_dir().join(format!("dljob-context-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    // Nothing listens on port 1: the connection is refused at once.
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
         clusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\n\
         users: [{name: u, user: {token: t}}]\n\
         contexts: [{name: c, context: {cluster: c, user: u}}, {name: d, context: {cluster: c, user: u, namespace: ml}}]\n",
    )
    .unwrap();
    let file = kubeconfig.to_str().unwrap();
    // No KUBECONFIG and no in-cluster account: only the flag names a cluster.
    let env = [
        ("KUBECONFIG", None),
        ("HOME", Some(dir.to_str().unwrap())),
        ("KUBERNETES_SERVICE_HOST", None),
    ];
    for command in [
        &["logs", "tf-ps", "--kubeconfig", file][..],
        &["describe", "tf-ps", "--kubeconfig", file, "--context", "d"][..],
    ] {
        let run = common::dljob_with_env(command, None, &env);
        assert_eq!(run.code, Some(2), "{run:?}");
        assert!(
            run.stderr
                .starts_with("error: cannot reach the cluster: the API server does not answer: "),
            "{run:?}"
        );
    }
    // A context the file does not have is named.
    let run = common::dljob_with_env(
        &[
            "describe",
            "tf-ps",
            "--kubeconfig",
            file,
            "--context",
            "prod",
        ],
        None,
        &env,
    );
    assert_eq!(run.code, Some(2), "{run:?}");
    assert_eq!(
        run.stderr,
        format!("error: cannot reach the cluster: context \"prod\" is not in {file}; its contexts are: c, d\n"),
        "{run:?}"
    );
    // Without the flag there is no cluster at all.
    let run = common::dljob_with_env(&["describe", "tf-ps"], None, &env);
    assert!(
        run.stderr.starts_with(
            "error: cannot reach the cluster: no usable kubeconfig or in-cluster config"
        ),
        "{run:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
