//! `dljob describe`: one screen for a job — its DLJob's spec, phase,
//! conditions, per-role counts and coordinator, every member pod, and the
//! recent Events of the DLJob, its pods and its member workloads.
//!
//! [`render`] is pure (the objects and `now` in, the text out); [`observe`]
//! makes the reads: the DLJob, the pods, the member StatefulSets and Jobs
//! (their names, for their Events), the namespace's Events (core/v1,
//! which the built-in `view` role may read, as `kubectl describe` does)
//! and, for a job with a TensorBoard, its Deployment.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::process::ExitCode;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::ResourceExt;

use super::replica::{self, ReplicaOrder, ReplicaPod};
use super::table::{self, age, cell};
use crate::args::DescribeArgs;
use crate::contract::{self as c, Topology};
use crate::crd::{CoordinatorStatus, DLJob, DLJobStatus, JobSpec};

/// Events shown: the most recent ones.
pub(crate) const RECENT_EVENTS: usize = 15;

/// What `describe` read from the cluster.
#[derive(Clone, Debug)]
pub struct Observed {
    pub job: String,
    pub namespace: String,
    pub dljob: Option<DLJob>,
    pub pods: Vec<Pod>,
    /// The member StatefulSets and Jobs: (kind, name).
    pub workloads: Vec<(String, String)>,
    /// The namespace's Events, or why they could not be read.
    pub events: Result<Vec<Event>, String>,
    /// For a DLJob with a TensorBoard: its Deployment (None: not there),
    /// or why it could not be read. None when not asked for.
    pub tensorboard: Option<Result<Option<Deployment>, String>>,
}

/// `dljob describe`.
pub fn run(args: &DescribeArgs) -> anyhow::Result<ExitCode> {
    super::runtime()?.block_on(async {
        let (client, ns) = super::connect(args.namespace.as_deref(), &args.cluster).await?;
        let observed = observe(&client, &ns, &args.job).await?;
        print!("{}", render(&observed, Timestamp::now()));
        Ok(ExitCode::SUCCESS)
    })
}

/// Reads the job: a job with neither a DLJob nor pods is an error. The
/// workloads and Events are extras: when they cannot be read, the rest is
/// still shown.
pub async fn observe(client: &kube::Client, ns: &str, job: &str) -> anyhow::Result<Observed> {
    let dljob = super::get_dljob(client, ns, job).await?;
    let pods = super::list_pods(client, ns, job, None).await?;
    if dljob.is_none() && pods.is_empty() {
        return Err(super::no_such_job(job, ns));
    }
    let members = ListParams::default().labels(&super::pod_selector(job, None));
    let mut workloads = Vec::new();
    if let Ok(list) = Api::<StatefulSet>::namespaced(client.clone(), ns)
        .list_metadata(&members)
        .await
    {
        workloads.extend(
            list.items
                .iter()
                .map(|o| ("StatefulSet".to_owned(), o.name_any())),
        );
    }
    if let Ok(list) = Api::<Job>::namespaced(client.clone(), ns)
        .list_metadata(&members)
        .await
    {
        workloads.extend(list.items.iter().map(|o| ("Job".to_owned(), o.name_any())));
    }
    let events = Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .map_err(|e| super::api_message(&e));
    let tensorboard = match dljob.as_ref().and_then(|d| d.spec.tensorboard.as_ref()) {
        None => None,
        Some(_) => Some(
            Api::<Deployment>::namespaced(client.clone(), ns)
                .get_opt(&crate::tensorboard::name(job))
                .await
                .map_err(|e| super::api_message(&e)),
        ),
    };
    Ok(Observed {
        job: job.to_owned(),
        namespace: ns.to_owned(),
        dljob,
        pods,
        workloads,
        events,
        tensorboard,
    })
}

/// Said where the spec would be when the pods exist but the DLJob does not.
const NO_DLJOB: &str = "not found: the reconciler has not created it \
     (is `dljob serve` running with a cluster connection?)";

/// The screen.
pub fn render(o: &Observed, now: Timestamp) -> String {
    let mut out = String::new();
    field(&mut out, "Name", &o.job);
    field(&mut out, "Namespace", &o.namespace);
    let topology = match &o.dljob {
        None => {
            field(&mut out, "DLJob", NO_DLJOB);
            None
        }
        Some(dljob) => {
            let gone = |pod: &str| !o.pods.iter().any(|p| p.name_any() == pod);
            summary(&mut out, dljob, o.tensorboard.as_ref(), &gone, now)
        }
    };
    out.push('\n');
    pods(&mut out, &o.pods, topology);
    out.push('\n');
    events(&mut out, o, now);
    out
}

