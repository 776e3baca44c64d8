//! A fake kube-apiserver for `benches/replay.rs`: an in-memory object store
//! per resource with one global resourceVersion counter, answering plain
//! HTTP on 127.0.0.1 the calls `dljob serve` makes, as the real one does:
//!
//! - `GET /version`;
//! - LIST with `limit`/`continue` (pages at the snapshot resourceVersion of
//!   the first page), `labelSelector` (`k`, `!k`, `k=v`, `k==v`, `k!=v`)
//!   and `fieldSelector` (`metadata.name`, `metadata.namespace`);
//! - `watch=true`: JSON lines (ADDED/MODIFIED/DELETED) from
//!   `resourceVersion` on (the whole history is kept, so no 410), or the
//!   current objects as ADDED for `""`/`"0"`; BOOKMARKs every 10 s with
//!   `allowWatchBookmarks`; the stream ends after `timeoutSeconds`;
//! - GET, POST (409 AlreadyExists, `generateName`), PUT (409 Conflict on a
//!   stale resourceVersion), PATCH (merge, strategic as merge, apply —
//!   kube sends its body as JSON — as merge and creating a missing object,
//!   JSON Patch) with the `status` subresource, DELETE (uid precondition);
//!   404 NotFound with a Status body. A write that changes nothing is not
//!   a write (no new resourceVersion, no event), as on the real server.
//!
//! Every write is an event to the watchers of its resource. Objects get a
//! uid, creationTimestamp, generation (bumped when the spec changes) and a
//! `managedFields` entry per manager/operation/subresource whose `fieldsV1`
//! is built from the fields the request set (an approximation of the real
//! server's field sets, of the same shape and size). Services get the real
//! server's defaults. Requests to resources it does not serve are answered
//! 404 and counted as unknown routes.
//!
//! Every request is counted by verb and resource ([`ApiServer::calls`]).
//! Not implemented (dljob does not use them): strategic-merge directives
//! (`$patch`), list merge keys, DELETE of collections, graceful deletion.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Query, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::response::Response;
use base64::Engine as _;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

/// How often an idle watch with `allowWatchBookmarks` gets a BOOKMARK.
const BOOKMARK_EVERY: Duration = Duration::from_secs(10);
/// The longest watch (the real server's default is 30–60 min).
const MAX_WATCH: Duration = Duration::from_secs(1800);

/// One served resource: its plural, group, version, kind, whether it is
/// namespaced and whether it has a status subresource.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Served {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub kind: &'static str,
    pub status: bool,
}

pub(crate) const SERVED: &[Served] = &[
    Served {
        group: "",
        version: "v1",
        plural: "pods",
        kind: "Pod",
        status: true,
    },
    Served {
        group: "",
        version: "v1",
        plural: "services",
        kind: "Service",
        status: true,
    },
    Served {
        group: "",
        version: "v1",
        plural: "secrets",
        kind: "Secret",
        status: false,
    },
    Served {
        group: "",
        version: "v1",
        plural: "events",
        kind: "Event",
        status: false,
    },
    Served {
        group: "apps",
        version: "v1",
        plural: "statefulsets",
        kind: "StatefulSet",
        status: true,
    },
    Served {
        group: "batch",
        version: "v1",
        plural: "jobs",
        kind: "Job",
        status: true,
    },
    Served {
        group: "dljob.dev",
        version: "v1alpha1",
        plural: "dljobs",
        kind: "DLJob",
        status: true,
    },
    Served {
        group: "coordination.k8s.io",
        version: "v1",
        plural: "leases",
        kind: "Lease",
        status: false,
    },
    Served {
        group: "events.k8s.io",
        version: "v1",
        plural: "events",
        kind: "Event",
        status: false,
    },
    // Owned by the reconciler for jobs with a TensorBoard, or a gang
    // scheduler that reads a PodGroup (`--tensorboard`, `--gang volcano`).
    Served {
        group: "apps",
        version: "v1",
        plural: "deployments",
        kind: "Deployment",
        status: true,
    },
    Served {
        group: "scheduling.volcano.sh",
        version: "v1beta1",
        plural: "podgroups",
        kind: "PodGroup",
        status: true,
    },
];

impl Served {
    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
    /// `pods`, `dljobs.dljob.dev`: the resource as kubectl names it.
    pub(crate) fn resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_owned()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
    pub(crate) fn find(group: &str, plural: &str) -> Option<&'static Served> {
        SERVED
            .iter()
            .find(|s| s.group == group && s.plural == plural)
    }
}

