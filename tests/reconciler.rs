//! The reconciler's I/O on kube's mocked client: every API call a reconcile
//! makes is asserted (method, path, the body fields that matter), in the
//! style of controller-rs' `ApiServerVerifier`; and a reconcile of an
//! unchanged job makes none.

use std::sync::Arc;
use std::time::Duration;

use dljob::config::Config;
use dljob::contract::Topology;
use dljob::crd::{DLJob, JobSpec};
use dljob::reconciler::context::{Context, Stores};
use dljob::reconciler::events::Recorder;
use dljob::reconciler::index::{self, MemberIndex, MemberObject};
use dljob::reconciler::metrics::Metrics;
use dljob::reconciler::status::{self, ContainerState};
use dljob::reconciler::{controller, first_sight, tell};
use dljob::reconciler::{observe, trim};
use dljob::validate::PeerSource;
use http::{Request, Response};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::jiff::Timestamp;
use kube::client::Body;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use kube::{Client, Resource};
use serde_json::{json, Value};
use tower_test::mock;

mod apiserver;
use apiserver::Server;

type Handle = mock::Handle<Request<Body>, Response<Body>>;

const NS: &str = "ml";

fn now() -> Timestamp {
    Timestamp::from_second(1_700_000_000).unwrap()
}

// ---- object builders ------------------------------------------------------

fn annotations(framework: &str, replicas: &str, extra: &[(&str, &str)]) -> Value {
    let mut a = json!({"dljob.dev/framework": framework, "dljob.dev/replicas": replicas});
    for (k, v) in extra {
        a[*k] = json!(v);
    }
    a
}

/// A bare member pod whose framework container (named after the
/// framework) is in `state` (a container state as JSON, e.g.
/// `{"running": {}}`).
fn bare_pod(
    job: &str,
    framework: &str,
    replicas: &str,
    role: &str,
    index: u32,
    state: Value,
) -> Pod {
    let name = format!("{role}-{index}");
    let phase = if state.get("terminated").is_some() {
        "Failed"
    } else {
        "Running"
    };
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": NS, "uid": format!("uid-{name}"),
            "labels": {"dljob.dev/job": job, "dljob.dev/role": role},
            "annotations": annotations(framework, replicas, &[("dljob.dev/index", &index.to_string())]),
        },
        "spec": {"restartPolicy": "Never", "nodeName": "node-1", "containers": [{"name": framework, "image": "train"}]},
        "status": {"phase": phase, "containerStatuses": [
            {"name": framework, "image": "train", "imageID": "", "ready": true, "restartCount": 0, "state": state}
        ]}
    }))
    .unwrap()
}

fn statefulset(job: &str, framework: &str, replicas: &str, role: &str, size: u32) -> StatefulSet {
    let meta = json!({
        "labels": {"dljob.dev/job": job, "dljob.dev/role": role},
        "annotations": annotations(framework, replicas, &[]),
    });
    let mut own = meta.clone();
    own["name"] = json!(role);
    own["namespace"] = json!(NS);
    own["uid"] = json!(format!("uid-sts-{role}"));
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": own,
        "spec": {
            "replicas": size, "serviceName": job,
            "selector": {"matchLabels": {"dljob.dev/role": role}},
            "template": {"metadata": meta, "spec": {"containers": [{"name": framework}]}}
        }
    }))
    .unwrap()
}

fn indexed_job(job: &str, framework: &str, replicas: &str, role: &str) -> Job {
    let meta = json!({
        "labels": {"dljob.dev/job": job, "dljob.dev/role": role},
        "annotations": annotations(framework, replicas, &[]),
    });
    let mut own = meta.clone();
    own["name"] = json!(role);
    own["namespace"] = json!(NS);
    own["uid"] = json!(format!("uid-job-{role}"));
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": own,
        "spec": {
            "completions": 1, "parallelism": 1, "completionMode": "Indexed",
            "template": {"metadata": meta, "spec": {"restartPolicy": "Never", "containers": [{"name": framework}]}}
        }
    }))
    .unwrap()
}

/// A pod the workload `owner` (`StatefulSet`/`Job`) created.
fn owned_pod(
    kind: &str,
    owner: &str,
    framework: &str,
    replicas: &str,
    role: &str,
    index: u32,
    state: Value,
) -> Pod {
    let mut pod = bare_pod("mnist", framework, replicas, role, index, state);
    let m = &mut pod.metadata;
    m.name = Some(format!("{owner}-{index}"));
    m.uid = Some(format!("uid-{owner}-{index}"));
    m.annotations.as_mut().unwrap().remove("dljob.dev/index");
    let (which, key) = match kind {
        "StatefulSet" => ("label", "apps.kubernetes.io/pod-index"),
        _ => ("annotation", "batch.kubernetes.io/job-completion-index"),
    };
    match which {
        "label" => m
            .labels
            .as_mut()
            .unwrap()
            .insert(key.into(), index.to_string()),
        _ => m
            .annotations
            .as_mut()
            .unwrap()
            .insert(key.into(), index.to_string()),
    };
    m.owner_references = Some(vec![serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": kind, "name": owner, "uid": "o", "controller": true
    }))
    .unwrap()]);
    if kind == "StatefulSet" {
        pod.spec.as_mut().unwrap().restart_policy = Some("Always".into());
    }
    pod
}

fn dljob(framework: &str, replicas: &str) -> DLJob {
    let mut j = DLJob::new(
        "mnist",
        JobSpec::new(framework, Topology::parse(replicas).unwrap(), 23456),
    );
    j.metadata.namespace = Some(NS.into());
    j.metadata.uid = Some("job-uid".into());
    j.metadata.generation = Some(1);
    j
}

/// `pod` as its kubelet shows it once its containers all exited 0.
fn succeeded(mut pod: Pod) -> Pod {
    pod.status.as_mut().unwrap().phase = Some("Succeeded".into());
    pod
}

fn running() -> Value {
    json!({"running": {"startedAt": "2023-11-14T22:00:00Z"}})
}

fn terminated(code: i32, reason: &str) -> Value {
    json!({"terminated": {"exitCode": code, "reason": reason, "containerID": "containerd://c1"}})
}

// ---- the world the reconcile sees ----------------------------------------

/// Members and owned objects, as the reflectors would hold them.
#[derive(Default)]
struct World {
    pods: Vec<Pod>,
    statefulsets: Vec<StatefulSet>,
    jobs: Vec<Job>,
    services: Vec<Service>,
}

fn fill<K>(
    items: Vec<K>,
    trim: fn(&mut K),
    index: &MemberIndex,
) -> kube::runtime::reflector::Store<K>
where
    K: MemberObject + Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let mut writer = Writer::default();
    let store = writer.as_reader();
    let config = Config::default();
    for mut item in items {
        trim(&mut item);
        let ev = watcher::Event::Apply(item);
        writer.apply_watcher_event(&ev);
        index.apply_event(&ev, &config);
    }
    store
}

/// The job's Service as a real API server holds it once dljob created
/// it: the captured `tf-ps` Service (`tests/fixtures/cluster`), renamed
/// to this suite's job, with its port.
fn served(port: u16) -> Service {
    let list: Value = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/cluster/services.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let text = serde_json::to_string(&list["items"][0])
        .unwrap()
        .replace("tf-ps", "mnist")
        .replace("capture-397557", NS)
        .replace("55041422-aea7-49a9-8c94-f34a36d0b255", "job-uid")
        .replace("2222", &port.to_string());
    serde_json::from_str(&text).unwrap()
}

fn service_store(services: Vec<Service>) -> kube::runtime::reflector::Store<Service> {
    let mut writer = Writer::default();
    let store = writer.as_reader();
    for svc in services {
        writer.apply_watcher_event(&watcher::Event::Apply(svc));
    }
    store
}

fn context(world: World, dljobs: Vec<DLJob>) -> (Arc<Context>, Handle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let index = Arc::new(MemberIndex::default());
    // Pods are only indexed: the index entry holds what is read of them.
    drop(fill(world.pods, trim::trim_pod, &index));
    let stores = Stores {
        statefulsets: fill(world.statefulsets, trim::trim_statefulset, &index),
        jobs: fill(world.jobs, trim::trim_job, &index),
        services: service_store(world.services),
        changed: Default::default(),
        unreadable: Default::default(),
    };
    let mut writer = Writer::default();
    let dljob_store = writer.as_reader();
    for j in dljobs {
        writer.apply_watcher_event(&watcher::Event::Apply(j));
    }
    let (_tx, config) = tokio::sync::watch::channel(Config::default());
    let ctx = Context {
        recorder: Recorder::new(client.clone(), "dljob", "test"),
        client,
        index,
        stores,
        dljobs: dljob_store,
        metrics: Arc::new(Metrics::default()),
        config,
        now,
        dropped: Default::default(),
    };
    (Arc::new(ctx), handle)
}

// ---- the verifier ----------------------------------------------------------

/// One expected API call: method, path with query, a check of the body,
/// and the response to send.
struct Call {
    method: &'static str,
    uri: String,
    check: Box<dyn Fn(&Value) + Send>,
    respond: Value,
}

fn call(
    method: &'static str,
    uri: impl Into<String>,
    check: impl Fn(&Value) + Send + 'static,
    respond: Value,
) -> Call {
    Call {
        method,
        uri: uri.into(),
        check: Box::new(check),
        respond,
    }
}

/// The GET of a bare pod to recreate: the cache keeps no spec, so the
/// reconciler reads the whole pod from the API server.
fn read_pod(pod: Pod) -> Call {
    call(
        "GET",
        format!(
            "/api/v1/namespaces/{NS}/pods/{}",
            pod.metadata.name.clone().unwrap()
        ),
        |b| assert!(b.is_null()),
        serde_json::to_value(pod).unwrap(),
    )
}

/// Saving a bare pod before it is deleted for a retry: read whole, its
/// manifest kept in a new PodTemplate the DLJob controls (named by the API
/// server). Returns the two calls and the `pendingRecreates` entry the
/// pass's one status write then records — never the manifest itself.
fn save_pod(pod: Pod) -> ([Call; 2], Value) {
    let name = pod.metadata.name.clone().unwrap();
    let uid = pod.metadata.uid.clone().unwrap();
    let image = pod.spec.as_ref().unwrap().containers[0].image.clone();
    let template = format!("dljob-recreate-{name}-x7k2p");
    let template_uid = format!("t-{uid}");
    // As the API server stores it (abridged): the manifest dljob sent.
    let created = json!({"apiVersion": "v1", "kind": "PodTemplate",
        "metadata": {"name": template, "namespace": NS, "uid": template_uid},
        "template": {"metadata": {"labels": {"dljob.dev/job": "mnist"}},
            "spec": {"containers": [{"name": "pytorch", "image": image}]}}});
    let digest = content_digest(&created);
    let pod_name = name.clone();
    let entry = json!({"name": name, "uid": uid,
        "saved": {"name": template, "uid": template_uid, "digest": digest}});
    let calls = [
        read_pod(pod),
        call(
            "POST",
            format!("/api/v1/namespaces/{NS}/podtemplates?&fieldManager=dljob"),
            move |b| {
                assert_eq!(b["metadata"].get("name"), None);
                assert_eq!(b["metadata"]["generateName"], "dljob-recreate-");
                assert_eq!(b["metadata"]["labels"], json!({"dljob.dev/job": "mnist"}));
                assert_eq!(
                    b["metadata"]["annotations"],
                    json!({"dljob.dev/recreates": pod_name})
                );
                let owner = &b["metadata"]["ownerReferences"][0];
                assert_eq!(
                    (&owner["uid"], &owner["controller"]),
                    (&json!("job-uid"), &json!(true))
                );
                // Its own spec, not pinned to the old node.
                let t = &b["template"];
                assert_eq!(t["spec"]["containers"][0]["image"], json!(image));
                assert_eq!(t["spec"].get("nodeName"), None);
                assert_eq!(t["metadata"]["labels"]["dljob.dev/job"], "mnist");
            },
            created,
        ),
    ];
    (calls, entry)
}

/// The status write of a pass that counted worker-0's exit and saved no
/// manifest for it: worker-0 to recreate, by name and uid alone.
fn restarting_unsaved(job: &DLJob) -> Call {
    call(
        "PATCH",
        status_uri(),
        |b| {
            assert_eq!(
                b["status"]["pendingRecreates"],
                json!([{"name": "worker-0", "uid": "uid-worker-0"}])
            )
        },
        with_status(job, &json!({"status": {"phase": "Restarting"}})),
    )
}

fn delete_pod(name: &'static str) -> Call {
    call(
        "DELETE",
        format!("/api/v1/namespaces/{NS}/pods/{name}?"),
        move |b| assert_eq!(b["preconditions"], json!({"uid": format!("uid-{name}")})),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}}),
    )
}

/// Serves `calls` in order, then asserts that no other call comes before
/// every client is dropped.
async fn verify(handle: Handle, calls: Vec<Call>) {
    verify_on(handle, calls, Server::default()).await
}

/// [`verify`] on an API server that holds what `server` holds: every write
/// is applied to it and checked as the real server checks it.
async fn verify_on(mut handle: Handle, calls: Vec<Call>, mut server: Server) {
    answer_on(&mut handle, calls, &mut server).await;
    if let Some((request, _)) = handle.next_request().await {
        panic!("unexpected call {} {}", request.method(), request.uri());
    }
}

/// Answers `calls` in order, checking each request.
async fn answer(handle: &mut Handle, calls: Vec<Call>) {
    answer_on(handle, calls, &mut Server::default()).await
}

/// The API server that holds `job` (as the reconcile read it).
fn holding(job: &DLJob) -> Server {
    Server::holding([&serde_json::to_value(job).unwrap()])
}

/// [`answer`] on `server`: each write is applied to what it holds and the
/// result checked against the schema the real API server applies
/// (`tests/apiserver`), before the test's own check of the body.
async fn answer_on(handle: &mut Handle, calls: Vec<Call>, server: &mut Server) {
    for expected in calls {
        let (request, send) = handle.next_request().await.unwrap_or_else(|| {
            panic!("expected {} {}, got no call", expected.method, expected.uri)
        });
        assert_eq!(
            (request.method().as_str(), request.uri().to_string()),
            (expected.method, expected.uri.clone()),
        );
        let content_type = request
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let bytes = request.into_body().collect_bytes().await.unwrap();
        let body: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        (expected.check)(&body);
        // What the server would refuse is refused, whatever the test answers.
        server.write(expected.method, &expected.uri, &content_type, &body);
        let respond = if expected.respond.is_null() {
            body
        } else {
            expected.respond
        };
        // A Status answers with its code (e.g. 409 AlreadyExists); a
        // [`plain_text`] answer is sent as the text it holds.
        let code = match respond["kind"].as_str() {
            Some("Status" | PLAIN_TEXT) => respond["code"].as_u64().unwrap_or(500) as u16,
            _ => 200,
        };
        let body = match respond["kind"].as_str() {
            Some(PLAIN_TEXT) => respond["text"].as_str().unwrap().as_bytes().to_vec(),
            _ => serde_json::to_vec(&respond).unwrap(),
        };
        send.send_response(
            Response::builder()
                .status(code)
                .body(Body::from(body))
                .unwrap(),
        );
    }
}

/// One reconcile of a run of several on one context: its calls answered,
/// the mock handed back for the next (which checks that nothing follows).
async fn reconcile_then(
    job: DLJob,
    ctx: Arc<Context>,
    mut handle: Handle,
    calls: Vec<Call>,
) -> Handle {
    let mut server = holding(&job);
    let verifier = tokio::spawn(async move {
        answer_on(&mut handle, calls, &mut server).await;
        handle
    });
    tokio::time::timeout(
        Duration::from_secs(5),
        controller::reconcile(Arc::new(job), ctx),
    )
    .await
    .expect("reconcile timed out")
    .expect("reconcile failed");
    tokio::time::timeout(Duration::from_secs(5), verifier)
        .await
        .expect("verifier timed out")
        .expect("verifier panicked")
}

/// Runs one reconcile against the verifier, both bounded by a timeout;
/// returns the metrics it left.
async fn reconcile_expecting(
    job: DLJob,
    ctx: Arc<Context>,
    handle: Handle,
    calls: Vec<Call>,
) -> Arc<Metrics> {
    let (result, metrics) = reconcile_with(job, ctx, handle, calls).await;
    result.expect("reconcile failed");
    metrics
}

/// [`reconcile_expecting`] that returns the reconcile's result.
async fn reconcile_with(
    job: DLJob,
    ctx: Arc<Context>,
    handle: Handle,
    calls: Vec<Call>,
) -> (Result<(), controller::Error>, Arc<Metrics>) {
    let verifier = tokio::spawn(verify_on(handle, calls, holding(&job)));
    let metrics = ctx.metrics.clone();
    let result = tokio::time::timeout(
        Duration::from_secs(5),
        controller::reconcile(Arc::new(job), ctx),
    )
    .await
    .expect("reconcile timed out");
    tokio::time::timeout(Duration::from_secs(5), verifier)
        .await
        .expect("verifier timed out")
        .expect("verifier panicked");
    (result.map(drop), metrics)
}

/// The API server's 404.
/// The `kind` of a test answer sent as plain text, not JSON.
const PLAIN_TEXT: &str = "test/PlainText";

/// An answer that is not a Status: what the real API server sends for a
/// path it does not serve, e.g. a CRD not installed
/// (`404 page not found`, `text/plain`).
fn plain_text(code: u16, text: &str) -> Value {
    json!({"kind": PLAIN_TEXT, "code": code, "text": text})
}

fn not_found(message: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
        "message": message, "reason": "NotFound", "code": 404})
}

fn services_uri() -> String {
    format!("/api/v1/namespaces/{NS}/services?&fieldManager=dljob")
}

fn status_uri() -> String {
    format!("/apis/dljob.dev/v1alpha1/namespaces/{NS}/dljobs/mnist/status?&force=true&fieldManager=dljob")
}

/// The phase-change Event the recorder posts, checked by its reason.
/// The Job member `name` (uid `uid-job-<name>`, as `indexed_job` makes
/// it) suspended, guarded by its uid; answered with `job`.
fn suspended(name: &'static str, job: &Job) -> Call {
    call(
        "PATCH",
        format!("/apis/batch/v1/namespaces/{NS}/jobs/{name}?&fieldManager=dljob"),
        move |b| {
            assert_eq!(
                b,
                &json!({"metadata": {"uid": format!("uid-job-{name}")}, "spec": {"suspend": true}})
            )
        },
        serde_json::to_value(job).unwrap(),
    )
}

/// A Warning Event about the DLJob, of `reason` and exactly `note`.
fn warning(reason: &'static str, note: impl Into<String>) -> Call {
    let note = note.into();
    call(
        "POST",
        events_uri(),
        move |b| {
            assert_eq!(b["type"], "Warning");
            assert_eq!(b["reason"], reason);
            assert_eq!(b["note"], note.as_str());
            assert_eq!(b["regarding"]["kind"], "DLJob");
            assert_eq!(b["regarding"]["name"], "mnist");
        },
        Value::Null,
    )
}