/// The DLJob's spec and status; returns the topology it declares.
fn summary(
    out: &mut String,
    dljob: &DLJob,
    tensorboard: Option<&Result<Option<Deployment>, String>>,
    gone: &dyn Fn(&str) -> bool,
    now: Timestamp,
) -> Option<Topology> {
    let spec = &dljob.spec;
    let replicas = spec.replicas.to_string();
    let topology = Some(spec.replicas.clone());
    field(out, "Framework", &spec.framework.to_string());
    field(out, "Topology", &replicas);
    field(out, "Policies", &policies(spec));
    if let Some(tb) = &spec.tensorboard {
        tensorboard_field(out, dljob, &tb.to_string(), tensorboard);
    }
    let Some(status) = &dljob.status else {
        field(out, "Phase", "Pending (no status yet)");
        return topology;
    };
    field(out, "Phase", status.phase.as_str());
    if !status.active.is_empty() {
        let active = format!(
            "{} (framework containers running / replicas)",
            status.active
        );
        field(out, "Active", &active);
    }
    let restarts = format!(
        "{} (backoff limit {})",
        status.restarts, spec.policies.backoff_limit
    );
    field(out, "Restarts", &restarts);
    if let Some(t) = &status.start_time {
        field(out, "Started", &format!("{} ({} ago)", t.0, age(t.0, now)));
    }
    if let Some(t) = &status.completion_time {
        field(
            out,
            "Completed",
            &format!("{} ({} ago)", t.0, age(t.0, now)),
        );
    }
    if let Some(c) = &status.coordinator {
        let finished = status.phase.is_finished();
        field(out, "Coordinator", &coordinator(c, finished, gone));
    }
    out.push('\n');
    conditions(out, &status.conditions, now);
    if !status.replicas.is_empty() {
        out.push('\n');
        replica_counts(out, status, topology.clone());
    }
    topology
}

/// `chief-0 (pod tf-ps-chief) exited 0 (Completed)`; of a finished job
/// whose coordinator's pod was removed since, `(pod tf-ps-chief, since
/// deleted)`.
fn coordinator(c: &CoordinatorStatus, finished: bool, gone: &dyn Fn(&str) -> bool) -> String {
    let mut s = c.replica.clone();
    match &c.pod {
        Some(p) if finished && gone(p) => {
            let _ = write!(s, " (pod {p}, since deleted)");
        }
        Some(p) => {
            let _ = write!(s, " (pod {p})");
        }
        None if finished => s.push_str(", no pod when the job finished"),
        None => s.push_str(", no pod yet"),
    }
    match c.exit_code {
        Some(code) => {
            let _ = write!(s, " exited {code}");
            if let Some(r) = &c.reason {
                let _ = write!(s, " ({r})");
            }
        }
        None if c.pod.is_some() => s.push_str(", no exit yet"),
        None => {}
    }
    s
}

/// Each role's counts, roles in the topology's order.
fn replica_counts(out: &mut String, status: &DLJobStatus, topology: Option<Topology>) {
    // An elastic job's: each role's replicas now (its elastic role's as
    // resized, the others' their count), first.
    let elastic = status.replicas.values().any(|r| r.replicas.is_some());
    let rows: Vec<Vec<String>> = ReplicaOrder::new(topology.clone())
        .roles(status.replicas.keys().map(String::as_str))
        .into_iter()
        .filter_map(|role| {
            let r = status.replicas.get(&role)?;
            let now = r
                .replicas
                .or_else(|| topology.as_ref().and_then(|t| t.count(&role)))
                .map_or_else(|| "?".to_owned(), |n| n.to_string());
            let mut row = vec![role];
            if elastic {
                row.push(now);
            }
            row.extend([
                r.pending.to_string(),
                r.active.to_string(),
                r.succeeded.to_string(),
                r.failed.to_string(),
                r.restarts.to_string(),
            ]);
            Some(row)
        })
        .collect();
    let mut header = vec!["ROLE"];
    if elastic {
        header.push("REPLICAS");
    }
    header.extend(["PENDING", "ACTIVE", "SUCCEEDED", "FAILED", "RESTARTS"]);
    out.push_str("Replicas:\n");
    out.push_str(&table::render("  ", &header, &rows));
}