/// A stored object: its serialisation (what LIST and watch send) and the
/// few fields a LIST's or watch's filter reads. The JSON tree is not kept
/// (at 100 000 pods, with every version in the history, the trees alone
/// took gigabytes): it is parsed again where the store hands out a copy.
pub(crate) struct Obj {
    pub bytes: Bytes,
    namespace: String,
    name: String,
    labels: Option<Map<String, Value>>,
    resource_version: u64,
}

impl Obj {
    fn new(value: Value, resource_version: u64) -> Arc<Self> {
        let bytes = Bytes::from(serde_json::to_vec(&value).expect("JSON"));
        let meta = &value["metadata"];
        Arc::new(Self {
            bytes,
            namespace: meta["namespace"].as_str().unwrap_or("").to_owned(),
            name: meta["name"].as_str().unwrap_or("").to_owned(),
            labels: meta["labels"].as_object().cloned(),
            resource_version,
        })
    }
    /// The object as a JSON tree (a copy).
    pub(crate) fn value(&self) -> Value {
        serde_json::from_slice(&self.bytes).expect("the store holds JSON")
    }
    fn labels(&self) -> Option<&Map<String, Value>> {
        self.labels.as_ref()
    }
    fn namespace(&self) -> &str {
        &self.namespace
    }
    fn name(&self) -> &str {
        &self.name
    }
}

/// A parsed label selector: every requirement must hold.
#[derive(Clone, Debug, Default)]
pub(crate) struct Selector(Vec<Requirement>);

#[derive(Clone, Debug)]
enum Requirement {
    Exists(String),
    NotExists(String),
    Equals(String, String),
    NotEquals(String, String),
}

impl Selector {
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for term in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let req = if let Some((k, v)) = term.split_once("!=") {
                Requirement::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once("==") {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once('=') {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some(k) = term.strip_prefix('!') {
                Requirement::NotExists(k.trim().into())
            } else if term.contains(' ') || term.contains('(') {
                return Err(format!("unsupported label selector term {term:?}"));
            } else {
                Requirement::Exists(term.into())
            };
            reqs.push(req);
        }
        Ok(Self(reqs))
    }
    fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
            Requirement::Equals(k, v) => get(k) == Some(v),
            Requirement::NotEquals(k, v) => get(k) != Some(v),
        })
    }
}

/// What a LIST or watch selects.
#[derive(Clone, Debug, Default)]
struct Filter {
    namespace: Option<String>,
    labels: Selector,
    /// `metadata.name=x` / `metadata.namespace=x`.
    fields: Vec<(String, String)>,
}

impl Filter {
    fn matches(&self, o: &Obj) -> bool {
        if let Some(ns) = &self.namespace {
            if o.namespace() != ns {
                return false;
            }
        }
        self.fields.iter().all(|(k, v)| match k.as_str() {
            "metadata.name" => o.name() == v,
            "metadata.namespace" => o.namespace() == v,
            _ => true,
        }) && self.labels.matches(o.labels())
    }
}

struct Watcher {
    filter: Filter,
    tx: mpsc::UnboundedSender<Bytes>,
}

#[derive(Default)]
struct Resource {
    objects: BTreeMap<(String, String), Arc<Obj>>,
    /// Every event, oldest first: (resourceVersion, type, object).
    history: Vec<(u64, &'static str, Arc<Obj>)>,
    watchers: Vec<Watcher>,
    max_open_watches: usize,
}

#[derive(Default)]
struct Store {
    rv: u64,
    uids: u64,
    resources: HashMap<&'static str, Resource>,
}

/// The fake API server (shared by the HTTP handlers and the bench).
#[derive(Default)]
pub(crate) struct ApiServer {
    store: Mutex<Store>,
    /// (verb, resource) → count.
    calls: Mutex<BTreeMap<(String, String), u64>>,
    /// Requests nothing here serves: "METHOD path" → count.
    unknown: Mutex<BTreeMap<String, u64>>,
}

fn key_of(s: &Served) -> &'static str {
    // `Served` entries are 'static: leak one string per resource, once.
    static KEYS: std::sync::OnceLock<HashMap<(&'static str, &'static str), &'static str>> =
        std::sync::OnceLock::new();
    KEYS.get_or_init(|| {
        SERVED
            .iter()
            .map(|s| {
                let k: &'static str =
                    Box::leak(format!("{}/{}", s.group, s.plural).into_boxed_str());
                ((s.group, s.plural), k)
            })
            .collect()
    })[&(s.group, s.plural)]
}

/// An API error as the real server writes it.
pub(crate) fn status_error(code: u16, reason: &str, message: String, details: Value) -> Response {
    let body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": details,
        "code": code,
    });
    json_response(StatusCode::from_u16(code).unwrap(), body.to_string().into())
}