fn event(reason: &'static str) -> Call {
    call(
        "POST",
        events_uri(),
        move |b| assert_eq!(b["reason"], reason),
        Value::Null,
    )
}

/// The DLJob `mnist` as an Event regards it.
fn mnist_reference() -> k8s_openapi::api::core::v1::ObjectReference {
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("dljob.dev/v1alpha1".into()),
        kind: Some("DLJob".into()),
        namespace: Some(NS.into()),
        name: Some("mnist".into()),
        uid: Some("job-uid".into()),
        ..Default::default()
    }
}

fn events_uri() -> String {
    format!("/apis/events.k8s.io/v1/namespaces/{NS}/events?")
}

fn with_status(job: &DLJob, status: &Value) -> Value {
    let mut j = serde_json::to_value(job).unwrap();
    j["status"] = status["status"].clone();
    j
}

// ---- the scenarios ---------------------------------------------------------

const PYTORCH: &str = "master=1,worker=1";

/// The pytorch job's master and worker, bare pods both running, and
/// nothing else.
fn both_running() -> World {
    World {
        pods: vec![
            bare_pod("mnist", "pytorch", PYTORCH, "master", 0, running()),
            bare_pod("mnist", "pytorch", PYTORCH, "worker", 0, running()),
        ],
        ..World::default()
    }
}

#[tokio::test]
async fn new_job_gets_its_service_a_status_and_an_event() {
    let job = dljob("pytorch", PYTORCH);
    let world = both_running();
    let (ctx, handle) = context(world, vec![job.clone()]);
    let jj = job.clone();
    let metrics = reconcile_expecting(
        job,
        ctx,
        handle,
        vec![
            // Not in the cache of labelled Services: created, never applied
            // over what may be someone else's.
            call(
                "POST",
                services_uri(),
                |b| {
                    assert_eq!((&b["apiVersion"], &b["kind"]), (&json!("v1"), &json!("Service")));
                    assert_eq!(b["metadata"]["name"], "mnist");
                    assert_eq!(b["metadata"]["ownerReferences"][0]["uid"], "job-uid");
                    assert_eq!(b["metadata"]["ownerReferences"][0]["controller"], true);
                    assert_eq!(
                        b["spec"],
                        json!({
                            "clusterIP": "None", "publishNotReadyAddresses": true,
                            "selector": {"dljob.dev/job": "mnist"},
                            "ports": [{"name": "dljob", "port": 23456, "protocol": "TCP"}]
                        })
                    );
                },
                Value::Null,
            ),
            call(
                "PATCH",
                status_uri(),
                |b| {
                    assert_eq!(b["apiVersion"], "dljob.dev/v1alpha1");
                    assert_eq!(b["kind"], "DLJob");
                    let s = &b["status"];
                    assert_eq!(s["phase"], "Running");
                    assert_eq!(s["active"], "2/2");
                    assert_eq!(s["observedGeneration"], 1);
                    assert_eq!(s["startTime"], "2023-11-14T22:13:20Z");
                    assert_eq!(
                        s["replicas"],
                        json!({
                            "master": {"pending": 0, "active": 1, "succeeded": 0, "failed": 0, "restarts": 0},
                            "worker": {"pending": 0, "active": 1, "succeeded": 0, "failed": 0, "restarts": 0}
                        })
                    );
                    assert_eq!(s["coordinator"], json!({"replica": "master-0", "pod": "master-0"}));
                    let types: Vec<&str> = s["conditions"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|c| c["type"].as_str().unwrap())
                        .collect();
                    assert_eq!(types, ["Created", "Running"]);
                },
                with_status(&jj, &json!({"status": {"phase": "Running"}})),
            ),
            call(
                "POST",
                events_uri(),
                |b| {
                    assert_eq!(b["reason"], "Running");
                    assert_eq!(b["type"], "Normal");
                    assert_eq!(b["note"], "all 2 replicas started");
                    assert_eq!(b["regarding"]["kind"], "DLJob");
                    assert_eq!(b["regarding"]["name"], "mnist");
                },
                Value::Null,
            ),
        ],
    )
    .await;
    assert_eq!(metrics.reconciles.get(), 1);
}

#[tokio::test]
async fn unchanged_job_is_reconciled_without_any_call() {
    let pods = vec![
        bare_pod("mnist", "pytorch", PYTORCH, "master", 0, running()),
        bare_pod("mnist", "pytorch", PYTORCH, "worker", 0, running()),
    ];
    let mut job = dljob("pytorch", PYTORCH);
    // The status an earlier reconcile wrote for the same members.
    let (ctx, handle) = context(
        World {
            pods: pods.clone(),
            services: vec![served(23456)],
            ..World::default()
        },
        vec![],
    );
    let plan = controller::plan_of(&job).unwrap();
    let observed = controller::observe_members(&ctx, NS, "mnist", "job-uid");
    let earlier = Timestamp::from_second(1_699_999_000).unwrap();
    job.status = Some(status::next(&plan, &observed, None, Some(1), earlier).status);
    reconcile_expecting(job, ctx, handle, vec![]).await;
}

/// A running pytorch job (its status as a reconcile of both members
/// running wrote it into `job`), then the world where the worker was
/// OOM-killed, to reconcile.
fn worker_oom_killed(job: &mut DLJob) -> (Arc<Context>, Handle) {
    let healthy = vec![
        bare_pod("mnist", "pytorch", PYTORCH, "master", 0, running()),
        bare_pod("mnist", "pytorch", PYTORCH, "worker", 0, running()),
    ];
    let (ctx, _) = context(
        World {
            pods: healthy,
            ..World::default()
        },
        vec![],
    );
    let plan = controller::plan_of(job).unwrap();
    let observed = controller::observe_members(&ctx, NS, "mnist", "job-uid");
    job.status = Some(status::next(&plan, &observed, None, Some(1), now()).status);
    context(
        World {
            pods: vec![
                bare_pod("mnist", "pytorch", PYTORCH, "master", 0, running()),
                oom_killed_worker(),
            ],
            services: vec![served(23456)],
            ..World::default()
        },
        vec![],
    )
}

fn oom_killed_worker() -> Pod {
    bare_pod(
        "mnist",
        "pytorch",
        PYTORCH,
        "worker",
        0,
        terminated(137, "OOMKilled"),
    )
}

#[tokio::test]
async fn retryable_exit_counts_a_restart_and_deletes_the_pod() {
    let mut job = dljob("pytorch", PYTORCH);
    let (ctx, handle) = worker_oom_killed(&mut job);
    let jj = job.clone();
    let (save, saved) = save_pod(oom_killed_worker());
    let metrics = reconcile_expecting(
        job,
        ctx,
        handle,
        [
            // Saved first, then recorded by the pass's one status write,
            // then deleted.
            save.into(),
            vec![
                call(
                    "PATCH",
                    status_uri(),
                    move |b| {
                        let s = &b["status"];
                        assert_eq!(s["phase"], "Restarting");
                        assert_eq!(s["restarts"], 1);
                        assert_eq!(s["replicas"]["worker"]["restarts"], 1);
                        assert_eq!(
                            s["countedExits"],
                            json!({"worker-0": "uid-worker-0/containerd://c1"})
                        );
                        // The pod to recreate, by name and uid, and the
                        // PodTemplate its manifest was saved in; the manifest
                        // itself (env values and all) is not in the status.
                        assert_eq!(s["pendingRecreates"], json!([saved]));
                    },
                    with_status(&jj, &json!({"status": {"phase": "Restarting"}})),
                ),
                call(
                    "POST",
                    events_uri(),
                    |b| {
                        assert_eq!(b["reason"], "Restarting");
                        assert_eq!(b["type"], "Warning");
                    },
                    Value::Null,
                ),
            ],
            vec![delete_pod("worker-0")],
        ]
        .into_iter()
        .flatten()
        .collect(),
    )
    .await;
    assert_eq!(metrics.restarts.get(), 1);
}

/// The bare pod to recreate was already replaced by the time the
/// reconciler reads it to save it (another uid): the cache is behind. The
/// new pod is neither saved nor deleted (the delete's uid precondition
/// fails); the next reconcile sees it.
#[tokio::test]
async fn a_bare_pod_replaced_before_it_is_saved_is_left_alone() {
    let mut job = dljob("pytorch", PYTORCH);
    let (ctx, handle) = worker_oom_killed(&mut job);
    let jj = job.clone();
    let mut replaced = bare_pod("mnist", "pytorch", PYTORCH, "worker", 0, running());
    replaced.metadata.uid = Some("uid-worker-0-new".into());
    let precondition_failed = json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409,
        "message": "Operation cannot be fulfilled on Pod \"worker-0\": Precondition failed: UID in precondition: uid-worker-0, UID in object meta: uid-worker-0-new"
    });
    reconcile_expecting(
        job,
        ctx,
        handle,
        vec![
            read_pod(replaced),
            restarting_unsaved(&jj),
            event("Restarting"),
            call(
                "DELETE",
                format!("/api/v1/namespaces/{NS}/pods/worker-0?"),
                |b| assert_eq!(b["preconditions"], json!({"uid": "uid-worker-0"})),
                precondition_failed,
            ),
        ],
    )
    .await;
}

/// restart-scope Job: the worker's OOM kill deletes every member (each
/// with its uid precondition), counted as one restart, and the status
/// names the cause.
#[tokio::test]
async fn a_job_scope_retry_deletes_every_member() {
    let mut job = dljob("pytorch", PYTORCH);
    job.spec.policies.restart_scope = dljob::contract::RestartScope::Job;
    let (ctx, handle) = worker_oom_killed(&mut job);
    let jj = job.clone();
    let (save_master, master) = save_pod(bare_pod(
        "mnist",
        "pytorch",
        PYTORCH,
        "master",
        0,
        running(),
    ));
    let (save_worker, worker) = save_pod(oom_killed_worker());
    let metrics = reconcile_expecting(
        job,
        ctx,
        handle,
        [save_master.into(), save_worker.into(), vec![
            call(
                "PATCH",
                status_uri(),
                move |b| {
                    let s = &b["status"];
                    assert_eq!(s["restarts"], 1);
                    assert_eq!(
                        s["jobRestart"],
                        json!({
                            "cause": "worker-0 (pod worker-0) exited with exit code 137 (OOMKilled)",
                            "uids": ["uid-master-0", "uid-worker-0"]
                        })
                    );
                    assert_eq!(s["pendingRecreates"], json!([master, worker]));
                },
                with_status(&jj, &json!({"status": {"phase": "Restarting"}})),
            ),
            call(
                "POST",
                events_uri(),
                |b| {
                    assert_eq!(b["reason"], "Restarting");
                    assert_eq!(
                        b["note"],
                        "restarting every member (restart scope Job) after worker-0 (pod worker-0) exited with exit code 137 (OOMKilled): 1 of 3 restarts used"
                    );
                },
                Value::Null,
            ),
        ],
        vec![delete_pod("master-0"), delete_pod("worker-0")],
        ]
        .into_iter()
        .flatten()
        .collect(),
    )
    .await;
    assert_eq!(metrics.restarts.get(), 1);
}

/// The chief (an Indexed Job) exits 0: the job succeeded. The ps
/// StatefulSet is scaled to 0, the worker Job (its pod still running) is
/// suspended; the chief's Job, every index of it succeeded, completes by
/// itself: it and its pod stay, with the pod's log, marked as this run's.
#[tokio::test]
async fn coordinator_success_stops_statefulsets_and_suspends_running_jobs() {
    const TF: &str = "chief=1,ps=2,worker=1";
    let mut job = dljob("tensorflow", TF);
    job.status = Some(Default::default());
    let sts = statefulset("mnist", "tensorflow", TF, "ps", 2);
    let chief = indexed_job("mnist", "tensorflow", TF, "chief");
    let worker = indexed_job("mnist", "tensorflow", TF, "worker");
    let (ctx, handle) = context(
        World {
            pods: vec![
                succeeded(owned_pod(
                    "Job",
                    "chief",
                    "tensorflow",
                    TF,
                    "chief",
                    0,
                    terminated(0, "Completed"),
                )),
                owned_pod("StatefulSet", "ps", "tensorflow", TF, "ps", 0, running()),
                owned_pod("StatefulSet", "ps", "tensorflow", TF, "ps", 1, running()),
                owned_pod("Job", "worker", "tensorflow", TF, "worker", 0, running()),
            ],
            statefulsets: vec![sts.clone()],
            jobs: vec![chief.clone(), worker.clone()],
            services: vec![served(23456)],
        },
        vec![],
    );
    let jj = job.clone();
    let sts_json = serde_json::to_value(&sts).unwrap();
    let marked = |uid: &str| json!({"metadata": {"uid": uid, "annotations": {"dljob.dev/finished-run": "job-uid"}}});
    reconcile_expecting(
        job,
        ctx,
        handle,
        vec![
            call(
                "PATCH",
                status_uri(),
                |b| {
                    let s = &b["status"];
                    assert_eq!(s["phase"], "Succeeded");
                    assert_eq!(s["completionTime"], "2023-11-14T22:13:20Z");
                    assert_eq!(
                        s["coordinator"],
                        json!({"replica": "chief-0", "pod": "chief-0", "exitCode": 0, "reason": "Completed"})
                    );
                },
                with_status(&jj, &json!({"status": {"phase": "Succeeded"}})),
            ),
            event("CoordinatorSucceeded"),
            // Each write to a user's workload names the uid observed: a
            // set or Job recreated under the same name is left alone.
            // Scaled to 0 in one patch of the set itself, the size it had
            // kept beside.
            call(
                "PATCH",
                format!("/apis/apps/v1/namespaces/{NS}/statefulsets/ps?&fieldManager=dljob"),
                |b| {
                    assert_eq!(
                        b,
                        &json!({
                            "metadata": {"uid": "uid-sts-ps", "annotations": {"dljob.dev/scaled-from": "2"}},
                            "spec": {"replicas": 0}
                        })
                    )
                },
                sts_json,
            ),
            suspended("worker", &worker),
            // The chief's finished pod stays, and so does its Job: marked
            // as this run's, so that a later run never counts them.
            call(
                "PATCH",
                format!("/api/v1/namespaces/{NS}/pods/chief-0?&fieldManager=dljob"),
                move |b| assert_eq!(b, &marked("uid-chief-0")),
                Value::Null,
            ),
            call(
                "PATCH",
                format!("/apis/batch/v1/namespaces/{NS}/jobs/chief?&fieldManager=dljob"),
                move |b| assert_eq!(b, &json!({"metadata": {"uid": "uid-job-chief", "annotations": {"dljob.dev/finished-run": "job-uid"}}})),
                serde_json::to_value(&chief).unwrap(),
            ),
        ],
    )
    .await;
}

/// Under clean-pod-policy None a failed job keeps every pod, and nothing
/// starts again. The XGBoost master (an Indexed Job) exits 1, a permanent
/// exit: the job fails. Without more, the Job controller would replace the
/// master's failed pod (and a worker's, up to each Job's backoffLimit), and
/// they would train again for a job that has ended (seen in a real
/// cluster). Both Jobs are suspended (which stops the worker still
/// running; a Job controller never replaces a pod of a suspended Job), and
/// the failed pod stays, marked as this run's. The Job controller's side is
/// modelled from its documented semantics: a suspended Job creates no pods.
#[tokio::test]
async fn under_none_a_failed_jobs_member_jobs_are_suspended_and_its_pods_kept() {
    const XGB: &str = "master=1,worker=1";
    let mut job = dljob("xgboost", XGB);
    job.spec.policies.clean_pod = dljob::contract::CleanPodPolicy::None;
    job.status = Some(Default::default());
    let master = indexed_job("mnist", "xgboost", XGB, "master");
    let worker = indexed_job("mnist", "xgboost", XGB, "worker");
    let (ctx, handle) = context(
        World {
            pods: vec![
                owned_pod(
                    "Job",
                    "master",
                    "xgboost",
                    XGB,
                    "master",
                    0,
                    terminated(1, "Error"),
                ),
                owned_pod("Job", "worker", "xgboost", XGB, "worker", 0, running()),
            ],
            jobs: vec![master.clone(), worker.clone()],
            services: vec![served(23456)],
            ..World::default()
        },
        vec![],
    );
    let jj = job.clone();
    reconcile_expecting(
        job,
        ctx,
        handle,
        vec![
            call(
                "PATCH",
                status_uri(),
                |b| assert_eq!(b["status"]["phase"], "Failed"),
                with_status(&jj, &json!({"status": {"phase": "Failed"}})),
            ),
            event("ExitCode"),
            suspended("master", &master),
            suspended("worker", &worker),
            // The master's failed pod stays, with its log.
            call(
                "PATCH",
                format!("/api/v1/namespaces/{NS}/pods/master-0?&fieldManager=dljob"),
                |b| assert_eq!(b, &json!({"metadata": {"uid": "uid-master-0", "annotations": {"dljob.dev/finished-run": "job-uid"}}})),
                Value::Null,
            ),
        ],
    )
    .await;
}

const MPI: &str = "launcher=1,worker=1";

fn mpi_world() -> World {
    World {
        pods: vec![bare_pod(
            "mnist",
            "mpi",
            MPI,
            "launcher",
            0,
            json!({"waiting": {}}),
        )],
        services: vec![served(22)],
        ..World::default()
    }
}