/// The job's TensorBoard: where it reads, whether it runs, and how to
/// reach it (`kubectl port-forward` to its Service) while it does.
fn tensorboard_field(
    out: &mut String,
    dljob: &DLJob,
    logs: &str,
    deployment: Option<&Result<Option<Deployment>, String>>,
) {
    let namespace = dljob.metadata.namespace.as_deref().unwrap_or_default();
    let name = crate::tensorboard::name(dljob.metadata.name.as_deref().unwrap_or_default());
    let reach = format!(
        "kubectl port-forward -n {namespace} svc/{name} {port}, then open http://localhost:{port}",
        port = crate::tensorboard::PORT
    );
    let (state, reachable) = match (crate::tensorboard::recorded_volume(dljob), deployment) {
        (Err(why), _) => (format!("not run: {why}"), false),
        (Ok(_), None) => return,
        (Ok(_), Some(Err(why))) => (
            format!("cannot read deployment/{name}: {}", cell(why)),
            true,
        ),
        (Ok(_), Some(Ok(None))) => (
            format!("not created yet (the reconciler creates deployment/{name})"),
            false,
        ),
        (Ok(_), Some(Ok(Some(d)))) => match d.spec.replicas.unwrap_or(1) {
            0 => (
                "stopped: the job finished (its logs stay on the volume)".to_owned(),
                false,
            ),
            wanted => {
                let ready = d.status.as_ref().and_then(|s| s.ready_replicas);
                (
                    format!("running ({}/{wanted} ready)", ready.unwrap_or(0)),
                    true,
                )
            }
        },
    };
    field(out, "TensorBoard", &format!("{logs}, {state}"));
    if reachable {
        field(out, "", &reach);
    }
}

/// `Name:` and its value, values aligned; an empty name continues the
/// field above.
fn field(out: &mut String, name: &str, value: &str) {
    let label = if name.is_empty() {
        String::new()
    } else {
        format!("{name}:")
    };
    let _ = writeln!(out, "{label:<14}{value}");
}

/// The policies as their annotations name them.
fn policies(spec: &JobSpec) -> String {
    let p = &spec.policies;
    let mut parts = vec![
        format!("restart-policy={}", p.restart),
        format!("backoff-limit={}", p.backoff_limit),
        format!("clean-pod-policy={}", p.clean_pod),
    ];
    if let Some(n) = p.ttl_seconds_after_finished {
        parts.push(format!("ttl-seconds-after-finished={n}"));
    }
    if let Some(n) = p.active_deadline_seconds {
        parts.push(format!("active-deadline-seconds={n}"));
    }
    if spec.gang != crate::gang::NONE {
        parts.push(format!("gang={}", spec.gang));
    }
    if let Some(q) = &spec.queue {
        parts.push(format!("queue={q}"));
    }
    parts.join(" ")
}

fn conditions(
    out: &mut String,
    conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    now: Timestamp,
) {
    if conditions.is_empty() {
        out.push_str("Conditions:   <none>\n");
        return;
    }
    let rows: Vec<Vec<String>> = conditions
        .iter()
        .map(|c| {
            vec![
                cell(&c.type_),
                cell(&c.status),
                cell(&c.reason),
                age(c.last_transition_time.0, now),
                cell(&c.message),
            ]
        })
        .collect();
    out.push_str("Conditions:\n");
    out.push_str(&table::render(
        "  ",
        &["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"],
        &rows,
    ));
}

/// Every member pod, by role (topology order) then index.
fn pods(out: &mut String, pods: &[Pod], topology: Option<Topology>) {
    if pods.is_empty() {
        out.push_str("Pods:         <none>\n");
        return;
    }
    let mut members: Vec<(ReplicaPod, &Pod)> =
        pods.iter().map(|p| (ReplicaPod::of(p), p)).collect();
    let order = match topology {
        Some(t) => ReplicaOrder::new(Some(t)),
        None => ReplicaOrder::of_pods(members.iter().map(|(r, _)| r)),
    };
    members.sort_by(|a, b| order.key(&a.0).cmp(&order.key(&b.0)));
    let rows: Vec<Vec<String>> = members
        .iter()
        .map(|(r, pod)| {
            let status = replica::container_status(pod, r.container.as_deref());
            let waiting =
                status.and_then(|s| s.state.as_ref()?.waiting.as_ref()?.reason.as_deref());
            let phase = if pod.metadata.deletion_timestamp.is_some() {
                "Terminating".to_owned()
            } else {
                let phase = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.phase.as_deref())
                    .unwrap_or("Pending");
                match waiting {
                    Some(w) => format!("{phase} ({w})"),
                    None => phase.to_owned(),
                }
            };
            let last_exit = status.and_then(replica::last_exit).map_or_else(
                || "-".to_owned(),
                |(code, reason)| match reason {
                    Some(r) => format!("{code} ({r})"),
                    None => code.to_string(),
                },
            );
            vec![
                if r.role.is_empty() {
                    "?".to_owned()
                } else {
                    r.role.clone()
                },
                r.index.map_or_else(|| "?".to_owned(), |i| i.to_string()),
                r.name.clone(),
                pod.spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_else(|| "<none>".to_owned()),
                phase,
                status.map_or_else(|| "-".to_owned(), |s| s.restart_count.to_string()),
                cell(&last_exit),
            ]
        })
        .collect();
    out.push_str("Pods:\n");
    out.push_str(&table::render(
        "  ",
        &[
            "ROLE",
            "INDEX",
            "POD",
            "NODE",
            "PHASE",
            "RESTARTS",
            "LAST EXIT",
        ],
        &rows,
    ));
    name_waits(out, members.iter().map(|(_, pod)| *pod));
}