fn json_response(code: StatusCode, body: Bytes) -> Response {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .unwrap()
}

fn not_found(s: &Served, name: &str) -> Response {
    status_error(
        404,
        "NotFound",
        format!("{} \"{name}\" not found", s.resource()),
        json!({"name": name, "group": s.group, "kind": s.plural}),
    )
}

fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::from_second(k8s_openapi::jiff::Timestamp::now().as_second())
        .unwrap()
        .to_string()
}

/// A `fieldsV1` set with the shape the real server writes: `f:<field>` per
/// object key, `k:{"name":…}` per list element with a key field, `"."`
/// for maps and list elements, `{}` for leaves.
pub(crate) fn fields_v1(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, c) in m {
                let mut child = field_child(c);
                if matches!(k.as_str(), "labels" | "annotations" | "selector" | "data") {
                    if let Value::Object(o) = &mut child {
                        o.insert(".".into(), json!({}));
                    }
                }
                out.insert(format!("f:{k}"), child);
            }
            Value::Object(out)
        }
        _ => json!({}),
    }
}

fn field_child(c: &Value) -> Value {
    match c {
        Value::Object(m) if !m.is_empty() => fields_v1(c),
        Value::Array(a) => {
            let mut out = Map::new();
            for e in a {
                let key = [
                    "name",
                    "type",
                    "containerPort",
                    "port",
                    "ip",
                    "key",
                    "mountPath",
                ]
                .iter()
                .find_map(|k| e.get(*k).map(|x| json!({ *k: x }).to_string()));
                if let Some(key) = key {
                    let mut inner = match fields_v1(e) {
                        Value::Object(m) => m,
                        _ => Map::new(),
                    };
                    inner.insert(".".into(), json!({}));
                    out.insert(format!("k:{key}"), Value::Object(inner));
                }
            }
            Value::Object(out)
        }
        _ => json!({}),
    }
}

/// The fields a write by `manager` sets, for its managedFields entry.
fn written_fields(body: &Value, subresource: bool) -> Value {
    let mut v = body.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("apiVersion");
        m.remove("kind");
        if subresource {
            m.retain(|k, _| k == "status");
        }
        if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.retain(|k, _| {
                matches!(
                    k.as_str(),
                    "labels" | "annotations" | "ownerReferences" | "finalizers"
                )
            });
            if meta.is_empty() {
                m.remove("metadata");
            }
        }
    }
    fields_v1(&v)
}

/// Sets (or replaces) the managedFields entry of `manager`/`operation`/
/// `subresource`; the time changes only when its field set does.
pub(crate) fn set_managed(
    object: &mut Value,
    manager: &str,
    operation: &str,
    api_version: &str,
    subresource: Option<&str>,
    fields: Value,
) {
    let meta = &mut object["metadata"];
    if !meta["managedFields"].is_array() {
        meta["managedFields"] = json!([]);
    }
    let list = meta["managedFields"].as_array_mut().unwrap();
    let same = |e: &Value| {
        e["manager"] == manager
            && e["operation"] == operation
            && e.get("subresource").and_then(Value::as_str) == subresource
    };
    if let Some(e) = list.iter_mut().find(|e| same(e)) {
        if e["fieldsV1"] != fields {
            e["fieldsV1"] = fields;
            e["time"] = Value::String(now_rfc3339());
        }
        return;
    }
    let mut e = json!({
        "manager": manager,
        "operation": operation,
        "apiVersion": api_version,
        "time": now_rfc3339(),
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    });
    if let Some(s) = subresource {
        e["subresource"] = Value::String(s.into());
    }
    list.push(e);
}

/// What the real server fills in on a Service.
fn default_service(v: &mut Value) {
    let spec = &mut v["spec"];
    if !spec.is_object() {
        *spec = json!({});
    }
    let set = |spec: &mut Value, k: &str, d: Value| {
        if spec.get(k).is_none_or(Value::is_null) {
            spec[k] = d;
        }
    };
    set(spec, "type", json!("ClusterIP"));
    set(spec, "sessionAffinity", json!("None"));
    set(spec, "internalTrafficPolicy", json!("Cluster"));
    set(spec, "ipFamilies", json!(["IPv4"]));
    set(spec, "ipFamilyPolicy", json!("SingleStack"));
    let ip = spec
        .get("clusterIP")
        .cloned()
        .unwrap_or(json!("10.96.0.10"));
    set(spec, "clusterIP", ip.clone());
    set(spec, "clusterIPs", json!([ip]));
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports {
            if p.get("protocol").is_none() {
                p["protocol"] = json!("TCP");
            }
            if p.get("targetPort").is_none() {
                p["targetPort"] = p["port"].clone();
            }
        }
    }
    if v.get("status").is_none() {
        v["status"] = json!({"loadBalancer": {}});
    }
}