/// One reconcile of a new mpi job whose Secret create is answered with
/// `created` (a Secret, or a 409 Status), then the Events `events` (by
/// reason); returns the status it wrote.
/// After a 409 the reconciler reads the DLJob: the API server answers it
/// with `held` as its status.
async fn mpi_reconcile(created: Value, held: Value, events: &[&'static str]) -> Value {
    let mut job = dljob("mpi", MPI);
    job.spec.port = 22;
    let (ctx, handle) = context(mpi_world(), vec![]);
    let jj = job.clone();
    let written = Arc::new(std::sync::Mutex::new(Value::Null));
    let keep = written.clone();
    reconcile_expecting(
        job,
        ctx,
        handle,
        vec![call(
            "POST",
            format!("/api/v1/namespaces/{NS}/secrets?&fieldManager=dljob"),
            |b| {
                assert_eq!(b["metadata"]["name"], "mnist-ssh");
                assert_eq!(b["metadata"]["ownerReferences"][0]["kind"], "DLJob");
                let data = b["stringData"].as_object().unwrap();
                assert_eq!(
                    data.keys().collect::<Vec<_>>(),
                    ["authorized_keys", "config", "id_ed25519", "id_ed25519.pub"]
                );
                assert!(data["config"].as_str().unwrap().starts_with(
                    "Host mnist-launcher-0 mnist-launcher-0.mnist mnist-launcher-0.mnist.ml.svc\n"
                ));
            },
            created.clone(),
        )]
        .into_iter()
        // Created: the Secret is the last owned object, recorded by the
        // pass's one status write (or alone, should that write fail).
        // Already there: whose is it? The DLJob as the API server holds it
        // now says (the cache may not show the last status write yet).
        .chain((created["kind"] == "Status").then(|| {
            call(
                "GET",
                format!("/apis/dljob.dev/v1alpha1/namespaces/{NS}/dljobs/mnist"),
                |b| assert!(b.is_null()),
                with_status(&jj, &json!({"status": held})),
            )
        }))
        .chain([call(
            "PATCH",
            status_uri(),
            move |b| {
                assert_eq!(b["status"]["phase"], "Pending");
                *keep.lock().unwrap() = b["status"].clone();
            },
            with_status(&jj, &json!({"status": {"phase": "Pending"}})),
        )])
        .chain(events.iter().map(|reason| event(reason)))
        .collect(),
    )
    .await;
    let status = written.lock().unwrap().clone();
    status
}

/// The status write that would record a new job's SSH Secret fails (here
/// a 500): the Secret is recorded alone, on the status as it was — the
/// next pass would otherwise take the job's own Secret for someone else's
/// (dljob never reads Secrets) — and the failure is returned, to retry.
#[tokio::test]
async fn a_created_ssh_secret_is_recorded_alone_when_the_status_write_fails() {
    let mut job = dljob("mpi", MPI);
    job.spec.port = 22;
    let (ctx, handle) = context(mpi_world(), vec![]);
    let jj = job.clone();
    let unavailable = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
        "message": "etcdserver: request timed out", "reason": "InternalError", "code": 500});
    let (result, _) = reconcile_with(
        job,
        ctx,
        handle,
        vec![
            call(
                "POST",
                format!("/api/v1/namespaces/{NS}/secrets?&fieldManager=dljob"),
                |b| assert_eq!(b["metadata"]["name"], "mnist-ssh"),
                Value::Null,
            ),
            call(
                "PATCH",
                status_uri(),
                |b| {
                    assert_eq!(b["status"]["sshSecret"], "mnist-ssh");
                    assert_eq!(b["status"]["phase"], "Pending");
                },
                unavailable,
            ),
            // The status as it was (a new DLJob has none: every field at
            // its default, the phase included, which the API server
            // requires) with the Secret's name.
            call(
                "PATCH",
                status_uri(),
                |b| {
                    assert_eq!(
                        b,
                        &json!({"apiVersion": "dljob.dev/v1alpha1", "kind": "DLJob", "status": {
                            "phase": "Pending", "conditions": [], "replicas": {}, "active": "",
                            "restarts": 0, "countedExits": {}, "pendingRecreates": [],
                            "sshSecret": "mnist-ssh"
                        }})
                    )
                },
                with_status(
                    &jj,
                    &json!({"status": {"phase": "Pending", "sshSecret": "mnist-ssh"}}),
                ),
            ),
        ],
    )
    .await;
    let e = result.expect_err("the failed write is reported");
    assert!(format!("{e:?}").contains("etcdserver"), "{e:?}");
}

#[tokio::test]
async fn mpi_job_gets_an_ssh_secret_once() {
    let status = mpi_reconcile(Value::Null, Value::Null, &["Pending"]).await;
    assert_eq!(status["sshSecret"], "mnist-ssh");
    // The next reconcile reads the recorded Secret from the status: no
    // Secret call (the reconciler cannot list or get Secrets), no call at all.
    let mut job = dljob("mpi", MPI);
    job.spec.port = 22;
    job.status = Some(serde_json::from_value(status).unwrap());
    let (ctx, handle) = context(mpi_world(), vec![]);
    reconcile_expecting(job, ctx, handle, vec![]).await;
}

/// Once the worker runs, the launcher's scheduling gate is removed by a
/// strategic-merge patch that deletes dljob's gate only, guarded by the
/// pod's uid; the status says the launcher no longer waits.
#[tokio::test]
async fn the_launcher_gate_is_removed_once_the_worker_runs() {
    let mut launcher = bare_pod("mnist", "mpi", MPI, "launcher", 0, json!({"waiting": {}}));
    launcher.spec.as_mut().unwrap().scheduling_gates =
        Some(vec![k8s_openapi::api::core::v1::PodSchedulingGate {
            name: "dljob.dev/workers-ready".into(),
        }]);
    let uid = launcher.metadata.uid.clone().unwrap();
    let world = World {
        pods: vec![
            launcher,
            bare_pod("mnist", "mpi", MPI, "worker", 0, running()),
        ],
        services: vec![served(22)],
        ..World::default()
    };
    let mut job = dljob("mpi", MPI);
    job.spec.port = 22;
    job.status = Some(dljob::crd::DLJobStatus {
        ssh_secret: Some("mnist-ssh".into()),
        ..status_of(&job, World::default())
    });
    let (ctx, handle) = context(world, vec![]);
    let jj = job.clone();
    let launcher_uri = format!("/api/v1/namespaces/{NS}/pods/launcher-0?&fieldManager=dljob");
    reconcile_expecting(
        job,
        ctx,
        handle,
        vec![
            call(
                "PATCH",
                status_uri(),
                |b| {
                    let gated = b["status"]["conditions"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|c| c["type"] == "LauncherGated")
                        .unwrap();
                    assert_eq!((&gated["status"], &gated["reason"]), (&json!("False"), &json!("WorkersRunning")));
                },
                with_status(&jj, &json!({"status": {"phase": "Pending"}})),
            ),
            call(
                "PATCH",
                launcher_uri,
                move |b| {
                    assert_eq!(
                        b,
                        &json!({
                            "metadata": {"uid": uid},
                            "spec": {"schedulingGates": [{"$patch": "delete", "name": "dljob.dev/workers-ready"}]}
                        })
                    );
                },
                Value::Null,
            ),
        ],
    )
    .await;
}

/// An mpi job whose SSH Secret is recorded, with its worker pending (the
/// kubelet cannot mount a Secret that is gone: the pod stays Pending). The
/// reconciler asks with a dry-run create, never a read: 409, the Secret is
/// there, nothing else is done; created, it is gone: the record goes, the
/// SSHSecretLost condition and its Event say so, and every member is
/// deleted for its controller to recreate with the new key the next pass
/// makes.
#[tokio::test]
async fn a_deleted_ssh_secret_is_found_by_a_dry_run_and_every_member_restarts() {
    let world = || {
        let mut worker = owned_pod(
            "StatefulSet",
            "worker",
            "mpi",
            MPI,
            "worker",
            0,
            json!({"waiting": {"reason": "ContainerCreating"}}),
        );
        worker.status.as_mut().unwrap().phase = Some("Pending".into());
        World {
            pods: vec![
                owned_pod("Job", "launcher", "mpi", MPI, "launcher", 0, running()),
                worker,
            ],
            services: vec![served(22)],
            ..World::default()
        }
    };
    let job = || {
        let mut job = dljob("mpi", MPI);
        job.spec.port = 22;
        job.status = Some(dljob::crd::DLJobStatus {
            ssh_secret: Some("mnist-ssh".into()),
            ..status_of(&job, world())
        });
        job
    };
    let dry_run = |answer: Value| {
        call(
            "POST",
            format!("/api/v1/namespaces/{NS}/secrets?&dryRun=All&fieldManager=dljob"),
            |b| {
                assert_eq!(b["metadata"]["name"], "mnist-ssh");
                assert_eq!(b["metadata"]["ownerReferences"][0]["kind"], "DLJob");
            },
            answer,
        )
    };
    // There: nothing but the question.
    let conflict = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
        "message": "secrets \"mnist-ssh\" already exists", "reason": "AlreadyExists", "code": 409});
    let (ctx, handle) = context(world(), vec![]);
    reconcile_expecting(job(), ctx, handle, vec![dry_run(conflict)]).await;
    // Gone.
    let (ctx, handle) = context(world(), vec![]);
    let jj = job();
    reconcile_expecting(
        job(),
        ctx,
        handle,
        vec![
            dry_run(
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "mnist-ssh"}}),
            ),
            call(
                "PATCH",
                status_uri(),
                |b| {
                    let s = &b["status"];
                    assert_eq!(s.get("sshSecret"), None, "{s}");
                    assert_eq!(s["phase"], "Restarting");
                    assert_eq!(s["restarts"], 0);
                    let lost = s["conditions"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|c| c["type"] == "SSHSecretLost")
                        .unwrap();
                    assert_eq!(
                        (&lost["status"], &lost["reason"]),
                        (&json!("True"), &json!("SecretDeleted"))
                    );
                },
                with_status(&jj, &json!({"status": {"phase": "Restarting"}})),
            ),
            event("Restarting"),
            event("SSHSecretLost"),
            delete_pod("launcher-0"),
            delete_pod("worker-0"),
        ],
    )
    .await;
}

/// A Secret `<job>-ssh` that this DLJob did not create (the reconciler
/// never reads Secrets, so it cannot tell whose it is): not recorded as the
/// job's, reported with the fix, once; the create is tried again later.
#[tokio::test]
async fn an_ssh_secret_that_already_exists_is_reported_not_taken() {
    let conflict = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
        "message": "secrets \"mnist-ssh\" already exists", "reason": "AlreadyExists", "code": 409});
    let status = mpi_reconcile(
        conflict.clone(),
        json!({"phase": "Pending"}),
        &["Pending", "OwnershipConflict"],
    )
    .await;
    assert_eq!(status.get("sshSecret"), None);
    let condition = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "OwnershipConflict")
        .unwrap();
    assert_eq!(condition["status"], "True");
    assert_eq!(condition["reason"], "NotControlledByThisJob");
    assert_eq!(
        condition["message"],
        "Secret/mnist-ssh exists and was not created by dljob for this DLJob (dljob never reads Secrets, so it cannot tell whose it is); the job's pods would mount it: delete it (dljob then creates the job's own) or rename the job"
    );
}

/// The job's own Secret, created by an earlier reconcile whose status
/// write the cache does not show yet: the create answers 409, the DLJob as
/// the API server holds it records the Secret, so it is the job's — no
/// conflict, and the status written keeps the record.
#[tokio::test]
async fn an_ssh_secret_recorded_since_the_cache_was_filled_is_the_jobs() {
    let conflict = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
        "message": "secrets \"mnist-ssh\" already exists", "reason": "AlreadyExists", "code": 409});
    let status = mpi_reconcile(
        conflict,
        json!({"phase": "Pending", "sshSecret": "mnist-ssh"}),
        &["Pending"],
    )
    .await;
    assert_eq!(status["sshSecret"], "mnist-ssh");
    assert!(
        !status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "OwnershipConflict"),
        "{status}"
    );
}

/// A pytorch job `master=1,worker=2` whose workers are the StatefulSet
/// `worker` with `size` replicas (two of its pods running).
fn scaled_world(size: u32) -> World {
    const TOPOLOGY: &str = "master=1,worker=2";
    World {
        pods: std::iter::once(bare_pod(
            "mnist",
            "pytorch",
            TOPOLOGY,
            "master",
            0,
            running(),
        ))
        .chain((0..2).map(|i| {
            owned_pod(
                "StatefulSet",
                "worker",
                "pytorch",
                TOPOLOGY,
                "worker",
                i,
                running(),
            )
        }))
        .collect(),
        statefulsets: vec![statefulset("mnist", "pytorch", TOPOLOGY, "worker", size)],
        services: vec![served(23456)],
        ..World::default()
    }
}

/// The status a reconcile of `world` computes from `previous`.
fn status_of(job: &DLJob, world: World) -> dljob::crd::DLJobStatus {
    let (ctx, _) = context(world, vec![]);
    let plan = controller::plan_of(job).unwrap();
    let observed = controller::observe_members(&ctx, NS, "mnist", "job-uid");
    status::next(&plan, &observed, job.status.as_ref(), Some(1), now()).status
}

#[tokio::test]
async fn a_statefulset_scaled_beyond_its_role_gets_a_condition_and_one_event() {
    const MESSAGE: &str = "StatefulSet worker has 3 replicas but role worker has 2: scale it back (kubectl scale statefulset worker --replicas=2), or change dljob.dev/replicas (master=1,worker=2) on every member of the job";
    let mut job = dljob("pytorch", "master=1,worker=2");
    job.status = Some(status_of(&job, scaled_world(2)));
    assert_eq!(
        job.status.as_ref().unwrap().phase,
        dljob::crd::Phase::Running
    );

    // `kubectl scale statefulset worker --replicas=3`.
    let (ctx, handle) = context(scaled_world(3), vec![]);
    let jj = job.clone();
    let condition = json!({
        "type": "MemberSizeMismatch", "status": "True", "reason": "SizeDiffersFromTopology",
        "message": MESSAGE, "lastTransitionTime": "2023-11-14T22:13:20Z",
    });
    let expected = condition.clone();
    reconcile_expecting(
        job.clone(),
        ctx,
        handle,
        vec![
            call(
                "PATCH",
                status_uri(),
                move |b| {
                    let conditions = b["status"]["conditions"].as_array().unwrap();
                    let types: Vec<&str> = conditions
                        .iter()
                        .map(|c| c["type"].as_str().unwrap())
                        .collect();
                    assert_eq!(types, ["Created", "Running", "MemberSizeMismatch"]);
                    assert_eq!(conditions[2], expected);
                    assert_eq!(b["status"]["phase"], "Running");
                },
                with_status(&jj, &json!({"status": {"phase": "Running"}})),
            ),
            call(
                "POST",
                events_uri(),
                |b| {
                    assert_eq!(b["type"], "Warning");
                    assert_eq!(b["reason"], "MemberSizeMismatch");
                    assert_eq!(b["note"], MESSAGE);
                    assert_eq!(b["action"], "Reconcile");
                    assert_eq!(b["regarding"]["kind"], "DLJob");
                    assert_eq!(b["regarding"]["name"], "mnist");
                },
                Value::Null,
            ),
        ],
    )
    .await;

    // Still scaled: the condition stays, no second Event, no call at all.
    job.status = Some(status_of(&job, scaled_world(3)));
    let conditions = serde_json::to_value(&job.status.as_ref().unwrap().conditions).unwrap();
    assert_eq!(conditions[2], condition);
    let (ctx, handle) = context(scaled_world(3), vec![]);
    reconcile_expecting(job.clone(), ctx, handle, vec![]).await;

    // Scaled back: the condition turns False, without an Event.
    let (ctx, handle) = context(scaled_world(2), vec![]);
    let jj = job.clone();
    reconcile_expecting(
        job,
        ctx,
        handle,
        vec![call(
            "PATCH",
            status_uri(),
            |b| {
                assert_eq!(
                    b["status"]["conditions"][2],
                    json!({
                        "type": "MemberSizeMismatch", "status": "False",
                        "reason": "SizesMatchTopology",
                        "message": "every member StatefulSet and Job has its role's size",
                        "lastTransitionTime": "2023-11-14T22:13:20Z",
                    })
                );
            },
            with_status(&jj, &json!({"status": {"phase": "Running"}})),
        )],
    )
    .await;
}

/// A worker whose wait for its names gave up (its init container's
/// termination message, as `dljob wait-for-names` writes it, read through
/// the cache's trim): the NameWaitFailed condition names the pod and the
/// name, with one Warning Event; a second look changes nothing.
#[tokio::test]
async fn a_name_wait_that_gave_up_gets_a_condition_and_one_event() {
    const MESSAGE: &str = "pod worker-1: dljob-wait-for-names gave up after 600s: mnist-master-0.mnist.ml-jobs.svc does not resolve (Name or service not known); a pod whose wait gave up started its framework without its names: check the job's headless Service, that dljob's reconciler runs, that the pods are scheduled";
    let gave_up = || {
        let mut world = scaled_world(2);
        let worker = world
            .pods
            .iter_mut()
            .find(|p| p.metadata.name.as_deref() == Some("worker-1"))
            .expect("the world has worker-1");
        worker.status.as_mut().unwrap().init_container_statuses = Some(vec![serde_json::from_value(json!({
            "name": "dljob-wait-for-names", "image": "ghcr.io/dljob/dljob:0.1.0", "imageID": "",
            "ready": true, "restartCount": 0,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                "message": "dljob: gave up after 600s: mnist-master-0.mnist.ml-jobs.svc does not resolve (Name or service not known); the framework starts anyway and may fail to reach it. The job's headless Service publishes the name once that pod has an address: is the Service there (kubectl get service -n ml-jobs mnist), is dljob's reconciler running, is that pod scheduled?"}}
        }))
        .unwrap()]);
        world
    };
    let mut job = dljob("pytorch", "master=1,worker=2");
    job.status = Some(status_of(&job, scaled_world(2)));
    let (ctx, handle) = context(gave_up(), vec![]);
    let jj = job.clone();
    reconcile_expecting(
        job.clone(),
        ctx,
        handle,
        vec![
            call(
                "PATCH",
                status_uri(),
                |b| {
                    let conditions = b["status"]["conditions"].as_array().unwrap();
                    assert_eq!(
                        conditions.last().unwrap(),
                        &json!({
                            "type": "NameWaitFailed", "status": "True", "reason": "GaveUp",
                            "message": MESSAGE, "lastTransitionTime": "2023-11-14T22:13:20Z",
                        })
                    );
                    assert_eq!(b["status"]["phase"], "Running");
                },
                with_status(&jj, &json!({"status": {"phase": "Running"}})),
            ),
            warning("NameWaitFailed", MESSAGE),
        ],
    )
    .await;
    job.status = Some(status_of(&job, gave_up()));
    let (ctx, handle) = context(gave_up(), vec![]);
    reconcile_expecting(job, ctx, handle, vec![]).await;
}

/// `kubectl scale dljob/mnist --replicas=4` of an elastic job
/// (master=1,worker=2 under 2:5) whose workers are a StatefulSet of 2: the
/// status records the workers' size and selector, and the StatefulSet
/// itself is patched to 4, guarded by its uid (the webhook checks the
/// size again); once it is 4, a reconcile changes nothing.
#[tokio::test]
async fn scaling_an_elastic_dljob_resizes_its_workers() {
    let elastic = |mut world: World, size: u32| {
        for pod in &mut world.pods {
            pod.metadata
                .annotations
                .as_mut()
                .unwrap()
                .insert("dljob.dev/elastic".into(), "2:5".into());
        }
        let sts = &mut world.statefulsets[0];
        sts.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert("dljob.dev/elastic".into(), "2:5".into());
        sts.spec.replicas = Some(size as i32);
        world
    };
    let mut job = dljob("pytorch", "master=1,worker=2");
    job.spec.elastic = Some(dljob::contract::Elastic { min: 2, max: 5 });
    job.status = Some(status_of(&job, elastic(scaled_world(2), 2)));
    assert_eq!(
        job.status.as_ref().unwrap().selector.as_deref(),
        Some("dljob.dev/job=mnist,dljob.dev/role=worker")
    );
    job.spec.elastic_replicas = Some(4);
    let (ctx, handle) = context(elastic(scaled_world(2), 2), vec![]);
    reconcile_expecting(
        job.clone(),
        ctx,
        handle,
        vec![call(
            "PATCH",
            format!("/apis/apps/v1/namespaces/{NS}/statefulsets/worker?&fieldManager=dljob"),
            |b| {
                assert_eq!(
                    b,
                    &json!({"metadata": {"uid": "uid-sts-worker"}, "spec": {"replicas": 4}})
                )
            },
            serde_json::to_value(statefulset(
                "mnist",
                "pytorch",
                "master=1,worker=2",
                "worker",
                4,
            ))
            .unwrap(),
        )],
    )
    .await;
    // Resized (its pods not started yet): the size is recorded with one
    // Resized Event, and nothing is patched again.
    let (ctx, handle) = context(elastic(scaled_world(2), 4), vec![]);
    let jj = job.clone();
    reconcile_expecting(
        job,
        ctx,
        handle,
        vec![
            call(
                "PATCH",
                status_uri(),
                |b| assert_eq!(b["status"]["replicas"]["worker"]["replicas"], 4),
                with_status(&jj, &json!({"status": {"phase": "Running"}})),
            ),
            event("Resized"),
        ],
    )
    .await;
}

