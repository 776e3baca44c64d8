//! Criterion benches of the reconciler's status computation (issue:
//! evidence, points 1 and 3). Run with `cargo bench --bench status`;
//! figures go in BENCHMARKS.md.
//!
//! - `status/next/*`: the pure status function on one 1000-pod job
//!   (target ≤ 1 ms).
//! - `status/resync-1000-jobs/*`: recomputing the status of 1000 jobs of 8
//!   pods, as the controller does for every job after a resync: `next`
//!   alone, and the whole in-memory path of a reconcile (plan from the
//!   DLJob spec, members from the index, pods from the trimmed reflector
//!   store, `next`, comparing with the stored status).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use dljob::config::Config;
use dljob::contract::{Policies, Topology};
use dljob::crd::{DLJob, DLJobStatus, JobSpec, Phase};
use dljob::frameworks;
use dljob::member::PodOwner;
use dljob::object::Kind;
use dljob::reconciler::controller;
use dljob::reconciler::index::MemberIndex;
use dljob::reconciler::status::{
    self, Action, ContainerState, Exit, FrameworkContainer, JobPlan, Observed, ObservedPod,
    PodRestart, Workload,
};
use dljob::reconciler::{observe, trim};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use serde_json::json;

const NS: &str = "ml";

fn now() -> Timestamp {
    Timestamp::from_second(1_700_000_000).unwrap()
}

fn plan(framework: &str, topology: &str) -> JobPlan {
    JobPlan {
        framework: frameworks::by_name(framework).unwrap(),
        topology: Topology::parse(topology).unwrap(),
        policies: Policies {
            backoff_limit: 100,
            ..Policies::default()
        },
        elastic: None,
        name: "mnist".to_owned(),
        scale_to: None,
        fixed_total: false,
    }
}

/// A container id, as containerd reports it.
fn container_id(pod: &str, run: u32) -> String {
    let h = pod
        .bytes()
        .chain(run.to_le_bytes())
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
    format!("containerd://{h:016x}{h:016x}{h:016x}{h:016x}")
}

fn exit(pod: &str, code: i32, reason: &str, run: u32) -> Exit {
    Exit {
        code: Some(code),
        reason: Some(reason.to_owned()),
        run: container_id(pod, run),
    }
}

/// A workload-owned pod `name` of `role`/`index` whose framework container
/// is in `state`, after `last` (a previous run ended by the kubelet).
fn pod(
    name: String,
    role: &str,
    index: u32,
    owner: PodOwner,
    restart_policy: PodRestart,
    state: ContainerState,
    last: Option<Exit>,
) -> ObservedPod {
    let phase = match &state {
        ContainerState::Waiting => "Pending",
        ContainerState::Running => "Running",
        ContainerState::Terminated(e) if e.code == Some(0) => "Succeeded",
        ContainerState::Terminated(_) => "Failed",
    };
    ObservedPod {
        uid: format!("0d6f{index:08x}-{role}-4c1e-9a7e-5b3f2a1c8d90"),
        role: role.to_owned(),
        index,
        owner,
        restart_policy,
        phase: phase.to_owned(),
        reason: None,
        deleting: false,
        container: Some(FrameworkContainer {
            state,
            restart_count: u32::from(last.is_some()),
            last,
        }),
        gated: false,
        marked: false,
        name_wait: None,
        name,
    }
}

/// The status a reconciler converges to on `observed`: `next` applied
/// until nothing changes (what the stored status is at a resync).
fn settled(plan: &JobPlan, observed: &Observed) -> DLJobStatus {
    let mut status = status::next(plan, observed, None, Some(1), now()).status;
    for _ in 0..4 {
        status = status::next(plan, observed, Some(&status), Some(1), now()).status;
    }
    status
}

/// pytorch master=1,worker=999 on StatefulSets, running: 5 workers run
/// again after an OOM kill (`lastState` exit 137).
fn pytorch_1000() -> (JobPlan, Observed) {
    let plan = plan("pytorch", "master=1,worker=999");
    let mut pods = vec![pod(
        "mnist-master-0".into(),
        "master",
        0,
        PodOwner::StatefulSet,
        PodRestart::Always,
        ContainerState::Running,
        None,
    )];
    for i in 0..999 {
        let name = format!("mnist-worker-{i}");
        let (state, last) = match i {
            100 | 300 | 500 | 700 | 900 => (
                ContainerState::Running,
                Some(exit(&name, 137, "OOMKilled", 0)),
            ),
            _ => (ContainerState::Running, None),
        };
        pods.push(pod(
            name,
            "worker",
            i,
            PodOwner::StatefulSet,
            PodRestart::Always,
            state,
            last,
        ));
    }
    let workloads = vec![
        Workload::StatefulSet {
            name: "mnist-master".into(),
            uid: format!("uid-{}", "mnist-master"),
            marked: false,
            role: "master".into(),
            replicas: 1,
            offset: None,
        },
        Workload::StatefulSet {
            name: "mnist-worker".into(),
            uid: format!("uid-{}", "mnist-worker"),
            marked: false,
            role: "worker".into(),
            replicas: 999,
            offset: None,
        },
    ];
    (
        plan,
        Observed {
            pods,
            workloads,
            saved: vec![],
            owned: Default::default(),
        },
    )
}