/// Which request this is.
struct Target {
    served: &'static Served,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

fn parse_path(path: &str) -> Option<Result<Target, ()>> {
    let seg: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match *seg.first()? {
        "api" if seg.len() >= 3 && seg[1] == "v1" => ("", &seg[2..]),
        "apis" if seg.len() >= 4 => (seg[1], &seg[3..]),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(ns.to_string()), rest),
        _ => (None, rest),
    };
    let (plural, name, sub) = match rest {
        [p] => (*p, None, None),
        [p, n] => (*p, Some(n.to_string()), None),
        [p, n, s] => (*p, Some(n.to_string()), Some(s.to_string())),
        _ => return None,
    };
    Some(match Served::find(group, plural) {
        Some(served) => Ok(Target {
            served,
            namespace,
            name,
            subresource: sub,
        }),
        None => Err(()),
    })
}

impl ApiServer {
    /// Serves on a free 127.0.0.1 port until the runtime ends.
    pub(crate) async fn start(self: &Arc<Self>) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(self.clone());
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        addr
    }

    /// (verb, resource) → count since the start.
    pub(crate) fn calls(&self) -> BTreeMap<(String, String), u64> {
        self.calls.lock().unwrap().clone()
    }

    pub(crate) fn unknown(&self) -> BTreeMap<String, u64> {
        self.unknown.lock().unwrap().clone()
    }

    fn count(&self, verb: &str, resource: String) {
        *self
            .calls
            .lock()
            .unwrap()
            .entry((verb.to_owned(), resource))
            .or_default() += 1;
    }

    /// How many objects of a resource are stored.
    pub(crate) fn len(&self, group: &str, plural: &str) -> usize {
        let s = Served::find(group, plural).unwrap();
        self.store
            .lock()
            .unwrap()
            .resources
            .get(key_of(s))
            .map_or(0, |r| r.objects.len())
    }

    /// A stored object.
    pub(crate) fn get(
        &self,
        group: &str,
        plural: &str,
        namespace: &str,
        name: &str,
    ) -> Option<Value> {
        let s = Served::find(group, plural).unwrap();
        self.store
            .lock()
            .unwrap()
            .resources
            .get(key_of(s))?
            .objects
            .get(&(namespace.to_owned(), name.to_owned()))
            .map(|o| o.value())
    }

    /// Watch streams open now and the most open at once, per resource.
    pub(crate) fn watches(&self) -> BTreeMap<String, (usize, usize)> {
        let mut store = self.store.lock().unwrap();
        SERVED
            .iter()
            .filter_map(|s| {
                let r = store.resources.get_mut(key_of(s))?;
                r.watchers.retain(|w| !w.tx.is_closed());
                Some((s.resource(), (r.watchers.len(), r.max_open_watches)))
            })
            .collect()
    }

    /// Stores `object` as a client's create or update would (the bench's
    /// own writes: a kubelet's status, a user's create). Returns its
    /// resourceVersion.
    pub(crate) fn put(&self, group: &str, plural: &str, object: Value) -> u64 {
        let s = Served::find(group, plural).unwrap();
        let mut store = self.store.lock().unwrap();
        let ns = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        let name = object["metadata"]["name"].as_str().unwrap().to_owned();
        let exists = store
            .resources
            .get(key_of(s))
            .is_some_and(|r| r.objects.contains_key(&(ns.clone(), name.clone())));
        let ty = if exists { "MODIFIED" } else { "ADDED" };
        let obj = commit(&mut store, s, ty, object);
        obj.resource_version
    }

    /// A fresh uid.
    pub(crate) fn uid(&self) -> String {
        let mut store = self.store.lock().unwrap();
        next_uid(&mut store)
    }
}

fn next_uid(store: &mut Store) -> String {
    store.uids += 1;
    let n = store.uids;
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        (n.wrapping_mul(2_654_435_761)) as u32,
        (n >> 3) as u16,
        (n * 7) & 0xfff,
        (n * 13) & 0xfff,
        n.wrapping_mul(0x9e37_79b9_7f4a) & 0xffff_ffff_ffff
    )
}

/// Writes one object: a new resourceVersion, the store, the history and
/// an event to each matching watcher. `ty` DELETED removes it.
fn commit(store: &mut Store, s: &Served, ty: &'static str, mut value: Value) -> Arc<Obj> {
    store.rv += 1;
    let rv = store.rv;
    value["metadata"]["resourceVersion"] = Value::String(rv.to_string());
    let obj = Obj::new(value, rv);
    let key = (obj.namespace().to_owned(), obj.name().to_owned());
    let r = store.resources.entry(key_of(s)).or_default();
    if ty == "DELETED" {
        r.objects.remove(&key);
    } else {
        r.objects.insert(key, obj.clone());
    }
    r.history.push((rv, ty, obj.clone()));
    if !r.watchers.is_empty() {
        let line = event_line(ty, &obj.bytes);
        r.watchers
            .retain(|w| !w.filter.matches(&obj) || w.tx.send(line.clone()).is_ok());
    }
    obj
}