/// A Service this DLJob controls that someone edited (its selector no
/// longer selects the job's pods) is applied again, only to the object read
/// (its uid in the body); one the API server merely defaulted is not (every
/// other scenario here has one, and expects no Service call).
#[tokio::test]
async fn a_drifted_service_is_applied_again() {
    let job = dljob("pytorch", PYTORCH);
    let mut edited = served(23456);
    edited.spec.as_mut().unwrap().selector = Some([("app".to_owned(), "other".to_owned())].into());
    let served_uid = edited.metadata.uid.clone().unwrap();
    let world = World {
        pods: vec![
            bare_pod("mnist", "pytorch", PYTORCH, "master", 0, running()),
            bare_pod("mnist", "pytorch", PYTORCH, "worker", 0, running()),
        ],
        services: vec![edited],
        ..World::default()
    };
    let (ctx, handle) = context(world, vec![job.clone()]);
    let jj = job.clone();
    reconcile_expecting(
        job,
        ctx,
        handle,
        vec![
            call(
                "PATCH",
                format!("/api/v1/namespaces/{NS}/services/mnist?&force=true&fieldManager=dljob"),
                move |b| {
                    assert_eq!(b["spec"]["selector"], json!({"dljob.dev/job": "mnist"}));
                    assert_eq!(b["metadata"]["uid"], json!(served_uid));
                },
                Value::Null,
            ),
            call(
                "PATCH",
                status_uri(),
                |_| {},
                with_status(&jj, &json!({"status": {"phase": "Running"}})),
            ),
            call("POST", events_uri(), |_| {}, Value::Null),
        ],
    )
    .await;
}

/// A running two-pod PyTorch job on gang scheduler `gang`, its Service in
/// place: what the PodGroup tests start from.
fn gang_job(gang: &str) -> (DLJob, World) {
    let mut job = dljob("pytorch", PYTORCH);
    job.spec.gang = gang.into();
    let world = World {
        pods: vec![
            bare_pod("mnist", "pytorch", PYTORCH, "master", 0, running()),
            bare_pod("mnist", "pytorch", PYTORCH, "worker", 0, running()),
        ],
        services: vec![served(23456)],
        ..World::default()
    };
    (job, world)
}

/// A volcano job: the Service exists, the PodGroup is applied (owned by
/// the DLJob, minMember = every pod); where the cluster does not serve
/// Volcano's PodGroup the job gets a condition and one Event naming what to
/// install, and the reconcile does not fail.
async fn volcano_reconcile(pod_group_answer: Value, served_kind: bool) -> Vec<Value> {
    let (mut job, world) = gang_job("volcano");
    job.spec.queue = Some("research".into());
    let (ctx, handle) = context(world, vec![job.clone()]);
    let jj = job.clone();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (status_seen, events_seen) = (seen.clone(), seen.clone());
    reconcile_expecting(
        job,
        ctx,
        handle,
        vec![
            // No reflector watches PodGroups: read, absent (or the kind not
            // served: the same 404), then created.
            call(
                "GET",
                format!("/apis/scheduling.volcano.sh/v1beta1/namespaces/{NS}/podgroups/mnist"),
                |_| {},
                not_found("podgroups.scheduling.volcano.sh \"mnist\" not found"),
            ),
            call(
                "POST",
                format!("/apis/scheduling.volcano.sh/v1beta1/namespaces/{NS}/podgroups?&fieldManager=dljob"),
                |b| {
                    assert_eq!(
                        b,
                        &json!({
                            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                            "metadata": {
                                "name": "mnist", "namespace": NS,
                                "labels": {"dljob.dev/job": "mnist"},
                                "ownerReferences": [{"apiVersion": "dljob.dev/v1alpha1", "kind": "DLJob", "name": "mnist", "uid": "job-uid", "controller": true}]
                            },
                            "spec": {"minMember": 2, "queue": "research"}
                        })
                    );
                },
                pod_group_answer,
            ),
            call(
                "PATCH",
                status_uri(),
                move |b| status_seen.lock().unwrap().push(b["status"]["conditions"].clone()),
                with_status(&jj, &json!({"status": {"phase": "Running"}})),
            ),
            event("Running"),
        ]
        .into_iter()
        .chain((!served_kind).then(|| {
            call("POST", events_uri(), move |b| events_seen.lock().unwrap().push(b.clone()), Value::Null)
        }))
        .collect(),
    )
    .await;
    let seen = seen.lock().unwrap().clone();
    seen
}

/// A job under `dljob.dev/compat: volcano`: no reflector watches
/// ConfigMaps, so its ConfigMap of Volcano's files is read, absent, then
/// created, owned by the DLJob, holding what Volcano's svc plugin puts in
/// its own (hosts as Volcano names them); the next reconcile finds it as
/// declared and writes nothing; one another wrote is repaired.
#[tokio::test]
async fn a_volcano_compat_job_gets_its_config_map_of_volcanos_files() {
    let volcano_job = || {
        let (mut job, world) = gang_job("none");
        job.spec.compat = Some("volcano:master=chief".into());
        (job, world)
    };
    let (job, world) = volcano_job();
    let uri = format!("/api/v1/namespaces/{NS}/configmaps/mnist-volcano");
    let declared = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": "mnist-volcano", "namespace": NS,
            "labels": {"dljob.dev/job": "mnist"},
            "ownerReferences": [{"apiVersion": "dljob.dev/v1alpha1", "kind": "DLJob", "name": "mnist", "uid": "job-uid", "controller": true}]
        },
        "data": {
            "chief.host": "mnist-master-0.mnist",
            "VC_CHIEF_HOSTS": "mnist-master-0.mnist",
            "VC_CHIEF_NUM": "1",
            "worker.host": "mnist-worker-0.mnist",
            "VC_WORKER_HOSTS": "mnist-worker-0.mnist",
            "VC_WORKER_NUM": "1",
        }
    });
    let (ctx, handle) = context(world, vec![job.clone()]);
    let want = declared.clone();
    let jj = job.clone();
    let status = Arc::new(std::sync::Mutex::new(Value::Null));
    let written = status.clone();
    reconcile_expecting(
        job.clone(),
        ctx,
        handle,
        vec![
            call(
                "GET",
                uri.clone(),
                |_| {},
                not_found("configmaps \"mnist-volcano\" not found"),
            ),
            call(
                "POST",
                format!("/api/v1/namespaces/{NS}/configmaps?&fieldManager=dljob"),
                move |b| assert_eq!(b, &want),
                declared.clone(),
            ),
            call(
                "PATCH",
                status_uri(),
                move |b| *written.lock().unwrap() = b["status"].clone(),
                with_status(&jj, &json!({"status": {"phase": "Running"}})),
            ),
            event("Running"),
        ],
    )
    .await;
    // Found as declared: nothing to write (the status is as written).
    let mut running = job.clone();
    running.status = serde_json::from_value(status.lock().unwrap().clone()).unwrap();
    let (ctx, handle) = context(volcano_job().1, vec![running.clone()]);
    let mut found = declared.clone();
    found["metadata"]["resourceVersion"] = json!("7");
    let (result, _) = reconcile_with(
        running.clone(),
        ctx,
        handle,
        vec![call("GET", uri.clone(), |_| {}, found.clone())],
    )
    .await;
    result.expect("reconcile");
    // Another writer's change is applied again, by dljob's field manager.
    let (ctx, handle) = context(volcano_job().1, vec![running.clone()]);
    let mut drifted = found;
    drifted["data"]["VC_WORKER_NUM"] = json!("9");
    let want = declared.clone();
    let (result, _) = reconcile_with(
        running,
        ctx,
        handle,
        vec![
            call("GET", uri.clone(), |_| {}, drifted),
            call(
                "PATCH",
                format!("{uri}?&force=true&fieldManager=dljob"),
                move |b| assert_eq!(b["data"], want["data"]),
                declared,
            ),
        ],
    )
    .await;
    result.expect("reconcile");
}

/// The job's Service refused by the API server (the namespace's quota of
/// Services is used up, as a ResourceQuota answers): the reconcile goes
/// on, the status says so in the OwnedObjectRefused condition with the API
/// server's words, and one Warning Event; before, the pass failed with an
/// error only the log showed.
#[tokio::test]
async fn a_refused_service_is_a_condition_not_a_failed_reconcile() {
    const QUOTA: &str = "services \"mnist\" is forbidden: exceeded quota: team-quota, requested: services=1, used: services=10, limited: services=10";
    let job = dljob("pytorch", PYTORCH);
    let world = both_running();
    let (ctx, handle) = context(world, vec![job.clone()]);
    let jj = job.clone();
    let message = format!("Service/mnist was refused: {QUOTA}");
    let expected = message.clone();
    reconcile_expecting(
        job,
        ctx,
        handle,
        vec![
            call(
                "POST",
                services_uri(),
                |_| {},
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "message": QUOTA, "reason": "Forbidden", "code": 403}),
            ),
            call(
                "PATCH",
                status_uri(),
                move |b| {
                    let refused = b["status"]["conditions"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|c| c["type"] == "OwnedObjectRefused")
                        .expect("OwnedObjectRefused");
                    assert_eq!(refused["status"], "True");
                    assert_eq!(refused["reason"], "RefusedByAPIServer");
                    assert_eq!(refused["message"], expected.as_str());
                    assert_eq!(b["status"]["phase"], "Running");
                },
                with_status(&jj, &json!({"status": {"phase": "Running"}})),
            ),
            event("Running"),
            warning("OwnedObjectRefused", message),
        ],
    )
    .await;
}

/// In a namespace being deleted the Service's create is refused (403) like
/// every create there: not a condition or a Warning, the reconcile ends
/// with the error the controller takes quietly (the job goes with its
/// namespace), and no status is written.
#[tokio::test]
async fn a_create_refused_by_a_namespace_being_deleted_is_no_condition() {
    let job = dljob("pytorch", PYTORCH);
    let world = both_running();
    let (ctx, handle) = context(world, vec![job.clone()]);
    let (result, _) = reconcile_with(
        job,
        ctx,
        handle,
        vec![call(
            "POST",
            services_uri(),
            |_| {},
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": format!("services \"mnist\" is forbidden: unable to create new content in namespace {NS} because it is being terminated"),
                "reason": "Forbidden", "code": 403,
                "details": {"name": "mnist", "kind": "services",
                    "causes": [{"reason": "NamespaceTerminating", "message": format!("namespace {NS} is being terminated"), "field": "metadata.namespace"}]}}),
        )],
    )
    .await;
    let error = result.expect_err("the reconcile ends");
    let error = dljob::telemetry::Chain(&error).to_string();
    assert!(error.contains("because it is being terminated"), "{error}");
}

/// A coscheduling job on a cluster without the scheduler-plugins CRDs:
/// the read of its PodGroup is answered as the real API server answers a
/// path it does not serve (`404 page not found`, not a Status). The job
/// gets GangUnavailable naming the CRD and how to get it, and one Event;
/// the reconcile goes on.
#[tokio::test]
async fn a_coscheduling_job_without_the_pod_group_crd_is_told_which_crd_to_install() {
    let (job, world) = gang_job("coscheduling");
    let (ctx, handle) = context(world, vec![job.clone()]);
    let jj = job.clone();
    const MESSAGE: &str = "the cluster does not serve scheduling.x-k8s.io/v1alpha1 PodGroup (the CRD podgroups.scheduling.x-k8s.io) for PodGroup/mnist: install scheduler-plugins' CRDs and the coscheduling plugin (https://github.com/kubernetes-sigs/scheduler-plugins/blob/master/doc/install.md), or set dljob.dev/gang to another scheduler on every member";
    reconcile_expecting(
        job,
        ctx,
        handle,
        vec![
            call(
                "GET",
                format!("/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{NS}/podgroups/mnist"),
                |_| {},
                plain_text(404, "404 page not found\n"),
            ),
            call(
                "PATCH",
                status_uri(),
                |b| {
                    let gang = b["status"]["conditions"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|c| c["type"] == "GangUnavailable")
                        .cloned()
                        .expect("GangUnavailable");
                    assert_eq!(
                        (&gang["status"], &gang["reason"], &gang["message"]),
                        (
                            &json!("True"),
                            &json!("PodGroupNotApplied"),
                            &json!(MESSAGE)
                        )
                    );
                },
                with_status(&jj, &json!({"status": {"phase": "Running"}})),
            ),
            event("Running"),
            call(
                "POST",
                events_uri(),
                |b| {
                    assert_eq!(
                        (&b["type"], &b["reason"], &b["note"]),
                        (
                            &json!("Warning"),
                            &json!("GangUnavailable"),
                            &json!(MESSAGE)
                        )
                    )
                },
                Value::Null,
            ),
        ],
    )
    .await;
}

#[tokio::test]
async fn a_volcano_job_gets_its_pod_group_or_says_volcano_is_missing() {
    let not_found = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
        "message": "the server could not find the requested resource", "reason": "NotFound", "code": 404});
    // Served: applied, and no condition about it.
    let seen = volcano_reconcile(Value::Null, true).await;
    assert!(!seen[0]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == "GangUnavailable"));
    let seen = volcano_reconcile(not_found, false).await;
    let conditions = seen[0].as_array().unwrap();
    let gang = conditions
        .iter()
        .find(|c| c["type"] == "GangUnavailable")
        .unwrap();
    const MESSAGE: &str = "the cluster does not serve scheduling.volcano.sh/v1beta1 PodGroup (the CRD podgroups.scheduling.volcano.sh) for PodGroup/mnist: install Volcano (https://volcano.sh/en/docs/installation/), or set dljob.dev/gang to another scheduler on every member";
    assert_eq!(
        (&gang["status"], &gang["reason"], &gang["message"]),
        (
            &json!("True"),
            &json!("PodGroupNotApplied"),
            &json!(MESSAGE)
        )
    );
    let event = &seen[1];
    assert_eq!(
        (&event["type"], &event["reason"], &event["note"]),
        (
            &json!("Warning"),
            &json!("GangUnavailable"),
            &json!(MESSAGE)
        )
    );
    // Refused by Volcano's own webhook (a closed queue): the same condition,
    // and the reconcile still writes the status.
    let refused = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
        "message": "admission webhook \"validatepodgroup.volcano.sh\" denied the request: queue research is closed", "reason": "BadRequest", "code": 400});
    let seen = volcano_reconcile(refused, false).await;
    let conditions = seen[0].as_array().unwrap();
    let gang = conditions
        .iter()
        .find(|c| c["type"] == "GangUnavailable")
        .unwrap();
    assert_eq!(
        gang["message"],
        "PodGroup/mnist was refused: admission webhook \"validatepodgroup.volcano.sh\" denied the request: queue research is closed"
    );
    let event = &seen[1];
    assert_eq!(event["note"], gang["message"]);
}

/// A job on Kubernetes' own gang API: the PodGroup as the 1.36 API server
/// stores it (tests/fixtures/cluster/native-gang/podgroup-scheduled.json),
/// renamed to this job and owned by its DLJob.
fn stored_native_pod_group() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/cluster/native-gang/podgroup-scheduled.json"
    );
    let mut group: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    group["metadata"]["name"] = json!("mnist");
    group["metadata"]["namespace"] = json!(NS);
    group["metadata"]["labels"] = json!({"dljob.dev/job": "mnist"});
    group["metadata"]["ownerReferences"] = json!([{"apiVersion": "dljob.dev/v1alpha1", "kind": "DLJob", "name": "mnist", "uid": "job-uid", "controller": true}]);
    group["spec"]["schedulingPolicy"]["gang"]["minCount"] = json!(2);
    group
}

/// One reconcile of a two-pod PyTorch job with `dljob.dev/gang:
/// kubernetes`: the PodGroup is read, then created when absent with
/// `created`'s answer (None: it exists as `existing` says, and nothing is
/// written); returns the status conditions and any Warning Event.
async fn native_gang_reconcile(existing: Value, created: Option<Value>) -> Vec<Value> {
    let (job, world) = gang_job("kubernetes");
    let (ctx, handle) = context(world, vec![job.clone()]);
    let jj = job.clone();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (status_seen, events_seen) = (seen.clone(), seen.clone());
    let uri = format!("/apis/scheduling.k8s.io/v1alpha2/namespaces/{NS}/podgroups");
    let unavailable = created.as_ref().is_some_and(|c| c["code"] == 404) || existing["code"] == 403;
    let mut calls = vec![call("GET", format!("{uri}/mnist"), |_| {}, existing)];
    if let Some(answer) = created {
        calls.push(call(
            "POST",
            format!("{uri}?&fieldManager=dljob"),
            |b| {
                assert_eq!(
                    b,
                    &json!({
                        "apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
                        "metadata": {
                            "name": "mnist", "namespace": NS,
                            "labels": {"dljob.dev/job": "mnist"},
                            "ownerReferences": [{"apiVersion": "dljob.dev/v1alpha1", "kind": "DLJob", "name": "mnist", "uid": "job-uid", "controller": true}]
                        },
                        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}
                    })
                );
            },
            answer,
        ));
    }
    calls.push(call(
        "PATCH",
        status_uri(),
        move |b| {
            status_seen
                .lock()
                .unwrap()
                .push(b["status"]["conditions"].clone())
        },
        with_status(&jj, &json!({"status": {"phase": "Running"}})),
    ));
    calls.push(event("Running"));
    if unavailable {
        calls.push(call(
            "POST",
            events_uri(),
            move |b| events_seen.lock().unwrap().push(b.clone()),
            Value::Null,
        ));
    }
    reconcile_expecting(job, ctx, handle, calls).await;
    let seen = seen.lock().unwrap().clone();
    seen
}