/// tensorflow chief=1,ps=50,worker=949: the chief (an Indexed Job) and 40
/// workers (an Indexed Job, restartPolicy OnFailure) have exited 0, 9
/// workers run again after an OOM kill, the parameter servers (a
/// StatefulSet) still run. `chief_done: false` is the same job a moment
/// before the chief exited.
fn tensorflow_1000(chief_done: bool) -> (JobPlan, Observed) {
    let plan = plan("tensorflow", "chief=1,ps=50,worker=949");
    let chief = if chief_done {
        ContainerState::Terminated(exit("mnist-chief-0-x7k2p", 0, "Completed", 0))
    } else {
        ContainerState::Running
    };
    let mut pods = vec![pod(
        "mnist-chief-0-x7k2p".into(),
        "chief",
        0,
        PodOwner::Job,
        PodRestart::Never,
        chief,
        None,
    )];
    for i in 0..50 {
        pods.push(pod(
            format!("mnist-ps-{i}"),
            "ps",
            i,
            PodOwner::StatefulSet,
            PodRestart::Always,
            ContainerState::Running,
            None,
        ));
    }
    for i in 0..949 {
        let name = format!("mnist-worker-{i}-q{:04}", i * 37 % 10_000);
        let (state, last) = match i {
            _ if i % 24 == 1 && chief_done => (
                ContainerState::Terminated(exit(&name, 0, "Completed", 1)),
                None,
            ),
            _ if i % 100 == 7 => (
                ContainerState::Running,
                Some(exit(&name, 137, "OOMKilled", 0)),
            ),
            _ => (ContainerState::Running, None),
        };
        pods.push(pod(
            name,
            "worker",
            i,
            PodOwner::Job,
            PodRestart::OnFailure,
            state,
            last,
        ));
    }
    let workloads = vec![
        Workload::Job {
            name: "mnist-chief".into(),
            uid: format!("uid-{}", "mnist-chief"),
            marked: false,
            role: "chief".into(),
            suspended: false,
            finished: false,
            completions: Some(1),
            parallelism: 1,
            offset: None,
        },
        Workload::StatefulSet {
            name: "mnist-ps".into(),
            uid: format!("uid-{}", "mnist-ps"),
            marked: false,
            role: "ps".into(),
            replicas: 50,
            offset: None,
        },
        Workload::Job {
            name: "mnist-worker".into(),
            uid: format!("uid-{}", "mnist-worker"),
            marked: false,
            role: "worker".into(),
            suspended: false,
            finished: false,
            completions: Some(949),
            parallelism: 949,
            offset: None,
        },
    ];
    (
        plan,
        Observed {
            pods,
            workloads,
            saved: vec![],
            owned: Default::default(),
        },
    )
}

fn bench_one_job(c: &mut Criterion) {
    let mut g = c.benchmark_group("status/next");

    let (plan, observed) = pytorch_1000();
    assert_eq!(observed.pods.len(), 1000);
    let steady = settled(&plan, &observed);
    let out = status::next(&plan, &observed, Some(&steady), Some(1), now());
    assert_eq!((out.status.phase, out.new_restarts), (Phase::Running, 0));
    assert_eq!(out.status, steady, "a resync of an unchanged job");
    g.bench_function("pytorch-1000-pods/unchanged", |b| {
        b.iter(|| status::next(&plan, black_box(&observed), Some(&steady), Some(1), now()))
    });

    // The same pods seen for the first time since the restarts: 5 exits
    // counted, phase Restarting.
    let mut before = steady.clone();
    before.counted_exits.clear();
    for r in before.replicas.values_mut() {
        r.restarts = 0;
    }
    let out = status::next(&plan, &observed, Some(&before), Some(1), now());
    assert_eq!((out.status.phase, out.new_restarts), (Phase::Restarting, 5));
    g.bench_function("pytorch-1000-pods/5-new-restarts", |b| {
        b.iter(|| status::next(&plan, black_box(&observed), Some(&before), Some(1), now()))
    });

    let (plan, running) = tensorflow_1000(false);
    let (_, finished) = tensorflow_1000(true);
    assert_eq!(finished.pods.len(), 1000);
    let previous = settled(&plan, &running);
    assert_eq!(previous.phase, Phase::Running);
    let out = status::next(&plan, &finished, Some(&previous), Some(1), now());
    assert_eq!(out.status.phase, Phase::Succeeded);
    assert_eq!(out.status.replicas["worker"].succeeded, 40);
    assert_eq!(
        out.actions[..3],
        [
            Action::SuspendJob {
                name: "mnist-chief".into(),
                uid: "uid-mnist-chief".into(),
            },
            Action::ScaleStatefulSetToZero {
                name: "mnist-ps".into(),
                uid: "uid-mnist-ps".into(),
                from: 50
            },
            Action::SuspendJob {
                name: "mnist-worker".into(),
                uid: "uid-mnist-worker".into(),
            },
        ]
    );
    // What the run leaves (the chief and the 40 workers that exited 0; the
    // others go with their workloads) is marked as the finished run's.
    assert_eq!(out.actions.len(), 3 + 41);
    assert!(out.actions[3..].iter().all(|a| matches!(
        a,
        Action::MarkFinished {
            kind: dljob::object::Kind::Pod,
            ..
        }
    )));
    g.bench_function("tensorflow-1000-pods/chief-succeeded", |b| {
        b.iter(|| status::next(&plan, black_box(&finished), Some(&previous), Some(1), now()))
    });
    g.finish();
}