fn event_line(ty: &str, object: &[u8]) -> Bytes {
    let mut line = Vec::with_capacity(object.len() + 32);
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(ty.as_bytes());
    line.extend_from_slice(b"\",\"object\":");
    line.extend_from_slice(object);
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

type Params = HashMap<String, String>;

async fn handle(State(srv): State<Arc<ApiServer>>, req: Request) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let params: Params = Query::<Params>::try_from_uri(req.uri())
        .map(|q| q.0)
        .unwrap_or_default();
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let agent = req
        .headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("unknown")
        .split('/')
        .next()
        .unwrap_or("unknown")
        .to_owned();
    if method == Method::GET && path == "/version" {
        srv.count("get", "/version".into());
        return json_response(
            StatusCode::OK,
            json!({
                "major": "1", "minor": "36", "gitVersion": "v1.36.2-replay",
                "gitCommit": "0000000000000000000000000000000000000000",
                "gitTreeState": "clean", "buildDate": "2026-11-01T00:00:00Z",
                "goVersion": "go1.25.0", "compiler": "gc", "platform": "linux/amd64"
            })
            .to_string()
            .into(),
        );
    }
    let unknown = |srv: &ApiServer| {
        let what = format!("{method} {path}");
        let first = {
            let mut u = srv.unknown.lock().unwrap();
            let n = u.entry(what.clone()).or_default();
            *n += 1;
            *n == 1
        };
        if first {
            eprintln!("replay: fake API server: unknown route {what} (404)");
        }
        status_error(
            404,
            "NotFound",
            "the server could not find the requested resource".into(),
            json!({}),
        )
    };
    let target = match parse_path(&path) {
        Some(Ok(t)) => t,
        _ => return unknown(&srv),
    };
    let body = match axum::body::to_bytes(req.into_body(), 64 << 20).await {
        Ok(b) => b,
        Err(e) => return status_error(400, "BadRequest", e.to_string(), json!({})),
    };
    let s = target.served;
    let sub = target.subresource.as_deref();
    if sub.is_some_and(|x| x != "status") {
        return unknown(&srv);
    }
    let suffix = if sub.is_some() { "/status" } else { "" };
    let resource = format!("{}{suffix}", s.resource());
    let manager = params.get("fieldManager").cloned().unwrap_or(agent);
    match (&method, &target.name) {
        (&Method::GET, None) if params.get("watch").is_some_and(|w| w == "true" || w == "1") => {
            srv.count("watch", resource);
            watch(&srv, &target, &params)
        }
        (&Method::GET, None) => {
            srv.count("list", resource);
            list(&srv, &target, &params)
        }
        (&Method::GET, Some(name)) => {
            srv.count("get", resource);
            let store = srv.store.lock().unwrap();
            let ns = target.namespace.clone().unwrap_or_default();
            match store
                .resources
                .get(key_of(s))
                .and_then(|r| r.objects.get(&(ns, name.clone())))
            {
                Some(o) => json_response(StatusCode::OK, o.bytes.clone()),
                None => not_found(s, name),
            }
        }
        (&Method::POST, None) => {
            srv.count("create", resource);
            match serde_json::from_slice::<Value>(&body) {
                Ok(v) => create(&srv, &target, v, &manager, "Update"),
                Err(e) => status_error(400, "BadRequest", e.to_string(), json!({})),
            }
        }
        (&Method::PUT, Some(name)) => {
            srv.count("update", resource);
            match serde_json::from_slice::<Value>(&body) {
                Ok(v) => update(&srv, &target, name, Write::Replace(v), &manager),
                Err(e) => status_error(400, "BadRequest", e.to_string(), json!({})),
            }
        }
        (&Method::PATCH, Some(name)) => {
            let (verb, kind) = match content_type.split(';').next().unwrap_or("") {
                "application/apply-patch+yaml" => ("patch(apply)", PatchKind::Apply),
                "application/merge-patch+json" => ("patch(merge)", PatchKind::Merge),
                "application/strategic-merge-patch+json" => ("patch(strategic)", PatchKind::Merge),
                "application/json-patch+json" => ("patch(json)", PatchKind::Json),
                other => {
                    srv.count("patch(?)", resource);
                    return status_error(
                        415,
                        "UnsupportedMediaType",
                        format!("the body of the request was in an unknown format: {other}"),
                        json!({}),
                    );
                }
            };
            srv.count(verb, resource);
            // kube sends apply bodies as JSON, which is YAML.
            match serde_json::from_slice::<Value>(&body) {
                Ok(v) => update(
                    &srv,
                    &target,
                    name,
                    Write::Patch(kind, v, params.get("force").is_some_and(|f| f == "true")),
                    &manager,
                ),
                Err(e) => status_error(400, "BadRequest", e.to_string(), json!({})),
            }
        }
        (&Method::DELETE, Some(name)) => {
            srv.count("delete", resource);
            let opts: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            delete(&srv, &target, name, &opts)
        }
        _ => unknown(&srv),
    }
}