#[tokio::test]
async fn a_native_gang_job_gets_a_scheduling_k8s_io_pod_group_or_says_which_gates_to_enable() {
    let gang_condition = |conditions: &Value| {
        conditions
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "GangUnavailable")
            .cloned()
    };
    // Absent: created with minCount, nothing about it in the status.
    let seen = native_gang_reconcile(
        not_found("podgroups.scheduling.k8s.io \"mnist\" not found"),
        Some(stored_native_pod_group()),
    )
    .await;
    assert_eq!(gang_condition(&seen[0]), None);
    // As the API server keeps it (its defaults, finalizer and status
    // beside dljob's fields): read, nothing written.
    let seen = native_gang_reconcile(stored_native_pod_group(), None).await;
    assert_eq!(gang_condition(&seen[0]), None);
    // Not served (the gates off, or a cluster before 1.36): a condition and
    // one Event naming the gates and the runtime-config.
    let not_served = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
        "message": "the server could not find the requested resource", "reason": "NotFound", "code": 404});
    let seen = native_gang_reconcile(
        not_found("the server could not find the requested resource"),
        Some(not_served),
    )
    .await;
    const MESSAGE: &str = "the cluster does not serve the built-in API scheduling.k8s.io/v1alpha2 PodGroup for PodGroup/mnist: Kubernetes 1.36 or later serves it with the feature gates GenericWorkload=true and GangScheduling=true on kube-apiserver and kube-scheduler and --runtime-config=scheduling.k8s.io/v1alpha2=true on kube-apiserver (1.35's alpha, scheduling.k8s.io/v1alpha1 with spec.workloadRef, is not supported); until then the pods are scheduled one by one, or set dljob.dev/gang to another scheduler on every member";
    let gang = gang_condition(&seen[0]).expect("GangUnavailable");
    assert_eq!(
        (&gang["status"], &gang["reason"], &gang["message"]),
        (
            &json!("True"),
            &json!("PodGroupNotApplied"),
            &json!(MESSAGE)
        )
    );
    assert_eq!(
        (&seen[1]["type"], &seen[1]["reason"], &seen[1]["note"]),
        (
            &json!("Warning"),
            &json!("GangUnavailable"),
            &json!(MESSAGE)
        )
    );
    // Not readable (an install whose RBAC lacks the kind): reported the
    // same way, and the job's status is still written.
    let forbidden = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
        "message": "podgroups.scheduling.k8s.io \"mnist\" is forbidden: User \"system:serviceaccount:dljob-system:dljob\" cannot get resource \"podgroups\" in API group \"scheduling.k8s.io\" in the namespace \"ml\"",
        "reason": "Forbidden", "code": 403});
    let seen = native_gang_reconcile(forbidden, None).await;
    let gang = gang_condition(&seen[0]).expect("GangUnavailable");
    assert_eq!(
        gang["message"],
        "PodGroup/mnist was refused: podgroups.scheduling.k8s.io \"mnist\" is forbidden: User \"system:serviceaccount:dljob-system:dljob\" cannot get resource \"podgroups\" in API group \"scheduling.k8s.io\" in the namespace \"ml\"; grant dljob's service account get, create and patch on podgroups.scheduling.k8s.io (deploy/ does)"
    );
    assert_eq!(seen[1]["note"], gang["message"]);
}

/// A PodGroup topology on an API server that does not keep it (the
/// `TopologyAwareWorkloadScheduling` gate off): the write's answer lacks
/// `schedulingConstraints`; the job is told which field and why, and the
/// next reconcile reads the PodGroup and writes nothing.
#[tokio::test]
async fn a_pod_group_field_the_api_server_drops_is_reported_and_not_rewritten() {
    let (mut job, world) = gang_job("kubernetes");
    job.spec.topology = Some(serde_json::from_value(json!("example.com/rack")).unwrap());
    let (ctx, handle) = context(world, vec![job.clone()]);
    let uri = format!("/apis/scheduling.k8s.io/v1alpha2/namespaces/{NS}/podgroups");
    let stored = stored_native_pod_group(); // no schedulingConstraints
    const MESSAGE: &str = "the API server did not keep spec.schedulingConstraints of PodGroup/mnist: a feature it has disabled? (a PodGroup's spec.schedulingConstraints needs the feature gate TopologyAwareWorkloadScheduling); dljob does not write it again until the job declares something else";
    let status = Arc::new(std::sync::Mutex::new(Value::Null));
    let (first, jj) = (status.clone(), job.clone());
    let handle = reconcile_then(
        job.clone(),
        ctx.clone(),
        handle,
        vec![
            call("GET", format!("{uri}/mnist"), |_| {}, not_found("podgroups.scheduling.k8s.io \"mnist\" not found")),
            call(
                "POST",
                format!("{uri}?&fieldManager=dljob"),
                |b| {
                    assert_eq!(
                        b["spec"],
                        json!({"schedulingPolicy": {"gang": {"minCount": 2}}, "schedulingConstraints": {"topology": [{"key": "example.com/rack"}]}})
                    )
                },
                stored.clone(),
            ),
            call(
                "PATCH",
                status_uri(),
                move |b| *first.lock().unwrap() = b.clone(),
                with_status(&jj, &json!({"status": {"phase": "Running"}})),
            ),
            event("Running"),
            call("POST", events_uri(), |b| assert_eq!(b["note"], MESSAGE), Value::Null),
        ],
    )
    .await;
    let written = status.lock().unwrap().clone();
    let gang = written["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "GangUnavailable")
        .cloned()
        .expect("GangUnavailable");
    assert_eq!(gang["message"], MESSAGE);
    // Next reconcile (the status as written): the PodGroup read, nothing
    // written at all — not it, and not the status, which still says why.
    let mut again = job;
    again.status = serde_json::from_value(written["status"].clone()).unwrap();
    reconcile_expecting(
        again,
        ctx,
        handle,
        vec![call("GET", format!("{uri}/mnist"), |_| {}, stored)],
    )
    .await;
}

/// One pass of the first-sight creator, bounded: how many DLJobs it made.
async fn create_missing_within_5s(ctx: &Context) -> usize {
    tokio::time::timeout(
        Duration::from_secs(5),
        first_sight::create_missing(&ctx.client, &ctx.index, &ctx.dljobs, &ctx.stores.unreadable),
    )
    .await
    .expect("create_missing finished within 5 s")
    .expect("create_missing succeeded")
}

#[tokio::test]
async fn first_sight_of_a_member_creates_its_dljob_once() {
    let pod = bare_pod("mnist", "pytorch", PYTORCH, "master", 0, running());
    let (ctx, handle) = context(
        World {
            pods: vec![pod.clone()],
            ..World::default()
        },
        vec![],
    );
    let verifier = tokio::spawn(verify(
        handle,
        vec![call(
            "POST",
            format!("/apis/dljob.dev/v1alpha1/namespaces/{NS}/dljobs?&fieldManager=dljob"),
            |b| {
                assert_eq!(b["metadata"]["name"], "mnist");
                assert_eq!(
                    b["spec"],
                    json!({
                        "framework": "pytorch", "replicas": "master=1,worker=1", "port": 23456,
                        "slots": "1", "restartPolicy": "ExitCode", "restartScope": "Job", "backoffLimit": 3,
                        "cleanPodPolicy": "Running", "gang": "none"
                    })
                );
            },
            Value::Null,
        )],
    ));
    let created = create_missing_within_5s(&ctx).await;
    assert_eq!(created, 1);
    // Once the DLJob is in the store, nothing more is created.
    let mut writer = Writer::default();
    let store = writer.as_reader();
    writer.apply_watcher_event(&watcher::Event::Apply(dljob("pytorch", PYTORCH)));
    assert_eq!(
        first_sight::create_missing(&ctx.client, &ctx.index, &store, &ctx.stores.unreadable)
            .await
            .unwrap(),
        0
    );
    drop(ctx);
    tokio::time::timeout(Duration::from_secs(5), verifier)
        .await
        .unwrap()
        .unwrap();
}

/// First sight of the jobs that changed: a job whose DLJob is in the store
/// costs a lookup and no call; a job with no live member, nothing; one
/// without its DLJob gets it (one POST); one the API server refuses is
/// reported as refused, for the creator to try again later and say once,
/// and does not keep the next job from its DLJob.
#[tokio::test]
async fn first_sight_of_changed_jobs_creates_what_is_missing_and_reports_refusals() {
    use dljob::reconciler::first_sight::{create_for, Sight};
    // One pod per job, each of its own name.
    let master = |job: &str| {
        let mut p = bare_pod(job, "pytorch", PYTORCH, "master", 0, running());
        p.metadata.name = Some(format!("{job}-master-0"));
        p.metadata.uid = Some(format!("uid-{job}-master-0"));
        p
    };
    let (ctx, handle) = context(
        World {
            pods: vec![master("mnist"), master("refused"), master("other")],
            ..World::default()
        },
        vec![],
    );
    let mut writer = Writer::default();
    let store = writer.as_reader();
    let mut other = dljob("pytorch", PYTORCH);
    other.metadata.name = Some("other".into());
    writer.apply_watcher_event(&watcher::Event::Apply(other));
    let post = format!("/apis/dljob.dev/v1alpha1/namespaces/{NS}/dljobs?&fieldManager=dljob");
    let invalid = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
        "message": "DLJob.dljob.dev \"refused\" is invalid: spec.port: Invalid value", "reason": "Invalid", "code": 422});
    let verifier = tokio::spawn(verify(
        handle,
        vec![
            call(
                "POST",
                post.clone(),
                |b| assert_eq!(b["metadata"]["name"], "mnist"),
                Value::Null,
            ),
            call(
                "POST",
                post,
                |b| assert_eq!(b["metadata"]["name"], "refused"),
                invalid,
            ),
        ],
    ));
    let job = |n: &str| (NS.to_owned(), n.to_owned());
    let sights = tokio::time::timeout(
        Duration::from_secs(5),
        create_for(
            &ctx.client,
            &ctx.index,
            &store,
            &ctx.stores.unreadable,
            &[
                job("mnist"),
                job("no-members"),
                job("other"),
                job("refused"),
            ],
        ),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        sights,
        [
            Sight::Created,
            Sight::Nothing,
            Sight::Nothing,
            Sight::Refused(
                "DLJob.dljob.dev \"refused\" is invalid: spec.port: Invalid value".into()
            ),
        ]
    );
    drop(ctx);
    tokio::time::timeout(Duration::from_secs(5), verifier)
        .await
        .unwrap()
        .unwrap();
}

// ---- TensorBoard ------------------------------------------------------------

const LOGS: &str = "logs:runs/mnist";

/// The shared volume the members write their logs to.
fn nfs_logs() -> Value {
    json!({"name": "logs", "nfs": {"server": "nfs.example.internal", "path": "/exports/ml"}})
}

/// `pod` with `dljob.dev/tensorboard` and the nfs volume, mounted by its
/// framework container.
fn with_tensorboard(mut pod: Pod) -> Pod {
    pod.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("dljob.dev/tensorboard".into(), LOGS.into());
    let spec = pod.spec.as_mut().unwrap();
    spec.volumes = Some(vec![serde_json::from_value(nfs_logs()).unwrap()]);
    spec.containers[0].volume_mounts = Some(vec![serde_json::from_value(
        json!({"name": "logs", "mountPath": "/logs"}),
    )
    .unwrap()]);
    pod
}

/// The DLJob the reconciler made from such a member.
fn tensorboard_dljob() -> DLJob {
    let mut j = dljob("pytorch", PYTORCH);
    j.spec.tensorboard = Some(dljob::contract::TensorBoard::parse(LOGS).unwrap());
    j.metadata.annotations = Some(
        [(
            "dljob.dev/tensorboard-volume".to_owned(),
            nfs_logs().to_string(),
        )]
        .into(),
    );
    j
}

fn tensorboard_world(state: fn() -> Value) -> World {
    World {
        pods: vec![
            with_tensorboard(bare_pod("mnist", "pytorch", PYTORCH, "master", 0, state())),
            with_tensorboard(bare_pod("mnist", "pytorch", PYTORCH, "worker", 0, state())),
        ],
        services: vec![served(23456)],
        ..World::default()
    }
}

/// The TensorBoard Deployment as the cluster holds it once created: what
/// dljob declared, with `replicas` pods, plus what the API server fills in
/// (a uid, defaults).
fn tensorboard_deployment_served(replicas: i32) -> Value {
    let (declared, _) = dljob::tensorboard::objects(
        &tensorboard_dljob(),
        &dljob::config::TensorBoardConfig::default(),
        now(),
    )
    .unwrap();
    let mut d = serde_json::to_value(declared).unwrap();
    d["metadata"]["uid"] = json!("uid-tb");
    d["metadata"]["generation"] = json!(1);
    d["spec"]["replicas"] = json!(replicas);
    d["spec"]["revisionHistoryLimit"] = json!(10);
    d["spec"]["progressDeadlineSeconds"] = json!(600);
    let c = &mut d["spec"]["template"]["spec"]["containers"][0];
    c["imagePullPolicy"] = json!("IfNotPresent");
    c["terminationMessagePath"] = json!("/dev/termination-log");
    d
}

/// The read of the TensorBoard Deployment (no reflector watches
/// Deployments), answered with `answer`.
fn read_tensorboard_deployment(answer: Value) -> Call {
    call(
        "GET",
        format!("/apis/apps/v1/namespaces/{NS}/deployments/mnist-tensorboard"),
        |_| {},
        answer,
    )
}

/// The TensorBoard Deployment created: owned by the DLJob, labelled so that
/// neither the webhook nor the job's Service take its pod for a member, one
/// pod mounting the job's volume read-only.
fn create_tensorboard_deployment() -> Call {
    call(
        "POST",
        format!("/apis/apps/v1/namespaces/{NS}/deployments?&fieldManager=dljob"),
        tensorboard_deployment_body(None, None),
        Value::Null,
    )
}

/// A check of a TensorBoard Deployment body with `replicas` pods (None: not
/// declared, the Deployment's own) and the uid of the object it is applied
/// to, for an apply.
fn tensorboard_deployment_body(
    replicas: Option<i32>,
    uid: Option<&'static str>,
) -> impl Fn(&Value) + Send {
    move |b: &Value| {
        assert_eq!(
            (&b["apiVersion"], &b["kind"]),
            (&json!("apps/v1"), &json!("Deployment"))
        );
        let mut meta = json!({
            "name": "mnist-tensorboard", "namespace": NS,
            "labels": {"dljob.dev/job": "mnist", "dljob.dev/tensorboard-of": "mnist"},
            "ownerReferences": [{"apiVersion": "dljob.dev/v1alpha1", "kind": "DLJob",
                "name": "mnist", "uid": "job-uid", "controller": true}]
        });
        if let Some(uid) = uid {
            meta["uid"] = json!(uid);
        }
        assert_eq!(b["metadata"], meta);
        let spec = &b["spec"];
        assert_eq!(spec.get("replicas"), replicas.map(|r| json!(r)).as_ref());
        assert_eq!(
            spec["selector"],
            json!({"matchLabels": {"dljob.dev/tensorboard-of": "mnist"}})
        );
        let pod = &spec["template"];
        assert_eq!(
            pod["metadata"],
            json!({"labels": {"dljob.dev/tensorboard-of": "mnist"}})
        );
        let container = &pod["spec"]["containers"][0];
        assert_eq!(container["image"], "tensorflow/tensorflow:2.20.0");
        assert_eq!(
            container["args"],
            json!(["--logdir=/logs/runs/mnist", "--bind_all", "--port=6006"])
        );
        assert_eq!(
            container["volumeMounts"][0],
            json!({"name": "logs", "mountPath": "/logs", "readOnly": true})
        );
        assert_eq!(
            pod["spec"]["volumes"][0],
            json!({"name": "logs", "nfs": {"server": "nfs.example.internal", "path": "/exports/ml"}})
        );
        assert_eq!(pod["spec"]["securityContext"]["runAsNonRoot"], true);
        assert_eq!(
            container["securityContext"]["capabilities"],
            json!({"drop": ["ALL"]})
        );
    }
}

/// The TensorBoard Service created (not in the cache of labelled Services).
fn tensorboard_service() -> Call {
    call(
        "POST",
        services_uri(),
        |b| {
            assert_eq!(
                (&b["apiVersion"], &b["kind"]),
                (&json!("v1"), &json!("Service"))
            );
            assert_eq!(b["metadata"]["name"], "mnist-tensorboard");
            assert_eq!(b["metadata"]["ownerReferences"][0]["uid"], "job-uid");
            assert_eq!(
                b["spec"],
                json!({
                    "type": "ClusterIP",
                    "selector": {"dljob.dev/tensorboard-of": "mnist"},
                    "ports": [{"name": "tensorboard", "port": 6006, "targetPort": "tensorboard", "protocol": "TCP"}]
                })
            );
        },
        Value::Null,
    )
}