/// The pods whose wait for their names ([`c::WAIT_FOR_NAMES_CONTAINER`])
/// gave up or cannot run, in the pods' order; nothing when none did.
fn name_waits<'a>(out: &mut String, pods: impl Iterator<Item = &'a Pod>) {
    let rows: Vec<Vec<String>> = pods
        .filter_map(|pod| {
            let status = pod
                .status
                .as_ref()?
                .init_container_statuses
                .as_ref()?
                .iter()
                .find(|s| s.name == c::WAIT_FOR_NAMES_CONTAINER)?;
            let problem = crate::wait_names::problem(status)?;
            Some(vec![pod.name_any(), cell(&problem)])
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    out.push_str(&format!(
        "\nName waits that failed (kubectl logs POD -c {}):\n",
        c::WAIT_FOR_NAMES_CONTAINER
    ));
    out.push_str(&table::render("  ", &["POD", "WAIT"], &rows));
}

/// When an Event last happened, and how many times.
fn event_time(e: &Event) -> Option<Timestamp> {
    e.series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref())
        .map(|t| t.0)
        .or_else(|| e.last_timestamp.as_ref().map(|t| t.0))
        .or_else(|| e.event_time.as_ref().map(|t| t.0))
        .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

fn event_count(e: &Event) -> i32 {
    e.series
        .as_ref()
        .and_then(|s| s.count)
        .or(e.count)
        .unwrap_or(1)
}

/// The recent Events about the DLJob, its pods and its workloads, oldest
/// first.
fn events(out: &mut String, o: &Observed, now: Timestamp) {
    let events = match &o.events {
        Ok(events) => events,
        Err(why) => {
            let _ = writeln!(out, "Events:       cannot list them: {}", cell(why));
            return;
        }
    };
    let mut about: HashSet<(&str, &str)> = HashSet::new();
    about.insert(("DLJob", &o.job));
    for p in &o.pods {
        about.insert(("Pod", p.metadata.name.as_deref().unwrap_or_default()));
    }
    for (kind, name) in &o.workloads {
        about.insert((kind, name));
    }
    let mut ours: Vec<&Event> = events
        .iter()
        .filter(|e| {
            let r = &e.involved_object;
            about.contains(&(
                r.kind.as_deref().unwrap_or_default(),
                r.name.as_deref().unwrap_or_default(),
            ))
        })
        .collect();
    if ours.is_empty() {
        out.push_str("Events:       <none>\n");
        return;
    }
    ours.sort_by_key(|e| (event_time(e), e.metadata.name.clone()));
    let total = ours.len();
    let recent = &ours[total.saturating_sub(RECENT_EVENTS)..];
    let rows: Vec<Vec<String>> = recent
        .iter()
        .map(|e| {
            let mut when = event_time(e).map_or_else(|| "?".to_owned(), |t| age(t, now));
            let count = event_count(e);
            if count > 1 {
                let _ = write!(when, " (x{count})");
            }
            let r = &e.involved_object;
            vec![
                when,
                cell(e.type_.as_deref().unwrap_or_default()),
                cell(e.reason.as_deref().unwrap_or_default()),
                format!(
                    "{}/{}",
                    r.kind.as_deref().unwrap_or_default().to_lowercase(),
                    r.name.as_deref().unwrap_or_default()
                ),
                cell(e.message.as_deref().unwrap_or_default()),
            ]
        })
        .collect();
    if total > recent.len() {
        let _ = writeln!(out, "Events (the last {} of {total}):", recent.len());
    } else {
        out.push_str("Events:\n");
    }
    out.push_str(&table::render(
        "  ",
        &["AGE", "TYPE", "REASON", "OBJECT", "MESSAGE"],
        &rows,
    ));
}