fn list(srv: &ApiServer, t: &Target, params: &Params) -> Response {
    let filter = match filter_of(t, params) {
        Ok(f) => f,
        Err(e) => return status_error(400, "BadRequest", e, json!({})),
    };
    let limit = params
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|&l| l > 0)
        .unwrap_or(usize::MAX);
    // continue = base64("<snapshot rv>\0<namespace>\0<name>") of the last item.
    let cont = params
        .get("continue")
        .filter(|c| !c.is_empty())
        .and_then(|c| {
            let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(c)
                .ok()?;
            let text = String::from_utf8(raw).ok()?;
            let mut it = text.splitn(3, '\0');
            Some((
                it.next()?.parse::<u64>().ok()?,
                it.next()?.to_owned(),
                it.next()?.to_owned(),
            ))
        });
    let store = srv.store.lock().unwrap();
    let snapshot = cont.as_ref().map_or(store.rv, |c| c.0);
    let empty = BTreeMap::new();
    let objects = store
        .resources
        .get(key_of(t.served))
        .map_or(&empty, |r| &r.objects);
    let range = match &cont {
        Some((_, ns, name)) => objects.range((
            std::ops::Bound::Excluded((ns.clone(), name.clone())),
            std::ops::Bound::Unbounded,
        )),
        None => objects.range::<(String, String), _>(..),
    };
    let mut items = Vec::new();
    let mut more = None;
    for (k, o) in range {
        if !filter.matches(o) {
            continue;
        }
        if items.len() == limit {
            more = Some(k.clone());
            break;
        }
        items.push(o.clone());
    }
    drop(store);
    let last = items
        .last()
        .map(|o| (o.namespace().to_owned(), o.name().to_owned()));
    let continue_token = match (more, last) {
        (Some(_), Some((ns, name))) => base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(format!("{snapshot}\0{ns}\0{name}")),
        _ => String::new(),
    };
    let mut meta = json!({ "resourceVersion": snapshot.to_string() });
    if !continue_token.is_empty() {
        meta["continue"] = Value::String(continue_token);
    }
    let mut out = Vec::with_capacity(items.iter().map(|o| o.bytes.len() + 1).sum::<usize>() + 200);
    out.extend_from_slice(
        format!(
            "{{\"kind\":\"{}List\",\"apiVersion\":\"{}\",\"metadata\":{},\"items\":[",
            t.served.kind,
            t.served.api_version(),
            meta
        )
        .as_bytes(),
    );
    for (i, o) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&o.bytes);
    }
    out.extend_from_slice(b"]}");
    json_response(StatusCode::OK, out.into())
}

fn filter_of(t: &Target, params: &Params) -> Result<Filter, String> {
    let labels = Selector::parse(params.get("labelSelector").map_or("", String::as_str))?;
    let fields = params
        .get("fieldSelector")
        .map_or("", String::as_str)
        .split(',')
        .filter(|x| !x.is_empty())
        .filter_map(|f| {
            let (k, v) = f.split_once("==").or_else(|| f.split_once('='))?;
            Some((k.trim().to_owned(), v.trim().to_owned()))
        })
        .collect();
    Ok(Filter {
        namespace: t.namespace.clone(),
        labels,
        fields,
    })
}