#[tokio::test]
async fn first_sight_of_a_member_records_its_tensorboard_volume_on_the_dljob() {
    // A StatefulSet member: its trimmed template still holds the volume.
    let mut sts = statefulset("mnist", "pytorch", "worker=2", "worker", 2);
    sts.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("dljob.dev/tensorboard".into(), LOGS.into());
    let template = sts.spec.template.spec.as_mut().unwrap();
    template.volumes = Some(vec![
        serde_json::from_value(json!({"name": "cache", "emptyDir": {}})).unwrap(),
        serde_json::from_value(nfs_logs()).unwrap(),
    ]);
    let (ctx, handle) = context(
        World {
            statefulsets: vec![sts],
            ..World::default()
        },
        vec![],
    );
    let verifier = tokio::spawn(verify(
        handle,
        vec![call(
            "POST",
            format!("/apis/dljob.dev/v1alpha1/namespaces/{NS}/dljobs?&fieldManager=dljob"),
            |b| {
                assert_eq!(b["spec"]["tensorboard"], LOGS);
                assert_eq!(
                    b["metadata"]["annotations"],
                    json!({"dljob.dev/tensorboard-volume": r#"{"name":"logs","nfs":{"path":"/exports/ml","server":"nfs.example.internal"}}"#})
                );
            },
            Value::Null,
        )],
    ));
    let created = create_missing_within_5s(&ctx).await;
    assert_eq!(created, 1);
    drop(ctx);
    tokio::time::timeout(Duration::from_secs(5), verifier)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn a_job_with_tensorboard_gets_its_deployment_and_service() {
    let job = tensorboard_dljob();
    let (ctx, handle) = context(tensorboard_world(running), vec![job.clone()]);
    let jj = job.clone();
    reconcile_expecting(
        job,
        ctx,
        handle,
        vec![
            // The headless Service is there as declared: no call.
            read_tensorboard_deployment(not_found(
                "deployments.apps \"mnist-tensorboard\" not found",
            )),
            create_tensorboard_deployment(),
            tensorboard_service(),
            call(
                "PATCH",
                status_uri(),
                |b| assert_eq!(b["status"]["phase"], "Running"),
                with_status(&jj, &json!({"status": {"phase": "Running"}})),
            ),
            event("Running"),
        ],
    )
    .await;
}

/// The TensorBoard Service as the cluster holds it (in the cache of
/// labelled Services).
fn tensorboard_service_served() -> Service {
    let mut tb: Service = served(6006);
    tb.metadata.name = Some("mnist-tensorboard".into());
    tb.metadata.labels = Some(
        [
            ("dljob.dev/job".to_owned(), "mnist".to_owned()),
            ("dljob.dev/tensorboard-of".to_owned(), "mnist".to_owned()),
        ]
        .into(),
    );
    tb.spec.as_mut().unwrap().selector =
        Some([("dljob.dev/tensorboard-of".to_owned(), "mnist".to_owned())].into());
    tb.spec.as_mut().unwrap().cluster_ip = Some("10.96.0.7".into());
    tb.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
    tb.spec.as_mut().unwrap().ports = Some(vec![serde_json::from_value(json!(
        {"name": "tensorboard", "port": 6006, "targetPort": "tensorboard", "protocol": "TCP"}
    ))
    .unwrap()]);
    tb
}

#[tokio::test]
async fn a_finished_job_stops_its_tensorboard_and_keeps_its_service() {
    let mut job = tensorboard_dljob();
    let (ctx, _) = context(tensorboard_world(|| terminated(0, "Completed")), vec![]);
    let plan = controller::plan_of(&job).unwrap();
    let observed = controller::observe_members(&ctx, NS, "mnist", "job-uid");
    let earlier = Timestamp::from_second(1_699_999_000).unwrap();
    job.status = Some(status::next(&plan, &observed, None, Some(1), earlier).status);
    assert_eq!(
        job.status.as_ref().unwrap().phase,
        dljob::crd::Phase::Succeeded
    );
    // The world a reconcile of the finished run left: its pods marked, the
    // TensorBoard Service there.
    let finished_world = || {
        let mut world = tensorboard_world(|| terminated(0, "Completed"));
        for p in &mut world.pods {
            p.metadata
                .annotations
                .as_mut()
                .unwrap()
                .insert("dljob.dev/finished-run".into(), "job-uid".into());
        }
        world.services.push(tensorboard_service_served());
        world
    };
    // Finished as the status says (clean-pod policy Running): the
    // Deployment, read with one pod, is applied with none, to the object
    // read; nothing else changes.
    let (ctx, handle) = context(finished_world(), vec![]);
    reconcile_expecting(
        job.clone(),
        ctx,
        handle,
        vec![
            read_tensorboard_deployment(tensorboard_deployment_served(1)),
            call(
                "PATCH",
                format!("/apis/apps/v1/namespaces/{NS}/deployments/mnist-tensorboard?&force=true&fieldManager=dljob"),
                tensorboard_deployment_body(Some(0), Some("uid-tb")),
                Value::Null,
            ),
        ],
    )
    .await;
    // With the policy None, TensorBoard runs on: read, as declared, not
    // written — at the size someone scaled it to.
    job.spec.policies.clean_pod = dljob::contract::CleanPodPolicy::None;
    let (ctx, handle) = context(finished_world(), vec![]);
    reconcile_expecting(
        job,
        ctx,
        handle,
        vec![read_tensorboard_deployment(tensorboard_deployment_served(
            3,
        ))],
    )
    .await;
}

#[tokio::test]
async fn a_running_job_leaves_its_tensorboard_at_the_size_it_was_scaled_to() {
    // `kubectl scale deployment mnist-tensorboard --replicas 2`, or to 0 to
    // pause it: read, nothing written (the status is already as it was).
    for scaled in [2, 0] {
        let mut job = tensorboard_dljob();
        let world = || {
            let mut world = tensorboard_world(running);
            world.services.push(tensorboard_service_served());
            world
        };
        let (ctx, _) = context(world(), vec![]);
        let plan = controller::plan_of(&job).unwrap();
        let observed = controller::observe_members(&ctx, NS, "mnist", "job-uid");
        job.status = Some(status::next(&plan, &observed, None, Some(1), now()).status);
        let (ctx, handle) = context(world(), vec![]);
        reconcile_expecting(
            job,
            ctx,
            handle,
            vec![read_tensorboard_deployment(tensorboard_deployment_served(
                scaled,
            ))],
        )
        .await;
    }
}

// ---- the index and the observations (no API at all) -----------------------

/// The webhook's peer checks read the index's per-job tallies instead of
/// every member: what they choose must be what the linear rule
/// (`validate::relevant`) chooses from all the live members, as members
/// come, finish, change and go — for a new pod at a taken or free index, a
/// member itself, a pod of a set and a set covering the role.
#[test]
fn the_index_tallies_choose_the_peers_the_linear_rule_chooses() {
    use dljob::object::Kind;
    fn json(object: impl serde::Serialize) -> Value {
        serde_json::to_value(object).unwrap()
    }
    let index = MemberIndex::default();
    let config = Config::default();
    let topology = "master=1,worker=8";
    let apply = |p: Pod| index.apply_event(&watcher::Event::Apply(p), &config);
    // A bare pod of the job: `role-index`, or `name` when given.
    let pod = |role: &str, i: u32, state: Value, name: Option<&str>| {
        let mut p = bare_pod("mnist", "pytorch", topology, role, i, state);
        if let Some(name) = name {
            p.metadata.name = Some(name.into());
        }
        p
    };
    let worker = |i: u32| pod("worker", i, running(), None);
    let set = || statefulset("mnist", "pytorch", topology, "worker", 8);
    let set_pod = || {
        owned_pod(
            "StatefulSet",
            "worker",
            "pytorch",
            topology,
            "worker",
            2,
            running(),
        )
    };
    let probes: Vec<(Kind, Value)> = vec![
        // New pods at index 3 and 7, the master itself, a set's pod and
        // the set.
        (Kind::Pod, json(pod("worker", 3, running(), Some("new-3")))),
        (Kind::Pod, json(pod("worker", 7, running(), Some("new-7")))),
        (Kind::Pod, json(pod("master", 0, running(), None))),
        (Kind::Pod, json(set_pod())),
        (Kind::StatefulSet, json(set())),
    ];
    let names = |peers: Vec<&dljob::member::MemberSpec>| {
        peers
            .iter()
            .map(|p| format!("{:?}/{}", p.kind, p.name))
            .collect::<Vec<_>>()
    };
    // What each probe's checks are given, asserted equal to the linear
    // rule's choice.
    let check = |step: &str| {
        let all = index.peers(NS, "mnist");
        let mut chosen = Vec::new();
        for (kind, object) in &probes {
            let m = dljob::member::parse(*kind, object, Some(NS), &config)
                .unwrap()
                .unwrap()
                .member;
            let linear = names(dljob::validate::relevant(&m, all.iter()));
            let tallied = index.relevant_peers(&m);
            assert_eq!(
                names(tallied.iter().collect()),
                linear,
                "{step}: {:?} {}",
                m.kind,
                m.name
            );
            chosen.push(linear);
        }
        chosen
    };
    let none: Vec<Vec<String>> = vec![Vec::new(); probes.len()];
    assert_eq!(check("empty"), none);
    apply(pod("master", 0, running(), None));
    for i in 0..6 {
        apply(worker(i));
    }
    assert_eq!(check("one master, six workers")[0], ["Pod/worker-3"]);
    // A second pod at index 3, a finished one at 7 (not live), a set over
    // the role, one of its pods.
    apply(pod("worker", 3, running(), Some("dup-3")));
    apply(pod("worker", 7, terminated(1, "Error"), None));
    index.apply_event(&watcher::Event::Apply(set()), &config);
    apply(set_pod());
    let chosen = check("duplicates, a finished pod and a set");
    assert_eq!(
        chosen[0],
        ["Pod/dup-3", "Pod/worker-3", "StatefulSet/worker"],
        "a new pod at 3 meets both pods there and the set covering the role"
    );
    assert_eq!(
        chosen[1],
        ["StatefulSet/worker"],
        "the finished worker-7 is no peer"
    );
    assert_eq!(
        chosen[4],
        ["Pod/dup-3", "Pod/worker-0", "Pod/worker-1", "Pod/worker-3", "Pod/worker-4", "Pod/worker-5"],
        "the set meets every bare pod of its role; not its own pod worker-2 (which took the bare pod's name)"
    );
    // A member with another spec: every member with it is named once.
    let mut other_port = pod("worker", 5, running(), Some("port-5"));
    other_port
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("dljob.dev/port".into(), "2300".into());
    apply(other_port.clone());
    let chosen = check("another port");
    assert_eq!(chosen[1], ["Pod/port-5", "StatefulSet/worker"]);
    // It goes, and worker-3 finishes: back to the tallies.
    index.apply_event(&watcher::Event::Delete(other_port), &config);
    apply(pod("worker", 3, terminated(0, "Completed"), None));
    check("the other port gone, worker-3 finished");
    // A relist without the set and its pod.
    index.apply_event::<StatefulSet>(&watcher::Event::Init, &config);
    index.apply_event::<StatefulSet>(&watcher::Event::InitDone, &config);
    index.apply_event::<Pod>(&watcher::Event::Init, &config);
    for i in [0, 1, 4] {
        index.apply_event(&watcher::Event::InitApply(worker(i)), &config);
    }
    index.apply_event::<Pod>(&watcher::Event::InitDone, &config);
    check("relisted");
    for i in [0, 1, 4] {
        index.apply_event(&watcher::Event::Delete(worker(i)), &config);
    }
    assert_eq!(check("all gone"), none);
    assert!(index.peers(NS, "mnist").is_empty());
}

#[test]
fn peers_are_the_live_members_of_the_job() {
    let index = MemberIndex::default();
    let config = Config::default();
    let mut live = bare_pod("mnist", "pytorch", PYTORCH, "master", 0, running());
    trim::trim_pod(&mut live);
    let finished = bare_pod(
        "mnist",
        "pytorch",
        PYTORCH,
        "worker",
        0,
        terminated(0, "Completed"),
    );
    let mut other = bare_pod("other", "pytorch", PYTORCH, "worker", 0, running());
    other.metadata.name = Some("other-worker-0".into());
    for p in [live, finished, other] {
        index.apply_event(&watcher::Event::Apply(p), &config);
    }
    let peers = index.peers(NS, "mnist");
    assert_eq!(
        peers.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(),
        ["master-0"]
    );
    assert_eq!(index.members(NS, "mnist", None).len(), 2);
    // A relist that no longer has the master forgets it.
    index.apply_event::<Pod>(&watcher::Event::Init, &config);
    index.apply_event::<Pod>(&watcher::Event::InitDone, &config);
    assert!(index.peers(NS, "mnist").is_empty());
    assert!(index.members(NS, "other", None).is_empty());
}

#[test]
fn only_the_framework_container_counts() {
    let mut pod = bare_pod("mnist", "pytorch", PYTORCH, "worker", 0, running());
    pod.spec.as_mut().unwrap().containers.insert(
        0,
        serde_json::from_value(json!({"name": "log-shipper"})).unwrap(),
    );
    pod.status.as_mut().unwrap().container_statuses.as_mut().unwrap().insert(
        0,
        serde_json::from_value(json!({
            "name": "log-shipper", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 1, "reason": "Error"}}
        }))
        .unwrap(),
    );
    let (_, entry) = index::entry_of(&pod, &Config::default()).unwrap();
    assert_eq!(entry.framework_container.as_deref(), Some("pytorch"));
    let observed =
        observe::observe_pod(&entry.member, entry.framework_container.as_deref(), &pod).unwrap();
    assert_eq!(observed.container.unwrap().state, ContainerState::Running);
}

#[test]
fn trimmed_objects_keep_only_what_the_reconciler_reads() {
    let mut pod = owned_pod(
        "StatefulSet",
        "worker",
        "pytorch",
        "master=1,worker=2",
        "worker",
        1,
        running(),
    );
    pod.metadata.managed_fields = Some(vec![Default::default()]);
    pod.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("dljob.dev/hostfile".into(), "a slots=1\n".repeat(1000));
    trim::trim_pod(&mut pod);
    let v = serde_json::to_value(&pod).unwrap();
    assert_eq!(v["metadata"].get("managedFields"), None);
    assert_eq!(v["metadata"]["annotations"].get("dljob.dev/hostfile"), None);
    assert_eq!(
        v["spec"],
        json!({"containers": [{"name": "pytorch"}], "restartPolicy": "Always"})
    );
    assert_eq!(
        v["status"]["containerStatuses"][0],
        json!({"name": "pytorch", "image": "", "imageID": "", "ready": true, "restartCount": 0, "state": running()})
    );
    // Still a member with its ordinal.
    let (_, entry) = index::entry_of(&pod, &Config::default()).unwrap();
    assert_eq!(entry.member.index, Some(1));
}

// ---- recovery after an API server outage ------------------------------------

/// The API server's answer while it is down: HTTP 500 and refused
/// connections, alternately.
fn fail(n: usize, send: mock::SendResponse<Response<Body>>) {
    if n % 2 == 0 {
        send.send_error(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "connection refused",
        ));
    } else {
        let status = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
            "message": "etcdserver: leader changed", "reason": "InternalError", "code": 500});
        send.send_response(
            Response::builder()
                .status(500)
                .body(Body::from(serde_json::to_vec(&status).unwrap()))
                .unwrap(),
        );
    }
}

/// Runs the leader's controller (its real wiring: the DLJob watch and the
/// change set the member watches feed), watching `scope`, against an API
/// server that fails every request for `down_for`, then serves one DLJob
/// (in `ml`) and no members. Returns the first write the reconcile makes,
/// how long after the last failed request it came, and the paths of the
/// lists and watches made until then.
async fn first_write_after_an_outage(
    down_for: Duration,
    scope: dljob::reconciler::scope::Scope,
) -> (String, Duration, Vec<String>) {
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let index = Arc::new(MemberIndex::default());
    let stores = Stores {
        statefulsets: Writer::default().as_reader(),
        jobs: Writer::default().as_reader(),
        services: Writer::default().as_reader(),
        changed: Default::default(),
        unreadable: Default::default(),
    };
    let (_tx, config) = tokio::sync::watch::channel(Config::default());
    let metrics = Arc::new(Metrics::default());
    let job = dljob("pytorch", PYTORCH);
    let start = tokio::time::Instant::now();
    let server = async move {
        let mut failed = 0;
        let mut last_failure = start;
        let mut watches = Vec::new();
        let mut reads = Vec::new();
        loop {
            let (request, send) = handle.next_request().await.expect("the client is gone");
            let uri = request.uri().to_string();
            reads.push(request.uri().path().to_owned());
            if start.elapsed() < down_for {
                failed += 1;
                last_failure = tokio::time::Instant::now();
                fail(failed, send);
                continue;
            }
            if request.method() != http::Method::GET {
                let path = reads.pop().unwrap();
                return (
                    format!("{} {path}", request.method()),
                    last_failure.elapsed(),
                    reads,
                );
            }
            if uri.contains("watch=true") {
                watches.push(send); // open, no events
                continue;
            }
            let items =
                if uri.starts_with("/apis/dljob.dev/") && !uri.contains("/namespaces/other/") {
                    vec![serde_json::to_value(&job).unwrap()]
                } else {
                    vec![]
                };
            let list = json!({"apiVersion": "v1", "kind": "List",
                "metadata": {"resourceVersion": "7"}, "items": items});
            send.send_response(
                Response::builder()
                    .body(Body::from(serde_json::to_vec(&list).unwrap()))
                    .unwrap(),
            );
        }
    };
    let run = dljob::reconciler::run_controller(
        &client,
        &index,
        &stores,
        &metrics,
        &config,
        &scope,
        futures::future::pending(),
    );
    let outcome = tokio::time::timeout(Duration::from_secs(3600), async {
        tokio::select! {
            r = server => r,
            _ = run => panic!("the controller stopped"),
        }
    })
    .await
    .expect("no write within an hour of the outage");
    outcome
}

#[tokio::test(start_paused = true)]
async fn a_reconcile_follows_within_seconds_after_the_api_server_is_back() {
    for down_for in [Duration::from_secs(120), Duration::from_secs(5)] {
        let (write, after, _) =
            first_write_after_an_outage(down_for, dljob::reconciler::scope::Scope::Cluster).await;
        // The reconcile's first write: the job's headless Service, created.
        assert_eq!(write, format!("POST /api/v1/namespaces/{NS}/services"));
        // Each watch retries at most WATCH_BACKOFF_MAX after its last
        // failure; the controller's debounce adds one second.
        assert!(
            after <= dljob::reconciler::WATCH_BACKOFF_MAX + Duration::from_secs(1),
            "after a {down_for:?} outage the first reconcile came {after:?} after the last failed request"
        );
    }
}

/// With `namespaces:` in its config the reconciler lists and watches only
/// there (a Role in each is all it needs), and reconciles as ever.
#[tokio::test(start_paused = true)]
async fn a_namespaced_reconciler_reads_only_its_namespaces() {
    let scope = dljob::reconciler::scope::Scope::Namespaces(vec!["ml".into(), "other".into()]);
    let (write, _, reads) = first_write_after_an_outage(Duration::ZERO, scope).await;
    assert_eq!(write, format!("POST /api/v1/namespaces/{NS}/services"));
    assert!(!reads.is_empty());
    for path in &reads {
        assert!(
            path.contains("/namespaces/ml/") || path.contains("/namespaces/other/"),
            "read outside the namespaces: {path}"
        );
    }
    // Both namespaces' DLJobs are watched.
    for ns in ["ml", "other"] {
        let dljobs = format!("/apis/dljob.dev/v1alpha1/namespaces/{ns}/dljobs");
        assert!(reads.contains(&dljobs), "{reads:?}");
    }
}

/// `reconciler::start` reports its member caches synced (the webhook's
/// `/readyz` waits for it) once pods, StatefulSets and Jobs have all listed,
/// not before.
#[tokio::test]
async fn the_member_caches_are_synced_once_pods_statefulsets_and_jobs_listed() {
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let (_tx, config) = tokio::sync::watch::channel(Config::default());
    let mut registry = prometheus_client::registry::Registry::default();
    let (peers, task) = dljob::reconciler::start(client, &mut registry, config)
        .await
        .unwrap();
    let list = |kind: &str| {
        let body = json!({"apiVersion": "v1", "kind": kind, "metadata": {"resourceVersion": "1"}, "items": []});
        Response::builder()
            .body(Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap()
    };
    let mut held = Vec::new(); // watches and the Lease: open, never answered
    let mut pods_list = None;
    tokio::time::timeout(Duration::from_secs(10), async {
        let (mut statefulsets, mut jobs) = (false, false);
        while !(statefulsets && jobs && pods_list.is_some()) {
            let (request, send) = handle.next_request().await.expect("the client is gone");
            let uri = request.uri().to_string();
            let path = request.uri().path().to_owned();
            if uri.contains("watch=true") || path.contains("leases") {
                held.push(send);
            } else if path == "/api/v1/pods" {
                pods_list = Some(send); // answered below
            } else if path.ends_with("/services") {
                send.send_response(list("List"));
            } else if path.ends_with("/statefulsets") {
                statefulsets = true;
                send.send_response(list("List"));
            } else if path.ends_with("/jobs") {
                jobs = true;
                send.send_response(list("List"));
            } else {
                panic!("unexpected call {} {uri}", request.method());
            }
        }
    })
    .await
    .expect("every member kind is listed");
    // StatefulSets and Jobs listed, pods not yet: not synced.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!peers.synced(), "synced before the pods were listed");
    pods_list.take().unwrap().send_response(list("PodList"));
    tokio::time::timeout(Duration::from_secs(10), async {
        while !peers.synced() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("synced once every member kind listed");
    task.task.abort();
    drop(held);
}

// ---- whose objects are whose (trust on a shared cluster) ---------------------

/// A headless Service `victim` someone else made (labels and selector
/// `app: prod`, no owner), and then a pod labelled `dljob.dev/job: victim`.
fn victim_service() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "mnist", "namespace": NS, "uid": "uid-prod-svc",
            "labels": {"app": "prod"}, "resourceVersion": "41",
            "managedFields": [{"manager": "kubectl-client-side-apply", "operation": "Update"}]},
        "spec": {"clusterIP": "None", "selector": {"app": "prod"},
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}
    })
}