// ---- 1000 jobs × 8 pods, from the reflector stores ------------------------

const JOBS: usize = 1000;
const TOPOLOGY: &str = "master=1,worker=7";

fn member_meta(job: &str, role: &str) -> serde_json::Value {
    json!({
        "labels": {"dljob.dev/job": job, "dljob.dev/role": role},
        "annotations": {"dljob.dev/framework": "pytorch", "dljob.dev/replicas": TOPOLOGY},
    })
}

/// A StatefulSet pod of `job` as the watch delivers it: running, or
/// running again after an OOM kill.
fn member_pod(job: &str, role: &str, index: u32, restarted: bool) -> Pod {
    let name = format!("{job}-{role}-{index}");
    let mut meta = member_meta(job, role);
    meta["name"] = json!(name);
    meta["namespace"] = json!(NS);
    meta["uid"] = json!(format!("uid-{name}"));
    meta["labels"]["apps.kubernetes.io/pod-index"] = json!(index.to_string());
    meta["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "StatefulSet",
        "name": format!("{job}-{role}"), "uid": "o", "controller": true}]);
    let last = if restarted {
        json!({"terminated": {"exitCode": 137, "reason": "OOMKilled",
            "containerID": container_id(&name, 0), "finishedAt": "2023-11-14T22:00:00Z"}})
    } else {
        json!({})
    };
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": meta,
        "spec": {"restartPolicy": "Always", "nodeName": "node-1",
            "containers": [{"name": "pytorch", "image": "train"}, {"name": "sidecar", "image": "log"}]},
        "status": {"phase": "Running", "containerStatuses": [
            {"name": "pytorch", "image": "train", "imageID": "", "ready": true,
             "restartCount": u32::from(restarted),
             "state": {"running": {"startedAt": "2023-11-14T22:05:00Z"}}, "lastState": last},
            {"name": "sidecar", "image": "log", "imageID": "", "ready": true, "restartCount": 0,
             "state": {"running": {"startedAt": "2023-11-14T22:00:00Z"}}}
        ]}
    }))
    .unwrap()
}

fn member_statefulset(job: &str, role: &str, size: u32) -> StatefulSet {
    let template = member_meta(job, role);
    let mut meta = template.clone();
    meta["name"] = json!(format!("{job}-{role}"));
    meta["namespace"] = json!(NS);
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta,
        "spec": {"replicas": size, "serviceName": job,
            "selector": {"matchLabels": {"dljob.dev/job": job, "dljob.dev/role": role}},
            "template": {"metadata": template, "spec": {"containers": [{"name": "pytorch"}]}}}
    }))
    .unwrap()
}

fn dljob(name: &str) -> DLJob {
    let mut j = DLJob::new(
        name,
        JobSpec::new("pytorch", Topology::parse(TOPOLOGY).unwrap(), 23456),
    );
    j.metadata.namespace = Some(NS.into());
    j.metadata.uid = Some(format!("uid-{name}"));
    j.metadata.generation = Some(1);
    j
}

/// What a reconcile reads, in memory: the trimmed reflector stores and
/// the member index, as the watches fill them.
struct Cluster {
    index: MemberIndex,
    pods: Store<Pod>,
    statefulsets: Store<StatefulSet>,
    dljobs: Vec<DLJob>,
}