fn watch(srv: &Arc<ApiServer>, t: &Target, params: &Params) -> Response {
    let filter = match filter_of(t, params) {
        Ok(f) => f,
        Err(e) => return status_error(400, "BadRequest", e, json!({})),
    };
    let from: u64 = params
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let timeout = params
        .get("timeoutSeconds")
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(MAX_WATCH, |s| Duration::from_secs(s).min(MAX_WATCH));
    let bookmarks = params
        .get("allowWatchBookmarks")
        .is_some_and(|b| b == "true");
    let (tx, rx) = mpsc::unbounded_channel();
    {
        let mut store = srv.store.lock().unwrap();
        let r = store.resources.entry(key_of(t.served)).or_default();
        if from == 0 {
            for o in r.objects.values().filter(|o| filter.matches(o)) {
                let _ = tx.send(event_line("ADDED", &o.bytes));
            }
        } else {
            let start = r.history.partition_point(|(rv, _, _)| *rv <= from);
            for (_, ty, o) in r.history[start..]
                .iter()
                .filter(|(_, _, o)| filter.matches(o))
            {
                let _ = tx.send(event_line(ty, &o.bytes));
            }
        }
        r.watchers.push(Watcher { filter, tx });
        r.watchers.retain(|w| !w.tx.is_closed());
        r.max_open_watches = r.max_open_watches.max(r.watchers.len());
    }
    let deadline = tokio::time::Instant::now() + timeout;
    let served = t.served;
    let srv = srv.clone();
    let stream = futures::stream::unfold(
        (rx, srv, tokio::time::Instant::now() + BOOKMARK_EVERY),
        move |(mut rx, srv, mut next_bookmark)| async move {
            tokio::select! {
                line = rx.recv() => line.map(|l| (Ok::<_, std::convert::Infallible>(l), (rx, srv, next_bookmark))),
                _ = tokio::time::sleep_until(deadline) => None,
                _ = tokio::time::sleep_until(next_bookmark), if bookmarks => {
                    next_bookmark += BOOKMARK_EVERY;
                    // Only when every event up to now has been sent:
                    // writes push under the same lock.
                    let store = srv.store.lock().unwrap();
                    if let Ok(line) = rx.try_recv() {
                        drop(store);
                        return Some((Ok(line), (rx, srv, next_bookmark)));
                    }
                    let rv = store.rv;
                    drop(store);
                    let bm = json!({
                        "type": "BOOKMARK",
                        "object": {"kind": served.kind, "apiVersion": served.api_version(),
                                   "metadata": {"resourceVersion": rv.to_string()}}
                    });
                    let mut line = serde_json::to_vec(&bm).unwrap();
                    line.push(b'\n');
                    Some((Ok(Bytes::from(line)), (rx, srv, next_bookmark)))
                }
            }
        },
    );
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(stream))
        .unwrap()
}

fn create(srv: &ApiServer, t: &Target, mut v: Value, manager: &str, operation: &str) -> Response {
    let s = t.served;
    if !v.is_object() || !v["metadata"].is_object() {
        return status_error(400, "BadRequest", "no metadata".into(), json!({}));
    }
    let mut store = srv.store.lock().unwrap();
    let ns = t.namespace.clone().unwrap_or_default();
    let name = match v["metadata"]["name"].as_str() {
        Some(n) if !n.is_empty() => n.to_owned(),
        _ => match v["metadata"]["generateName"].as_str() {
            Some(g) => format!("{g}{}", &next_uid(&mut store)[..5]),
            None => {
                return status_error(
                    422,
                    "Invalid",
                    "metadata.name: Required value".into(),
                    json!({}),
                )
            }
        },
    };
    let exists = store
        .resources
        .get(key_of(s))
        .is_some_and(|r| r.objects.contains_key(&(ns.clone(), name.clone())));
    if exists {
        return status_error(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", s.resource()),
            json!({"name": name, "group": s.group, "kind": s.plural}),
        );
    }
    let fields = written_fields(&v, false);
    v["apiVersion"] = Value::String(s.api_version());
    v["kind"] = Value::String(s.kind.into());
    let meta = &mut v["metadata"];
    meta["name"] = Value::String(name);
    if !ns.is_empty() {
        meta["namespace"] = Value::String(ns);
    }
    meta["uid"] = Value::String(next_uid(&mut store));
    meta["creationTimestamp"] = Value::String(now_rfc3339());
    if !matches!(s.kind, "Event" | "Lease" | "Secret") {
        meta["generation"] = json!(1);
    }
    if let Some(m) = meta.as_object_mut() {
        m.remove("resourceVersion");
        m.remove("managedFields");
    }
    if s.status && s.kind == "DLJob" {
        if let Some(m) = v.as_object_mut() {
            m.remove("status");
        }
    }
    if s.kind == "Service" {
        default_service(&mut v);
    }
    set_managed(&mut v, manager, operation, &s.api_version(), None, fields);
    let obj = commit(&mut store, s, "ADDED", v);
    json_response(StatusCode::CREATED, obj.bytes.clone())
}

enum PatchKind {
    Apply,
    Merge,
    Json,
}

enum Write {
    Replace(Value),
    Patch(PatchKind, Value, bool),
}