fn already_exists(what: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
        "message": format!("{what} already exists"), "reason": "AlreadyExists", "code": 409})
}

fn running_pytorch() -> World {
    World {
        pods: vec![
            bare_pod("mnist", "pytorch", PYTORCH, "master", 0, running()),
            bare_pod("mnist", "pytorch", PYTORCH, "worker", 0, running()),
        ],
        ..World::default()
    }
}

/// The OwnershipConflict condition of a written status.
fn ownership_condition(status: &Value) -> Value {
    status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "OwnershipConflict")
        .cloned()
        .unwrap_or(Value::Null)
}

/// The Service is not in the cache of labelled Services: dljob creates,
/// gets AlreadyExists, reads whose it is, and — it is not this DLJob's —
/// writes nothing to it: no apply, no force, no owner reference; the DLJob
/// says so (condition and one Warning Event naming the object, who
/// controls it and the fix).
#[tokio::test]
async fn someone_elses_service_of_the_jobs_name_is_left_alone_and_reported() {
    let job = dljob("pytorch", PYTORCH);
    let (ctx, handle) = context(running_pytorch(), vec![job.clone()]);
    let jj = job.clone();
    let message = "Service/mnist exists and is controlled by no controller; dljob leaves it alone: rename the job (dljob.dev/job) or that Service";
    reconcile_expecting(
        job,
        ctx,
        handle,
        vec![
            call(
                "POST",
                services_uri(),
                |_| {},
                already_exists("services \"mnist\""),
            ),
            call(
                "GET",
                format!("/api/v1/namespaces/{NS}/services/mnist"),
                |b| assert!(b.is_null()),
                victim_service(),
            ),
            call(
                "PATCH",
                status_uri(),
                move |b| {
                    let c = ownership_condition(&b["status"]);
                    assert_eq!(
                        (&c["status"], &c["reason"], &c["message"]),
                        (
                            &json!("True"),
                            &json!("NotControlledByThisJob"),
                            &json!(message)
                        )
                    );
                    // The job's own status goes on.
                    assert_eq!(b["status"]["phase"], "Running");
                },
                with_status(&jj, &json!({"status": {"phase": "Running"}})),
            ),
            event("Running"),
            call(
                "POST",
                events_uri(),
                move |b| {
                    assert_eq!(b["type"], "Warning");
                    assert_eq!(b["reason"], "OwnershipConflict");
                    assert_eq!(b["note"], message);
                },
                Value::Null,
            ),
        ],
    )
    .await;
}

/// The same Service labelled `dljob.dev/job: mnist` by its owner (so in
/// the cache): still not this DLJob's — no call to it at all; the
/// condition, already set, is kept without a second Event.
#[tokio::test]
async fn a_foreign_service_carrying_the_job_label_is_not_taken_either() {
    let mut foreign: Service = serde_json::from_value(victim_service()).unwrap();
    foreign
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("dljob.dev/job".into(), "mnist".into());
    foreign.metadata.owner_references = Some(vec![serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "name": "prod-api", "uid": "u9", "controller": true
    }))
    .unwrap()]);
    let mut job = dljob("pytorch", PYTORCH);
    let message = "Service/mnist exists and is controlled by Deployment \"prod-api\"; dljob leaves it alone: rename the job (dljob.dev/job) or that Service";
    let world = || World {
        services: vec![foreign.clone()],
        ..running_pytorch()
    };
    let (ctx, handle) = context(world(), vec![]);
    let jj = job.clone();
    let written = Arc::new(std::sync::Mutex::new(Value::Null));
    let keep = written.clone();
    reconcile_expecting(
        job.clone(),
        ctx,
        handle,
        vec![
            call(
                "PATCH",
                status_uri(),
                move |b| {
                    assert_eq!(ownership_condition(&b["status"])["message"], message);
                    *keep.lock().unwrap() = b["status"].clone();
                },
                with_status(&jj, &json!({"status": {"phase": "Running"}})),
            ),
            event("Running"),
            event("OwnershipConflict"),
        ],
    )
    .await;
    // The next reconcile, with that status: nothing to write, nothing said.
    job.status = Some(serde_json::from_value(written.lock().unwrap().clone()).unwrap());
    let (ctx, handle) = context(world(), vec![]);
    reconcile_expecting(job, ctx, handle, vec![]).await;
}

/// Objects dljob reads rather than watches (the TensorBoard Deployment, a
/// PodGroup) follow the same rule: one controlled by someone else is read,
/// not written.
#[tokio::test]
async fn someone_elses_deployment_of_the_tensorboards_name_is_read_not_written() {
    let job = tensorboard_dljob();
    let (ctx, handle) = context(tensorboard_world(running), vec![job.clone()]);
    let jj = job.clone();
    let mut theirs = tensorboard_deployment_served(3);
    theirs["metadata"]["ownerReferences"] = json!([]);
    theirs["metadata"]["labels"] = json!({"app": "dashboard"});
    reconcile_expecting(
        job,
        ctx,
        handle,
        vec![
            read_tensorboard_deployment(theirs),
            tensorboard_service(),
            call(
                "PATCH",
                status_uri(),
                |b| {
                    assert_eq!(
                        ownership_condition(&b["status"])["message"],
                        "Deployment/mnist-tensorboard exists and is controlled by no controller; dljob leaves it alone: rename the job (dljob.dev/job) or that Deployment"
                    );
                },
                with_status(&jj, &json!({"status": {"phase": "Running"}})),
            ),
            event("Running"),
            event("OwnershipConflict"),
        ],
    )
    .await;
}

/// The Service of an earlier DLJob of the same name (deleted, its Service
/// not yet collected) is not this one's either: reported as such; and one
/// of this DLJob's that is replaced between the read and the write (the
/// API server refuses the uid in the body) is left to the next reconcile.
#[tokio::test]
async fn an_earlier_runs_service_waits_for_the_collector_and_a_replaced_one_is_not_written() {
    let job = dljob("pytorch", PYTORCH);
    let mut earlier = served(23456);
    earlier.metadata.owner_references.as_mut().unwrap()[0].uid = "old-job-uid".into();
    let (ctx, handle) = context(
        World {
            services: vec![earlier],
            ..running_pytorch()
        },
        vec![],
    );
    let jj = job.clone();
    reconcile_expecting(
        job.clone(),
        ctx,
        handle,
        vec![
            call(
                "PATCH",
                status_uri(),
                |b| {
                    assert_eq!(
                        ownership_condition(&b["status"])["message"],
                        "Service/mnist exists and is controlled by an earlier DLJob \"mnist\" (uid old-job-uid), deleted: the garbage collector removes it shortly; dljob leaves it alone: rename the job (dljob.dev/job) or that Service"
                    );
                },
                with_status(&jj, &json!({"status": {"phase": "Running"}})),
            ),
            event("Running"),
            event("OwnershipConflict"),
        ],
    )
    .await;

    let mut drifted = served(23456);
    drifted.spec.as_mut().unwrap().selector = Some([("app".to_owned(), "x".to_owned())].into());
    let uid = drifted.metadata.uid.clone().unwrap();
    let (ctx, handle) = context(
        World {
            services: vec![drifted],
            ..running_pytorch()
        },
        vec![],
    );
    let immutable = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "reason": "Invalid", "code": 422,
        "message": format!("Service \"mnist\" is invalid: metadata.uid: Invalid value: \"{uid}\": field is immutable")});
    reconcile_expecting(
        job,
        ctx,
        handle,
        vec![call(
            "PATCH",
            format!("/api/v1/namespaces/{NS}/services/mnist?&force=true&fieldManager=dljob"),
            move |b| assert_eq!(b["metadata"]["uid"], json!(uid)),
            immutable,
        )],
    )
    .await;
}

// ---- a run's members -------------------------------------------------------

/// `pod` marked as left by the finished run of the DLJob `uid`.
fn left_by(mut pod: Pod, uid: &str) -> Pod {
    pod.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("dljob.dev/finished-run".into(), uid.into());
    pod
}

/// The job failed (its master OOM-killed, its worker exited 1) and kept its
/// pods (clean-pod-policy None): each was marked by that run's DLJob. The
/// DLJob is deleted and the job started again with new pod names: what the
/// old run left makes no DLJob, and counts for nothing in the new one.
#[tokio::test]
async fn a_rerun_under_the_same_name_starts_clean() {
    let mut old_master = bare_pod(
        "mnist",
        "pytorch",
        PYTORCH,
        "master",
        0,
        terminated(137, "OOMKilled"),
    );
    old_master.metadata.name = Some("master-old".into());
    old_master.metadata.uid = Some("uid-master-old".into());
    let mut old_worker = bare_pod("mnist", "pytorch", PYTORCH, "worker", 0, running());
    old_worker.metadata.name = Some("worker-old".into());
    old_worker.metadata.uid = Some("uid-worker-old".into());
    let leftovers = vec![
        left_by(old_master, "old-job-uid"),
        left_by(old_worker, "old-job-uid"),
    ];

    // Only leftovers (one still running): no DLJob is made for them.
    let (ctx, handle) = context(
        World {
            pods: leftovers.clone(),
            ..World::default()
        },
        vec![],
    );
    let verifier = tokio::spawn(verify(handle, vec![]));
    assert_eq!(create_missing_within_5s(&ctx).await, 0);
    drop(ctx);
    verifier.await.unwrap();

    // The new run: its own pods beside the leftovers. Its DLJob counts
    // only its own: Running, no restart used, the master its own.
    let mut pods = leftovers;
    pods.push(bare_pod(
        "mnist",
        "pytorch",
        PYTORCH,
        "master",
        0,
        running(),
    ));
    pods.push(bare_pod(
        "mnist",
        "pytorch",
        PYTORCH,
        "worker",
        0,
        running(),
    ));
    let job = dljob("pytorch", PYTORCH);
    let (ctx, handle) = context(
        World {
            pods,
            services: vec![served(23456)],
            ..World::default()
        },
        vec![],
    );
    let jj = job.clone();
    reconcile_expecting(
        job,
        ctx,
        handle,
        vec![
            call(
                "PATCH",
                status_uri(),
                |b| {
                    let s = &b["status"];
                    assert_eq!(s["phase"], "Running");
                    assert_eq!(s["restarts"], 0);
                    assert_eq!(s["active"], "2/2");
                    assert_eq!(s["countedExits"], json!({}));
                    assert_eq!(
                        s["coordinator"],
                        json!({"replica": "master-0", "pod": "master-0"})
                    );
                },
                with_status(&jj, &json!({"status": {"phase": "Running"}})),
            ),
            event("Running"),
        ],
    )
    .await;
}

/// A finished run under clean-pod-policy None marks what it leaves
/// running: a StatefulSet too (so that deleting the DLJob does not make a
/// new one for it), with the set's uid as a precondition.
#[tokio::test]
async fn a_finished_run_marks_the_statefulset_it_leaves_running() {
    const TF: &str = "chief=1,ps=1";
    let mut job = dljob("tensorflow", TF);
    job.spec.policies.clean_pod = dljob::contract::CleanPodPolicy::None;
    job.status = Some(dljob::crd::DLJobStatus {
        phase: dljob::crd::Phase::Running,
        ..Default::default()
    });
    let chief = left_by(
        bare_pod(
            "mnist",
            "tensorflow",
            TF,
            "chief",
            0,
            terminated(0, "Completed"),
        ),
        "job-uid",
    );
    let ps = left_by(
        owned_pod("StatefulSet", "ps", "tensorflow", TF, "ps", 0, running()),
        "job-uid",
    );
    let (ctx, handle) = context(
        World {
            pods: vec![chief, ps],
            statefulsets: vec![statefulset("mnist", "tensorflow", TF, "ps", 1)],
            services: vec![served(23456)],
            ..World::default()
        },
        vec![],
    );
    let jj = job.clone();
    reconcile_expecting(
        job,
        ctx,
        handle,
        vec![
            call(
                "PATCH",
                status_uri(),
                |b| assert_eq!(b["status"]["phase"], "Succeeded"),
                with_status(&jj, &json!({"status": {"phase": "Succeeded"}})),
            ),
            event("CoordinatorSucceeded"),
            call(
                "PATCH",
                format!("/apis/apps/v1/namespaces/{NS}/statefulsets/ps?&fieldManager=dljob"),
                |b| {
                    assert_eq!(
                        b,
                        &json!({"metadata": {"uid": "uid-sts-ps", "annotations": {"dljob.dev/finished-run": "job-uid"}}})
                    )
                },
                Value::Null,
            ),
        ],
    )
    .await;
}

/// A saved manifest as the API server lists it: a PodTemplate of `image`
/// whose controller is the DLJob of uid `owner_uid`.
fn saved_manifest(name: &str, uid: &str, owner_uid: &str, image: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "PodTemplate",
        "metadata": {"name": name, "namespace": NS, "uid": uid,
            "labels": {"dljob.dev/job": "mnist"},
            "annotations": {"dljob.dev/recreates": "worker-0"},
            "ownerReferences": [{"apiVersion": "dljob.dev/v1alpha1", "kind": "DLJob", "name": "mnist",
                "uid": owner_uid, "controller": true}]},
        "template": {
            "metadata": {"labels": {"dljob.dev/job": "mnist", "dljob.dev/role": "worker"},
                "annotations": {"dljob.dev/framework": "pytorch", "dljob.dev/replicas": PYTORCH, "dljob.dev/index": "0"}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "pytorch", "image": image}]}
        }
    })
}

/// The digest of a saved manifest's content, by its definition (SHA-256
/// of its `template` as k8s-openapi writes it), computed here apart from
/// dljob's code.
fn content_digest(template: &Value) -> String {
    use sha2::Digest as _;
    let t: k8s_openapi::api::core::v1::PodTemplate =
        serde_json::from_value(template.clone()).unwrap();
    let bytes = serde_json::to_vec(&t.template).unwrap();
    format!("sha256:{:x}", sha2::Sha256::digest(&bytes))
}

/// A job with worker-0 (a bare pod) pending its recreate from the saved
/// manifest `dljob-recreate-ab12c` (uid t-ours) of image "train", as
/// recorded when it was saved.
fn pending_recreate() -> DLJob {
    let mut job = dljob("pytorch", PYTORCH);
    job.status = Some(dljob::crd::DLJobStatus {
        phase: dljob::crd::Phase::Restarting,
        pending_recreates: vec![dljob::crd::PendingRecreate {
            name: "worker-0".into(),
            uid: "uid-worker-0".into(),
            saved: Some(dljob::crd::SavedPod {
                name: "dljob-recreate-ab12c".into(),
                uid: "t-ours".into(),
                digest: Some(content_digest(&saved_manifest(
                    "dljob-recreate-ab12c",
                    "t-ours",
                    "job-uid",
                    "train",
                ))),
            }),
        }],
        ..Default::default()
    });
    job
}

/// The World of [`pending_recreate`]: the master runs, worker-0 is gone.
fn master_only() -> World {
    World {
        pods: vec![bare_pod(
            "mnist",
            "pytorch",
            PYTORCH,
            "master",
            0,
            running(),
        )],
        services: vec![served(23456)],
        ..World::default()
    }
}

fn list_saved() -> String {
    format!("/api/v1/namespaces/{NS}/podtemplates?&labelSelector=dljob.dev%2Fjob%3Dmnist")
}

/// A pending recreate: the saved manifests are listed, and the pod is
/// created from the one the status names, by uid and content digest — not
/// from another with the labels, name and even an owner reference forged
/// to look like it (a planted one claiming this DLJob is cleaned away as
/// any unneeded one; one of another controller is not touched).
#[tokio::test]
async fn a_deleted_bare_pod_comes_back_from_its_saved_manifest() {
    let job = pending_recreate();
    let (ctx, handle) = context(master_only(), vec![]);
    let jj = job.clone();
    let recorded = job.status.as_ref().unwrap().pending_recreates[0]
        .saved
        .clone();
    let list = json!({"apiVersion": "v1", "kind": "PodTemplateList", "metadata": {"resourceVersion": "9"},
    "items": [
        saved_manifest("dljob-recreate-zz999", "t-planted", "job-uid", "evil"),
        saved_manifest("dljob-recreate-ab12c", "t-ours", "job-uid", "train"),
        saved_manifest("dljob-recreate-yy888", "t-other", "someone-else", "evil"),
    ]});
    reconcile_expecting(
        job,
        ctx,
        handle,
        vec![
            call("GET", list_saved(), |_| {}, list),
            call(
                "PATCH",
                status_uri(),
                move |b| {
                    assert_eq!(
                        b["status"]["pendingRecreates"],
                        json!([{"name": "worker-0", "uid": "uid-worker-0", "saved": recorded}])
                    )
                },
                with_status(&jj, &json!({"status": {"phase": "Restarting"}})),
            ),
            call(
                "POST",
                format!("/api/v1/namespaces/{NS}/pods?&fieldManager=dljob"),
                |b| {
                    assert_eq!(b["metadata"]["name"], "worker-0");
                    assert_eq!(b["metadata"]["labels"]["dljob.dev/role"], "worker");
                    assert_eq!(b["spec"]["containers"][0]["image"], "train");
                },
                Value::Null,
            ),
            call(
                "DELETE",
                format!("/api/v1/namespaces/{NS}/podtemplates/dljob-recreate-zz999?"),
                |b| assert_eq!(b["preconditions"], json!({"uid": "t-planted"})),
                saved_manifest("dljob-recreate-zz999", "t-planted", "job-uid", "evil"),
            ),
        ],
    )
    .await;
}

/// The saved manifest itself edited after it was saved (same PodTemplate,
/// same uid, another image — whoever may edit PodTemplates in the
/// namespace): no pod is created from it; the recreate is given up and
/// said, and the edited PodTemplate is deleted as one no longer needed.
#[tokio::test]
async fn an_edited_saved_manifest_is_not_recreated_from() {
    let job = pending_recreate();
    let (ctx, handle) = context(master_only(), vec![]);
    let jj = job.clone();
    let edited = saved_manifest("dljob-recreate-ab12c", "t-ours", "job-uid", "evil");
    let list = json!({"apiVersion": "v1", "kind": "PodTemplateList", "metadata": {"resourceVersion": "9"},
        "items": [edited.clone()]});
    reconcile_expecting(
        job,
        ctx,
        handle,
        vec![
            call("GET", list_saved(), |_| {}, list),
            call(
                "PATCH",
                status_uri(),
                |b| assert_eq!(b["status"]["pendingRecreates"], json!([]), "{b}"),
                with_status(&jj, &json!({"status": {"phase": "Restarting"}})),
            ),
            call(
                "POST",
                events_uri(),
                |b| {
                    assert_eq!(b["reason"], "RecreateLost");
                    assert_eq!(b["type"], "Warning");
                    assert!(
                        b["note"]
                            .as_str()
                            .unwrap()
                            .contains("bare pod(s) worker-0 cannot be recreated"),
                        "{b}"
                    );
                },
                Value::Null,
            ),
            call(
                "DELETE",
                format!("/api/v1/namespaces/{NS}/podtemplates/dljob-recreate-ab12c?"),
                |b| assert_eq!(b["preconditions"], json!({"uid": "t-ours"})),
                edited,
            ),
        ],
    )
    .await;
}