fn cluster() -> Cluster {
    let config = Config::default();
    let index = MemberIndex::default();
    let mut pods: Writer<Pod> = Writer::default();
    let mut statefulsets: Writer<StatefulSet> = Writer::default();
    let mut dljobs = Vec::with_capacity(JOBS);
    for j in 0..JOBS {
        let job = format!("job-{j}");
        for (role, size) in [("master", 1), ("worker", 7)] {
            let mut sts = member_statefulset(&job, role, size);
            trim::trim_statefulset(&mut sts);
            let ev = watcher::Event::Apply(sts);
            statefulsets.apply_watcher_event(&ev);
            index.apply_event(&ev, &config);
            for i in 0..size {
                // One job in ten has a worker that ran again after an OOM kill.
                let restarted = role == "worker" && i == 3 && j % 10 == 0;
                let mut pod = member_pod(&job, role, i, restarted);
                trim::trim_pod(&mut pod);
                let ev = watcher::Event::Apply(pod);
                pods.apply_watcher_event(&ev);
                index.apply_event(&ev, &config);
            }
        }
        dljobs.push(dljob(&job));
    }
    Cluster {
        index,
        pods: pods.as_reader(),
        statefulsets: statefulsets.as_reader(),
        dljobs,
    }
}

/// [`controller::observe_members`] without the client it takes its stores
/// from.
fn observe_members(c: &Cluster, namespace: &str, job: &str) -> Observed {
    let mut observed = Observed::default();
    for entry in c.index.members(namespace, job, None) {
        let name = &entry.member.name;
        match entry.member.kind {
            Kind::Pod => {
                if let Some(pod) = c.pods.get(&ObjectRef::new(name).within(namespace)) {
                    observed.pods.extend(observe::observe_pod(
                        &entry.member,
                        entry.framework_container.as_deref(),
                        &pod,
                    ));
                }
            }
            Kind::StatefulSet => {
                let key = ObjectRef::new(name).within(namespace);
                if let Some(sts) = c.statefulsets.get(&key) {
                    observed
                        .workloads
                        .push(observe::observe_statefulset(&entry.member.role, &sts));
                }
            }
            Kind::Job => {}
        }
    }
    observed
}

/// One resync of every job in `dljobs`: the in-memory part of each
/// reconcile. Returns how many statuses would be written.
fn resync(c: &Cluster, dljobs: &[DLJob]) -> usize {
    let mut changed = 0;
    for job in dljobs {
        let plan = controller::plan_of(job).unwrap();
        let observed = observe_members(c, NS, job.metadata.name.as_deref().unwrap());
        let out = status::next(
            &plan,
            &observed,
            job.status.as_ref(),
            job.metadata.generation,
            now(),
        );
        if job.status.as_ref() != Some(&out.status) {
            changed += 1;
        }
        black_box(out);
    }
    changed
}

fn bench_resync(c: &mut Criterion) {
    let mut cluster = cluster();
    assert_eq!(cluster.pods.len(), JOBS * 8);
    let first_sight = cluster.dljobs.clone();
    // The stored statuses a resync finds: settled.
    let mut inputs = Vec::with_capacity(JOBS);
    for i in 0..JOBS {
        let job = &cluster.dljobs[i];
        let plan = controller::plan_of(job).unwrap();
        let observed = observe_members(&cluster, NS, job.metadata.name.as_deref().unwrap());
        assert_eq!((observed.pods.len(), observed.workloads.len()), (8, 2));
        let status = settled(&plan, &observed);
        assert_eq!(status.phase, Phase::Running);
        cluster.dljobs[i].status = Some(status.clone());
        inputs.push((plan, observed, status));
    }
    assert_eq!(
        inputs.iter().map(|(_, _, s)| s.restarts).sum::<u32>(),
        (JOBS / 10) as u32
    );
    assert_eq!(
        resync(&cluster, &cluster.dljobs),
        0,
        "a resync of unchanged jobs writes nothing"
    );
    assert_eq!(resync(&cluster, &first_sight), JOBS);

    let mut g = c.benchmark_group("status/resync-1000-jobs");
    g.bench_function("next", |b| {
        b.iter(|| {
            for (plan, observed, previous) in &inputs {
                black_box(status::next(
                    plan,
                    black_box(observed),
                    Some(previous),
                    Some(1),
                    now(),
                ));
            }
        })
    });
    g.bench_function("plan+observe+next", |b| {
        b.iter(|| resync(&cluster, black_box(&cluster.dljobs)))
    });
    // The first resync after the DLJobs were created: no status yet, every
    // one is written.
    g.bench_function("plan+observe+next/no-status-yet", |b| {
        b.iter(|| resync(&cluster, black_box(&first_sight)))
    });
    g.finish();
}

criterion_group!(benches, bench_one_job, bench_resync);
criterion_main!(benches);