fn update(srv: &ApiServer, t: &Target, name: &str, write: Write, manager: &str) -> Response {
    let s = t.served;
    let subresource = t.subresource.as_deref();
    let ns = t.namespace.clone().unwrap_or_default();
    let mut store = srv.store.lock().unwrap();
    let current = store
        .resources
        .get(key_of(s))
        .and_then(|r| r.objects.get(&(ns.clone(), name.to_owned())))
        .map(|o| o.value());
    let apply = matches!(write, Write::Patch(PatchKind::Apply, ..));
    let Some(old) = current else {
        if apply && subresource.is_none() {
            // Server-side apply creates what is missing.
            drop(store);
            let Write::Patch(_, mut body, _) = write else {
                unreachable!()
            };
            body["metadata"]["name"] = Value::String(name.to_owned());
            return create(srv, t, body, manager, "Apply");
        }
        return not_found(s, name);
    };
    let mut new = old.clone();
    let (operation, fields) = match write {
        Write::Replace(body) => {
            if let Some(rv) = body["metadata"]["resourceVersion"].as_str() {
                if rv != old["metadata"]["resourceVersion"] {
                    return status_error(
                        409,
                        "Conflict",
                        format!("Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again", s.resource()),
                        json!({"name": name, "group": s.group, "kind": s.plural}),
                    );
                }
            }
            let fields = written_fields(&body, subresource.is_some());
            if subresource.is_some() {
                new["status"] = body["status"].clone();
            } else {
                new = body;
                for k in [
                    "uid",
                    "creationTimestamp",
                    "name",
                    "namespace",
                    "generation",
                    "managedFields",
                ] {
                    new["metadata"][k] = old["metadata"][k].clone();
                }
                if s.status {
                    new["status"] = old["status"].clone();
                }
            }
            ("Update", fields)
        }
        Write::Patch(kind, body, _force) => {
            let fields = written_fields(&body, subresource.is_some());
            match kind {
                PatchKind::Json => {
                    let ops: json_patch::Patch = match serde_json::from_value(body) {
                        Ok(p) => p,
                        Err(e) => return status_error(400, "BadRequest", e.to_string(), json!({})),
                    };
                    if let Err(e) = json_patch::patch(&mut new, &ops) {
                        return status_error(422, "Invalid", e.to_string(), json!({}));
                    }
                }
                PatchKind::Merge | PatchKind::Apply => {
                    let mut body = body;
                    if let Some(m) = body.as_object_mut() {
                        m.remove("apiVersion");
                        m.remove("kind");
                        if subresource.is_some() {
                            m.retain(|k, _| k == "status");
                        } else if s.status {
                            m.remove("status");
                        }
                        if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
                            for k in [
                                "uid",
                                "name",
                                "namespace",
                                "resourceVersion",
                                "creationTimestamp",
                                "managedFields",
                            ] {
                                meta.remove(k);
                            }
                        }
                    }
                    json_patch::merge(&mut new, &body);
                }
            }
            (if apply { "Apply" } else { "Update" }, fields)
        }
    };
    set_managed(
        &mut new,
        manager,
        operation,
        &s.api_version(),
        subresource,
        fields,
    );
    if new == old {
        return json_response(StatusCode::OK, old_bytes(&store, s, &ns, name));
    }
    if subresource.is_none() && new.get("spec") != old.get("spec") {
        let g = old["metadata"]["generation"].as_i64().unwrap_or(0);
        if g > 0 {
            new["metadata"]["generation"] = json!(g + 1);
        }
    }
    let obj = commit(&mut store, s, "MODIFIED", new);
    json_response(StatusCode::OK, obj.bytes.clone())
}

fn old_bytes(store: &Store, s: &Served, ns: &str, name: &str) -> Bytes {
    store.resources[key_of(s)].objects[&(ns.to_owned(), name.to_owned())]
        .bytes
        .clone()
}

fn delete(srv: &ApiServer, t: &Target, name: &str, opts: &Value) -> Response {
    let s = t.served;
    let ns = t.namespace.clone().unwrap_or_default();
    let mut store = srv.store.lock().unwrap();
    let Some(old) = store
        .resources
        .get(key_of(s))
        .and_then(|r| r.objects.get(&(ns, name.to_owned())))
        .map(|o| o.value())
    else {
        return not_found(s, name);
    };
    if let Some(uid) = opts["preconditions"]["uid"].as_str() {
        if old["metadata"]["uid"] != uid {
            return status_error(
                409,
                "Conflict",
                format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    old["metadata"]["uid"]
                ),
                json!({"name": name, "group": s.group, "kind": s.plural}),
            );
        }
    }
    let obj = commit(&mut store, s, "DELETED", old);
    json_response(StatusCode::OK, obj.bytes.clone())
}