/// A webhook's refusal, as the API server relays it.
fn denied(message: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "reason": "BadRequest",
        "code": 400, "message": format!("admission webhook \"validate.example\" denied the request: {message}")})
}

/// One refused action does not keep the job from the others: a finished
/// job's StatefulSet that another webhook will not let be stopped still
/// lets the job's TTL delete its DLJob (with its uid as precondition); the
/// reconcile reports the failure, to be retried.
#[tokio::test]
async fn a_refused_action_does_not_stop_the_others() {
    let mut job = dljob("pytorch", "worker=1");
    job.spec.policies.ttl_seconds_after_finished = Some(0);
    let (ctx, _) = context(World::default(), vec![]);
    let plan = controller::plan_of(&job).unwrap();
    let done = status::Observed {
        pods: vec![],
        ..Default::default()
    };
    let mut finished = status::next(&plan, &done, None, Some(1), now()).status;
    finished.phase = dljob::crd::Phase::Succeeded;
    finished.completion_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
    job.status = Some(finished);
    drop(ctx);
    let (ctx, handle) = context(
        World {
            statefulsets: vec![statefulset("mnist", "pytorch", "worker=1", "worker", 1)],
            services: vec![served(23456)],
            ..World::default()
        },
        vec![],
    );
    let (result, metrics) = reconcile_with(
        job,
        ctx,
        handle,
        vec![
            call(
                "PATCH",
                format!("/apis/apps/v1/namespaces/{NS}/statefulsets/worker?&fieldManager=dljob"),
                |_| {},
                denied("no scaling during the freeze"),
            ),
            call(
                "DELETE",
                format!("/apis/dljob.dev/v1alpha1/namespaces/{NS}/dljobs/mnist?"),
                |b| {
                    assert_eq!(b["preconditions"], json!({"uid": "job-uid"}));
                    assert_eq!(b["propagationPolicy"], "Background");
                },
                serde_json::to_value(dljob("pytorch", "worker=1")).unwrap(),
            ),
        ],
    )
    .await;
    assert!(result.is_err(), "the refusal is reported");
    assert_eq!(metrics.reconciles.get(), 1);
}

/// A bare pod whose manifest cannot be saved (here the PodTemplate is
/// refused) is not deleted: without its manifest it could not come back.
#[tokio::test]
async fn a_bare_pod_is_not_deleted_unless_its_manifest_was_saved() {
    let mut job = dljob("pytorch", PYTORCH);
    let (ctx, handle) = worker_oom_killed(&mut job);
    let jj = job.clone();
    let (result, _) = reconcile_with(
        job,
        ctx,
        handle,
        vec![
            read_pod(oom_killed_worker()),
            call(
                "POST",
                format!("/api/v1/namespaces/{NS}/podtemplates?&fieldManager=dljob"),
                |_| {},
                denied("podtemplates are not allowed here"),
            ),
            // The restart is counted; no saved manifest is recorded.
            restarting_unsaved(&jj),
            event("Restarting"),
            // No DELETE of the pod follows.
        ],
    )
    .await;
    assert!(result.is_err());
}

/// The Events recorder on the wire: the first Event is created with what
/// `kubectl describe` reads; the same Event again PATCHes the first one's
/// series (count 2, then 3); an Event the API server no longer has starts
/// again as a new one; another note is a new Event, cut to the API
/// server's 1 KiB.
#[tokio::test]
async fn a_repeated_event_counts_in_the_first_ones_series() {
    use dljob::reconciler::status::JobEvent;
    use std::sync::Mutex;

    type Names = Arc<Mutex<Vec<String>>>;
    fn create(names: &Names, reason: &'static str, type_: &'static str) -> Call {
        let names = names.clone();
        call(
            "POST",
            events_uri(),
            move |b| {
                assert_eq!(b["reason"], reason);
                assert_eq!(b["type"], type_);
                assert_eq!(b["action"], "Reconcile");
                assert_eq!(b["reportingController"], "dljob");
                assert_eq!(b["reportingInstance"], "dljob-0");
                assert_eq!(b["regarding"]["uid"], "job-uid");
                assert_eq!(b["metadata"]["namespace"], NS);
                assert!(b["eventTime"].is_string(), "{b}");
                let note = b["note"].as_str().unwrap();
                assert!(
                    note.len() <= 1024,
                    "the API server refuses a longer note: {note}"
                );
                let name = b["metadata"]["name"].as_str().unwrap();
                assert!(name.starts_with("mnist."), "{name}");
                names.lock().unwrap().push(name.to_owned());
            },
            Value::Null,
        )
    }
    /// The PATCH of the series of the `nth` Event created.
    fn series(names: &Names, nth: usize, count: i64, respond: Value) -> Call {
        let name = names.lock().unwrap()[nth].clone();
        call(
            "PATCH",
            format!("/apis/events.k8s.io/v1/namespaces/{NS}/events/{name}?"),
            move |b| {
                assert_eq!(b["series"]["count"], count, "{b}");
                assert!(b["series"]["lastObservedTime"].is_string(), "{b}");
                assert_eq!(b.as_object().unwrap().len(), 1, "only the series: {b}");
            },
            respond,
        )
    }

    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let recorder = Recorder::new(Client::new(service, "default"), "dljob", "dljob-0");
    let regarding = mnist_reference();
    let running = JobEvent {
        warning: false,
        reason: "Running".into(),
        note: "all 2 members run".into(),
    };
    let blocked = JobEvent {
        warning: true,
        reason: "RecreateBlocked".into(),
        // As long as a list of lost pods can make it: cut, not refused.
        note: format!(
            "bare pods cannot be recreated: {}",
            "mnist-worker-0, ".repeat(100)
        ),
    };
    let names: Names = Arc::default();
    let verifier = tokio::spawn({
        let names = names.clone();
        async move {
            answer(&mut handle, vec![create(&names, "Running", "Normal")]).await;
            answer(&mut handle, vec![series(&names, 0, 2, Value::Null)]).await;
            answer(&mut handle, vec![series(&names, 0, 3, Value::Null)]).await;
            // Gone from the API server: a new Event, whose series goes on.
            let gone = not_found("events.events.k8s.io not found");
            answer(&mut handle, vec![series(&names, 0, 4, gone)]).await;
            answer(&mut handle, vec![create(&names, "Running", "Normal")]).await;
            answer(&mut handle, vec![series(&names, 1, 2, Value::Null)]).await;
            // Another note about the same job: news.
            answer(
                &mut handle,
                vec![create(&names, "RecreateBlocked", "Warning")],
            )
            .await;
            if let Some((request, _)) = handle.next_request().await {
                panic!("unexpected call {} {}", request.method(), request.uri());
            }
        }
    });
    for note in [&running, &running, &running, &running, &running, &blocked] {
        tokio::time::timeout(Duration::from_secs(5), recorder.publish(&regarding, note))
            .await
            .expect("publish timed out")
            .expect("publish failed");
    }
    drop(recorder);
    tokio::time::timeout(Duration::from_secs(5), verifier)
        .await
        .expect("verifier timed out")
        .expect("verifier panicked");
    assert_eq!(names.lock().unwrap().len(), 3);
}

/// A DLJob that does not parse is told why on itself: one Warning Event
/// `Unreadable` with the way out and the parser's reason; one the API
/// server refused stays to be told and is told the next time; once told,
/// not again.
#[tokio::test]
async fn a_dljob_that_does_not_parse_is_told_why_on_itself() {
    use dljob::reconciler::listed::Unreadable;
    use kube::runtime::reflector::ObjectRef;

    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let recorder = Recorder::new(Client::new(service, "default"), "dljob", "dljob-0");
    let why = "spec.replicas: role \"worker\" appears twice";
    let told = move |respond: Value| {
        call(
            "POST",
            events_uri(),
            move |b| {
                assert_eq!(b["type"], "Warning");
                assert_eq!(b["reason"], "Unreadable");
                assert_eq!(b["regarding"]["kind"], "DLJob");
                assert_eq!(b["regarding"]["name"], "mnist");
                assert_eq!(b["regarding"]["uid"], "job-uid");
                assert_eq!(
                    b["note"],
                    format!("this DLJob does not parse, so dljob sets it aside and goes on with the other jobs: put it right with kubectl edit, or delete it and dljob makes it again from the job's members. Why: {why}")
                );
            },
            respond,
        )
    };
    let refused = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
        "message": "etcdserver: request timed out", "reason": "InternalError", "code": 500});
    let verifier = tokio::spawn(verify(handle, vec![told(refused), told(Value::Null)]));
    let regarding = mnist_reference();
    let unreadable = Unreadable::default();
    assert!(unreadable.insert(ObjectRef::new("mnist").within(NS), regarding, why));
    let tell = || {
        tokio::time::timeout(
            Duration::from_secs(5),
            tell::tell_untold(&recorder, &unreadable),
        )
    };
    assert_eq!(
        tell().await.expect("told in time"),
        1,
        "refused: still to tell"
    );
    assert_eq!(unreadable.untold().len(), 1);
    assert_eq!(tell().await.expect("told in time"), 0);
    assert!(unreadable.untold().is_empty());
    assert_eq!(
        tell().await.expect("told in time"),
        0,
        "nothing left to tell"
    );
    drop(recorder);
    tokio::time::timeout(Duration::from_secs(5), verifier)
        .await
        .expect("verifier timed out")
        .expect("verifier panicked");
}

// ---- the API server model refuses what the real one refuses ---------------

/// The model of `tests/apiserver` is itself checked: each write below is
/// one the real API server answers 422 (or prunes), as seen on 1.36.
#[test]
fn the_api_server_model_refuses_what_a_real_one_refuses() {
    let job = serde_json::to_value(dljob("mpi", MPI)).unwrap();
    let status = "/apis/dljob.dev/v1alpha1/namespaces/ml/dljobs/mnist/status";
    // Refused: the model panics saying the API server would refuse it (not
    // for any other reason).
    let refused = |content_type: &'static str, body: Value| {
        let job = job.clone();
        match std::panic::catch_unwind(move || {
            Server::holding([&job]).write("PATCH", status, content_type, &body)
        }) {
            Ok(()) => false,
            Err(e) => {
                let message = e.downcast_ref::<String>().cloned().unwrap_or_default();
                assert!(message.contains("the API server would refuse"), "{message}");
                true
            }
        }
    };
    let merge = "application/merge-patch+json";
    let apply = "application/apply-patch+yaml";
    // A merge patch on a DLJob without a status: status.phase is required.
    assert!(refused(
        merge,
        json!({"status": {"sshSecret": "mnist-ssh"}})
    ));
    // A phase the CRD's enum does not list.
    assert!(refused(apply, json!({"status": {"phase": "Done"}})));
    // A count below zero (format uint32).
    assert!(refused(
        apply,
        json!({"status": {"phase": "Running", "restarts": -1}})
    ));
    // A field the schema does not declare (the server would prune it).
    assert!(refused(
        apply,
        json!({"status": {"phase": "Running", "sshsecret": "x"}})
    ));
    // A condition without its required fields.
    assert!(refused(
        apply,
        json!({"status": {"phase": "Running", "conditions": [{"type": "Created"}]}})
    ));
    // What dljob writes is accepted, and so is the merge onto a whole status.
    assert!(!refused(
        apply,
        json!({"status": {"phase": "Pending", "sshSecret": "mnist-ssh"}})
    ));
    let mut with = job.clone();
    with["status"] = json!({"phase": "Running"});
    Server::holding([&with]).write(
        "PATCH",
        status,
        merge,
        &json!({"status": {"sshSecret": "x"}}),
    );
    // A built-in kind dljob creates whole: a Service port without its port.
    let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "mnist"},
        "spec": {"ports": [{"name": "dljob"}]}});
    assert!(std::panic::catch_unwind(|| Server::default().write(
        "POST",
        "/api/v1/namespaces/ml/services",
        "application/json",
        &service
    ))
    .is_err());
}

// ---- leader election ----------------------------------------------------------

/// A replica that stops gives its leader Lease up, so that another takes
/// over at once instead of when the Lease expires (15 s). The API server
/// is faked for the Lease (kept in memory, created, patched as the server
/// merges a strategic or apply patch's `spec`), lists are empty and
/// watches held open.
#[tokio::test]
async fn the_leader_gives_its_lease_up_when_it_stops() {
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let (_tx, config) = tokio::sync::watch::channel(Config::default());
    let mut registry = prometheus_client::registry::Registry::default();
    let (_peers, running) = dljob::reconciler::start(client, &mut registry, config)
        .await
        .unwrap();
    let lease_path = "/apis/coordination.k8s.io/v1/namespaces/default/leases";
    let lease: Arc<std::sync::Mutex<Option<Value>>> = Arc::default();
    let patches: Arc<std::sync::Mutex<Vec<Value>>> = Arc::default();
    let server = {
        let (lease, patches) = (lease.clone(), patches.clone());
        tokio::spawn(async move {
            let mut held = Vec::new();
            let json_response = |status: u16, body: &Value| {
                Response::builder()
                    .status(status)
                    .body(Body::from(serde_json::to_vec(body).unwrap()))
                    .unwrap()
            };
            while let Some((request, send)) = handle.next_request().await {
                let uri = request.uri().to_string();
                let path = request.uri().path().to_owned();
                let method = request.method().clone();
                let body = request.into_body().collect_bytes().await.unwrap();
                if path.starts_with(lease_path) {
                    let mut stored = lease.lock().unwrap();
                    let answer = match (method.as_str(), stored.as_mut()) {
                        ("GET", None) => json_response(
                            404,
                            &json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
                                "reason": "NotFound", "code": 404, "message": "not found"}),
                        ),
                        ("GET", Some(l)) => json_response(200, l),
                        ("POST", _) => {
                            let mut created: Value = serde_json::from_slice(&body).unwrap();
                            created["metadata"]["namespace"] = json!("default");
                            created["metadata"]["resourceVersion"] = json!("1");
                            created["spec"] = json!({});
                            *stored = Some(created.clone());
                            json_response(201, &created)
                        }
                        ("PATCH", Some(l)) => {
                            let patch: Value = serde_json::from_slice(&body).unwrap();
                            patches.lock().unwrap().push(patch.clone());
                            for (k, v) in patch["spec"].as_object().unwrap() {
                                if v.is_null() {
                                    l["spec"].as_object_mut().unwrap().remove(k);
                                } else {
                                    l["spec"][k] = v.clone();
                                }
                            }
                            json_response(200, l)
                        }
                        other => panic!("unexpected {} {uri} ({other:?})", method),
                    };
                    send.send_response(answer);
                } else if uri.contains("watch=true") {
                    held.push(send);
                } else if method == "GET" {
                    let list = json!({"apiVersion": "v1", "kind": "List",
                        "metadata": {"resourceVersion": "1"}, "items": []});
                    send.send_response(json_response(200, &list));
                } else {
                    panic!("unexpected call {method} {uri}");
                }
            }
        })
    };
    let holder = || {
        lease
            .lock()
            .unwrap()
            .as_ref()
            .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_owned))
    };
    tokio::time::timeout(Duration::from_secs(20), async {
        while holder().is_none() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the only replica takes the Lease");
    let started = std::time::Instant::now();
    running.stop(Duration::from_secs(5)).await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "stopping took {took:?}");
    assert_eq!(holder(), None, "the Lease still has a holder");
    let last = patches.lock().unwrap().last().cloned().unwrap();
    assert_eq!(last["spec"]["holderIdentity"], Value::Null, "{last}");
    assert!(last["spec"]
        .as_object()
        .unwrap()
        .contains_key("holderIdentity"));
    server.abort();
}

/// The index keeps, per job, the names of the StatefulSets and Jobs
/// labelled with it — one that no longer parses as a member (scaled beyond
/// its role's count) too — so that a reconcile reads its own job's
/// workloads and never walks the cluster's. Another job's, a pod, a
/// deleted workload and one a relist no longer lists are not among them.
#[test]
fn the_index_keeps_each_jobs_workload_names_parsing_or_not() {
    use dljob::object::Kind;
    let index = MemberIndex::default();
    let config = Config::default();
    // In a stable order: StatefulSets, then Jobs, each by name.
    let names = |job: &str| index.workloads(NS, job);
    let ps = statefulset("mnist", "tensorflow", "chief=1,ps=2,worker=1", "ps", 2);
    // Scaled beyond its role's count: not a member any more, still the job's.
    let mut big = statefulset("mnist", "tensorflow", "chief=1,ps=2,worker=1", "worker", 5);
    big.metadata.name = Some("worker".into());
    let chief = indexed_job("mnist", "tensorflow", "chief=1,ps=2,worker=1", "chief");
    let other = statefulset("other", "tensorflow", "chief=1,ps=2,worker=1", "ps", 2);
    let mut other = other;
    other.metadata.name = Some("other-ps".into());
    for e in [ps.clone(), big.clone(), other.clone()] {
        index.apply_event(&watcher::Event::Apply(e), &config);
    }
    index.apply_event(&watcher::Event::Apply(chief.clone()), &config);
    index.apply_event(
        &watcher::Event::Apply(bare_pod(
            "mnist",
            "tensorflow",
            "chief=1,ps=2,worker=1",
            "chief",
            0,
            running(),
        )),
        &config,
    );
    assert_eq!(
        names("mnist"),
        [
            (Kind::StatefulSet, "ps".to_owned()),
            (Kind::StatefulSet, "worker".to_owned()),
            (Kind::Job, "chief".to_owned()),
        ]
    );
    assert_eq!(names("other"), [(Kind::StatefulSet, "other-ps".to_owned())]);
    assert!(
        !index
            .members(NS, "mnist", None)
            .iter()
            .any(|e| e.member.name == "worker"),
        "the set beyond its role's count is no member"
    );
    // Its label taken off: no longer the job's.
    let mut unlabelled = ps.clone();
    unlabelled.metadata.labels = None;
    index.apply_event(&watcher::Event::Apply(unlabelled), &config);
    index.apply_event(&watcher::Event::Delete(chief), &config);
    assert_eq!(names("mnist"), [(Kind::StatefulSet, "worker".to_owned())]);
    // A relist of StatefulSets without it.
    index.apply_event::<StatefulSet>(&watcher::Event::Init, &config);
    index.apply_event(&watcher::Event::InitApply(other), &config);
    index.apply_event::<StatefulSet>(&watcher::Event::InitDone, &config);
    assert_eq!(names("mnist"), []);
    assert_eq!(names("other"), [(Kind::StatefulSet, "other-ps".to_owned())]);
}
