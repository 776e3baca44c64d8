//! The status function end to end: observed members in, status and
//! actions out.

use super::*;
use crate::contract::{CleanPodPolicy, RestartScope};
use crate::crd::{JobRestart, PendingRecreate};
use crate::frameworks;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + s).unwrap()
}

fn plan(framework: &str, topology: &str) -> JobPlan {
    JobPlan {
        framework: frameworks::by_name(framework).unwrap(),
        topology: Topology::parse(topology).unwrap(),
        policies: Policies::default(),
        elastic: None,
        name: "mnist".to_owned(),
        scale_to: None,
        fixed_total: false,
    }
}

fn exit(code: i32, reason: &str, run: &str) -> Exit {
    Exit {
        code: Some(code),
        reason: Some(reason.to_owned()),
        run: run.to_owned(),
    }
}

/// A pod of `role`/`index`, named `role-index`, whose framework
/// container is in `state`.
fn pod(role: &str, index: u32, owner: PodOwner, state: ContainerState) -> ObservedPod {
    let name = format!("{role}-{index}");
    ObservedPod {
        uid: format!("uid-{name}"),
        role: role.to_owned(),
        index,
        owner,
        restart_policy: match owner {
            PodOwner::StatefulSet => PodRestart::Always,
            _ => PodRestart::Never,
        },
        phase: match &state {
            ContainerState::Waiting => "Pending",
            ContainerState::Running => "Running",
            ContainerState::Terminated(e) if e.code == Some(0) => "Succeeded",
            ContainerState::Terminated(_) => "Failed",
        }
        .to_owned(),
        reason: None,
        deleting: false,
        gated: false,
        container: Some(FrameworkContainer {
            state,
            last: None,
            restart_count: 0,
        }),
        marked: false,
        name_wait: None,
        name,
    }
}

/// The mark a finished run leaves on pod `name`.
fn mark(name: &str) -> Action {
    Action::MarkFinished {
        kind: Kind::Pod,
        name: name.into(),
        uid: format!("uid-{name}"),
    }
}

/// What the controller does after a SavePod: each pending recreate
/// gets the PodTemplate it was saved in (`t-<pod>`); returns them, as
/// the listing then finds them.
fn save_all(status: &mut DLJobStatus) -> Vec<SavedPod> {
    status
        .pending_recreates
        .iter_mut()
        .map(|r| {
            let saved = SavedPod {
                name: format!("t-{}", r.name),
                uid: format!("t-uid-{}", r.name),
                digest: Some(format!("sha256:{}", r.name)),
            };
            r.saved = Some(saved.clone());
            saved
        })
        .collect()
}

/// A bare pod whose framework container exited 0 in run `run`.
fn completed(role: &str, index: u32, run: &str) -> ObservedPod {
    pod(
        role,
        index,
        PodOwner::None,
        ContainerState::Terminated(exit(0, "Completed", run)),
    )
}

/// The message of the condition `type_` where it is True.
fn true_message(out: &Outcome, type_: &str) -> Option<String> {
    out.status
        .conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
        .map(|c| c.message.clone())
}

fn running(role: &str, index: u32) -> ObservedPod {
    pod(role, index, PodOwner::None, ContainerState::Running)
}

fn observed(pods: Vec<ObservedPod>) -> Observed {
    Observed {
        pods,
        ..Observed::default()
    }
}

/// A StatefulSet member `name` of `role` with `replicas`, unmarked, the
/// whole role (no offset).
pub(super) fn statefulset(name: &str, role: &str, replicas: u32) -> Workload {
    Workload::StatefulSet {
        name: name.into(),
        uid: format!("uid-{name}"),
        marked: false,
        role: role.into(),
        replicas,
        offset: None,
    }
}

fn counts(pending: u32, active: u32, succeeded: u32, failed: u32, restarts: u32) -> RoleStatus {
    RoleStatus {
        replicas: None,
        pending,
        active,
        succeeded,
        failed,
        restarts,
    }
}

fn condition(type_: &str, status: &str, reason: &str, message: &str, at: Timestamp) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        last_transition_time: Time(at),
        observed_generation: None,
    }
}

const CREATED_MSG: &str = "the DLJob was created from its members' annotations";

/// restart-scope Job: one member's retryable exit restarts every member,
/// counted once, however many exit with it; what the doomed pods do
/// while they go (a peer exiting 1) does not fail the job; the restart
/// is over once they are all gone and bare ones were recreated.
#[test]
fn a_job_scope_restart_deletes_every_member_and_counts_once() {
    let mut p = plan("pytorch", "master=1,worker=2");
    p.policies.restart_scope = RestartScope::Job;
    let failed = |role: &str, i: u32, code: i32, run: &str| {
        pod(
            role,
            i,
            PodOwner::None,
            ContainerState::Terminated(exit(code, "Error", run)),
        )
    };
    let sts_worker = pod("worker", 0, PodOwner::StatefulSet, ContainerState::Running);
    let running_start = next(
        &p,
        &observed(vec![
            running("master", 0),
            sts_worker.clone(),
            running("worker", 1),
        ]),
        None,
        Some(1),
        t(0),
    );
    // worker-1 (a bare pod) is OOM-killed.
    let out = next(
        &p,
        &observed(vec![
            running("master", 0),
            sts_worker.clone(),
            failed("worker", 1, 137, "c1"),
        ]),
        Some(&running_start.status),
        Some(1),
        t(10),
    );
    assert_eq!(out.status.phase, Phase::Restarting);
    assert_eq!(out.status.restarts, 1);
    assert_eq!(out.new_restarts, 1);
    // Every member goes; a bare pod's manifest is saved first.
    let act = |a: &Action| match a {
        Action::SavePod { name, .. } => format!("save {name}"),
        Action::DeletePod { name, .. } => format!("delete {name}"),
        other => panic!("unexpected {other:?}"),
    };
    assert_eq!(
        out.actions.iter().map(act).collect::<Vec<_>>(),
        [
            "save master-0",
            "delete master-0",
            "delete worker-0",
            "save worker-1",
            "delete worker-1"
        ]
    );
    let cause = "worker-1 (pod worker-1) exited with exit code 137 (Error)";
    assert_eq!(
        out.status.job_restart,
        Some(JobRestart {
            cause: cause.into(),
            uids: vec![
                "uid-master-0".into(),
                "uid-worker-0".into(),
                "uid-worker-1".into()
            ],
        })
    );
    // Both bare pods will be recreated from their spec.
    let recreated: Vec<&str> = out
        .status
        .pending_recreates
        .iter()
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(recreated, ["master-0", "worker-1"]);
    assert_eq!(out.events.len(), 1);
    assert_eq!(
        out.events[0].note,
        format!("restarting every member (restart scope Job) after {cause}: 1 of 3 restarts used")
    );
    // Seen in one reconcile, the worker's 137 and the master's 1 (its
    // peer died) restart the job rather than fail it.
    let together = next(
        &p,
        &observed(vec![
            failed("master", 0, 1, "c9"),
            sts_worker.clone(),
            failed("worker", 1, 137, "c1"),
        ]),
        Some(&running_start.status),
        Some(1),
        t(10),
    );
    assert_eq!(together.status.phase, Phase::Restarting);
    assert_eq!(together.status.restarts, 1);
    // Next reconcile: the master exited 1 as its peer died, the
    // StatefulSet pod is terminating. Nothing more is counted or failed.
    let mut terminating = sts_worker.clone();
    terminating.deleting = true;
    let again = next(
        &p,
        &observed(vec![
            failed("master", 0, 1, "c2"),
            terminating,
            failed("worker", 1, 137, "c1"),
        ]),
        Some(&out.status),
        Some(1),
        t(12),
    );
    assert_eq!(again.status.phase, Phase::Restarting);
    assert_eq!(again.status.restarts, 1);
    assert_eq!(again.new_restarts, 0);
    assert!(again.events.is_empty());
    // All gone: the bare pods are created again from their saved
    // manifests, the restart is over.
    let mut recorded = again.status.clone();
    let saved = Observed {
        saved: save_all(&mut recorded),
        ..observed(vec![])
    };
    let gone = next(&p, &saved, Some(&recorded), Some(1), t(15));
    assert_eq!(gone.status.job_restart, None);
    let created: Vec<&str> = gone
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::CreatePod { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(created, ["master-0", "worker-1"]);
    assert_eq!(gone.status.restarts, 1);
}

/// mpi: the launcher's scheduling gate stays while a worker does not
/// run, and the condition says so; once both run it is removed, once.
#[test]
fn the_launcher_is_released_when_every_worker_runs() {
    let p = plan("mpi", "launcher=1,worker=2");
    let gated_launcher = || ObservedPod {
        gated: true,
        ..pod("launcher", 0, PodOwner::None, ContainerState::Waiting)
    };
    let waiting = next(
        &p,
        &observed(vec![
            gated_launcher(),
            running("worker", 0),
            pod("worker", 1, PodOwner::StatefulSet, ContainerState::Waiting),
        ]),
        None,
        Some(1),
        t(0),
    );
    assert!(waiting.actions.is_empty(), "{:?}", waiting.actions);
    let gate = |out: &Outcome| {
        out.status
            .conditions
            .iter()
            .find(|c| c.type_ == LAUNCHER_GATED)
            .cloned()
    };
    assert_eq!(
        gate(&waiting),
        Some(condition(
            LAUNCHER_GATED,
            "True",
            "WaitingForWorkers",
            "launcher-0 waits (scheduling gate dljob.dev/workers-ready) until every other member runs: 1 of 2 run",
            t(0)
        ))
    );
    let released = next(
        &p,
        &observed(vec![
            gated_launcher(),
            running("worker", 0),
            running("worker", 1),
        ]),
        Some(&waiting.status),
        Some(1),
        t(5),
    );
    assert_eq!(
        released.actions,
        vec![Action::RemoveSchedulingGate {
            name: "launcher-0".into(),
            uid: "uid-launcher-0".into()
        }]
    );
    assert_eq!(
        gate(&released),
        Some(condition(
            LAUNCHER_GATED,
            "False",
            "WorkersRunning",
            "all 2 other members run: the launcher's scheduling gate dljob.dev/workers-ready is removed",
            t(5)
        ))
    );
    // The gate is gone: nothing more to do, the condition stays.
    let started = next(
        &p,
        &observed(vec![
            running("launcher", 0),
            running("worker", 0),
            running("worker", 1),
        ]),
        Some(&released.status),
        Some(1),
        t(9),
    );
    assert!(started.actions.is_empty(), "{:?}", started.actions);
    assert_eq!(gate(&started).unwrap().last_transition_time, Time(t(5)));
    // A job that fails while its launcher still waits says so.
    let failed = next(
        &p,
        &observed(vec![
            gated_launcher(),
            running("worker", 0),
            pod(
                "worker",
                1,
                PodOwner::None,
                ContainerState::Terminated(exit(1, "Error", "c1")),
            ),
        ]),
        Some(&waiting.status),
        Some(1),
        t(7),
    );
    assert_eq!(failed.status.phase, Phase::Failed);
    assert_eq!(
        gate(&failed).map(|c| (c.status, c.reason)),
        Some(("False".to_owned(), "JobFinished".to_owned()))
    );
    // Frameworks without a gated role never get the condition.
    let py = next(
        &plan("pytorch", "master=1,worker=1"),
        &observed(vec![running("master", 0), running("worker", 0)]),
        None,
        Some(1),
        t(0),
    );
    assert_eq!(gate(&py), None);
}

#[test]
fn first_sight_with_pods_starting_is_pending() {
    let p = plan("pytorch", "master=1,worker=2");
    let obs = observed(vec![
        running("master", 0),
        pod("worker", 0, PodOwner::None, ContainerState::Waiting),
    ]);
    let out = next(&p, &obs, None, Some(1), t(0));
    assert_eq!(
        out.status,
        DLJobStatus {
            phase: Phase::Pending,
            conditions: vec![condition("Created", "True", "Created", CREATED_MSG, t(0))],
            replicas: BTreeMap::from([
                ("master".into(), counts(0, 1, 0, 0, 0)),
                ("worker".into(), counts(1, 0, 0, 0, 0)),
            ]),
            active: "1/3".into(),
            selector: None,
            restarts: 0,
            coordinator: Some(CoordinatorStatus {
                replica: "master-0".into(),
                pod: Some("master-0".into()),
                exit_code: None,
                reason: None,
            }),
            start_time: Some(Time(t(0))),
            completion_time: None,
            observed_generation: Some(1),
            counted_exits: BTreeMap::new(),
            pending_recreates: vec![],
            ssh_secret: None,
            job_restart: None,
        }
    );
    assert_eq!(out.actions, vec![]);
    assert_eq!(
        out.events,
        vec![JobEvent {
            warning: false,
            reason: "Pending".into(),
            note: "1 of 3 replicas running".into()
        }]
    );
}

#[test]
fn all_replicas_running_is_running_and_a_second_pass_changes_nothing() {
    let p = plan("pytorch", "master=1,worker=2");
    let obs = observed(vec![
        running("master", 0),
        running("worker", 0),
        running("worker", 1),
    ]);
    let first = next(&p, &obs, None, Some(1), t(0));
    assert_eq!(first.status.phase, Phase::Running);
    assert_eq!(
        first.status.conditions,
        vec![
            condition("Created", "True", "Created", CREATED_MSG, t(0)),
            condition("Running", "True", "Running", "all 3 replicas started", t(0)),
        ]
    );
    assert_eq!(first.status.active, "3/3");
    let second = next(&p, &obs, Some(&first.status), Some(1), t(30));
    assert_eq!(second.status, first.status);
    assert_eq!(second.actions, vec![]);
    assert_eq!(second.events, vec![]);
    assert_eq!(second.requeue_after, None);
}

#[test]
fn coordinator_exit_0_succeeds_and_stops_running_bare_pods() {
    let p = plan("pytorch", "master=1,worker=2");
    let obs = observed(vec![
        completed("master", 0, "c1"),
        completed("worker", 0, "c2"),
        running("worker", 1),
    ]);
    let prev = next(
        &p,
        &observed(vec![
            running("master", 0),
            running("worker", 0),
            running("worker", 1),
        ]),
        None,
        Some(1),
        t(0),
    )
    .status;
    let out = next(&p, &obs, Some(&prev), Some(1), t(100));
    let s = &out.status;
    assert_eq!(s.phase, Phase::Succeeded);
    assert_eq!(s.completion_time, Some(Time(t(100))));
    assert_eq!(
        s.coordinator,
        Some(CoordinatorStatus {
            replica: "master-0".into(),
            pod: Some("master-0".into()),
            exit_code: Some(0),
            reason: Some("Completed".into()),
        })
    );
    let msg = "master-0 (pod master-0) exited with exit code 0 (Completed)";
    assert_eq!(
        s.conditions,
        vec![
            condition("Created", "True", "Created", CREATED_MSG, t(0)),
            condition("Running", "False", "Succeeded", msg, t(100)),
            condition("Succeeded", "True", "CoordinatorSucceeded", msg, t(100)),
        ]
    );
    assert_eq!(s.replicas["worker"], counts(0, 1, 1, 0, 0));
    // clean-pod-policy Running: only the bare pod that still runs; the
    // finished ones stay, marked as this run's.
    assert_eq!(
        out.actions,
        vec![
            Action::DeletePod {
                name: "worker-1".into(),
                uid: "uid-worker-1".into()
            },
            mark("master-0"),
            mark("worker-0"),
        ]
    );
    assert_eq!(
        out.events,
        vec![JobEvent {
            warning: false,
            reason: "CoordinatorSucceeded".into(),
            note: msg.into()
        }]
    );
    // Finished is final: a later pass keeps the status as it is.
    let again = next(&p, &obs, Some(s), Some(1), t(200));
    assert_eq!(&again.status, s);
    assert_eq!(again.events, vec![]);
}

#[test]
fn non_coordinator_exit_0_is_only_counted() {
    let p = plan("pytorch", "master=1,worker=2");
    let obs = observed(vec![
        running("master", 0),
        completed("worker", 0, "c"),
        running("worker", 1),
    ]);
    let out = next(&p, &obs, None, None, t(0));
    assert_eq!(out.status.phase, Phase::Pending);
    assert_eq!(out.status.replicas["worker"], counts(0, 1, 1, 0, 0));
    assert_eq!(out.actions, vec![]);
}

#[test]
fn permanent_exit_of_any_member_fails_the_job() {
    let p = plan("tensorflow", "chief=1,ps=1,worker=1");
    let obs = observed(vec![
        running("chief", 0),
        running("ps", 0),
        pod(
            "worker",
            0,
            PodOwner::None,
            ContainerState::Terminated(exit(1, "Error", "c")),
        ),
    ]);
    let out = next(&p, &obs, None, None, t(5));
    assert_eq!(out.status.phase, Phase::Failed);
    assert_eq!(out.status.completion_time, Some(Time(t(5))));
    let msg = "worker-0 (pod worker-0) exited with exit code 1 (Error)";
    assert_eq!(
        out.status.conditions.last(),
        Some(&condition("Failed", "True", "ExitCode", msg, t(5)))
    );
    assert_eq!(out.status.restarts, 0);
    // The parameter server never exits on its own: it is stopped. The
    // failed worker stays, marked as this run's.
    assert_eq!(
        out.actions,
        vec![
            Action::DeletePod {
                name: "chief-0".into(),
                uid: "uid-chief-0".into()
            },
            Action::DeletePod {
                name: "ps-0".into(),
                uid: "uid-ps-0".into()
            },
            mark("worker-0"),
        ]
    );
    assert!(out.events[0].warning);
}

#[test]
fn retryable_exit_of_a_bare_pod_deletes_counts_and_recreates_it_once() {
    let p = plan("pytorch", "master=1,worker=1");
    let failed = pod(
        "worker",
        0,
        PodOwner::None,
        ContainerState::Terminated(exit(137, "OOMKilled", "c1")),
    );
    let obs = observed(vec![running("master", 0), failed.clone()]);
    let out = next(&p, &obs, None, None, t(0));
    let s = &out.status;
    assert_eq!(s.phase, Phase::Restarting);
    assert_eq!(s.restarts, 1);
    assert_eq!(s.replicas["worker"], counts(0, 0, 0, 1, 1));
    assert_eq!(
        s.counted_exits,
        BTreeMap::from([("worker-0".into(), "uid-worker-0/c1".into())])
    );
    assert_eq!(
        s.pending_recreates,
        vec![PendingRecreate {
            name: "worker-0".into(),
            uid: "uid-worker-0".into(),
            saved: None,
        }]
    );
    // Its manifest is saved (outside the status), then it is deleted.
    let save = Action::SavePod {
        name: "worker-0".into(),
        uid: "uid-worker-0".into(),
    };
    let delete = Action::DeletePod {
        name: "worker-0".into(),
        uid: "uid-worker-0".into(),
    };
    assert_eq!(out.actions, vec![save.clone(), delete.clone()]);
    assert_eq!(out.new_restarts, 1);
    assert_eq!(
        s.conditions.last(),
        Some(&condition(
            "Restarting",
            "True",
            "Restarting",
            "retrying after a retryable exit: 1 of 3 restarts used",
            t(0)
        ))
    );

    // The same observation again (the save failed): no second count,
    // the save and the delete are repeated.
    let again = next(&p, &obs, Some(s), None, t(1));
    assert_eq!(&again.status, s);
    assert_eq!(again.actions, vec![save, delete.clone()]);
    assert_eq!(again.new_restarts, 0);
    // Saved and recorded (the controller), the delete lost: only the
    // delete is repeated.
    let mut recorded = s.clone();
    let templates = save_all(&mut recorded);
    let again = next(&p, &obs, Some(&recorded), None, t(1));
    assert_eq!(again.actions, vec![delete]);
    let s = &recorded;

    // Terminating: wait, create nothing.
    let mut terminating = failed.clone();
    terminating.deleting = true;
    let out = next(
        &p,
        &observed(vec![running("master", 0), terminating]),
        Some(s),
        None,
        t(2),
    );
    assert_eq!(out.actions, vec![]);
    assert_eq!(out.status.restarts, 1);

    // Gone: recreate it from its saved spec, the PodTemplate the status
    // names (one the listing does not find is not used).
    let saved = Observed {
        saved: templates.clone(),
        ..observed(vec![running("master", 0)])
    };
    let pending = out.status.clone();
    let out = next(&p, &saved, Some(&pending), None, t(3));
    assert_eq!(
        out.actions,
        vec![Action::CreatePod {
            name: "worker-0".into(),
            saved: templates[0].clone(),
        }]
    );
    assert_eq!(out.status.phase, Phase::Restarting);
    assert!(out.events.is_empty());

    // Had its saved manifest gone (deleted by hand), it could not be:
    // given up and said, and the job runs on without it.
    let lost = next(
        &p,
        &observed(vec![running("master", 0)]),
        Some(&pending),
        None,
        t(3),
    );
    assert_eq!(lost.actions, vec![]);
    assert_eq!(lost.status.pending_recreates, vec![]);
    assert_eq!(
        lost.events,
        vec![JobEvent {
            warning: true,
            reason: "RecreateLost".into(),
            note: "bare pod(s) worker-0 cannot be recreated: the manifest dljob saved to recreate them from (a PodTemplate owned by this DLJob) is gone or was changed since; create them again from your manifests".into(),
        }]
    );

    // Back with a new uid: nothing pending, Running again, and the
    // saved manifest goes.
    let mut back = running("worker", 0);
    back.uid = "uid-2".into();
    let out = next(
        &p,
        &Observed {
            saved: templates.clone(),
            ..observed(vec![running("master", 0), back])
        },
        Some(&out.status),
        None,
        t(4),
    );
    assert_eq!(
        out.actions,
        vec![Action::DeleteSaved {
            saved: templates[0].clone()
        }]
    );
    assert_eq!(out.status.pending_recreates, vec![]);
    assert_eq!(out.status.counted_exits, BTreeMap::new());
    assert_eq!(out.status.phase, Phase::Running);
    assert_eq!(out.status.restarts, 1);
    assert_eq!(
        out.status.conditions[1..],
        [
            condition("Running", "True", "Running", "all 2 replicas started", t(4)),
            condition(
                "Restarting",
                "False",
                "Running",
                "all 2 replicas started",
                t(4)
            ),
        ]
    );
}

#[test]
fn exit_in_last_state_after_a_kubelet_restart_counts_once_without_delete() {
    let p = plan("jax", "worker=2");
    let mut w1 = pod("worker", 1, PodOwner::StatefulSet, ContainerState::Running);
    w1.container.as_mut().unwrap().last = Some(exit(143, "Error", "c1"));
    w1.container.as_mut().unwrap().restart_count = 1;
    let obs = Observed {
        saved: vec![],
        owned: Default::default(),
        pods: vec![
            pod("worker", 0, PodOwner::StatefulSet, ContainerState::Running),
            w1,
        ],
        workloads: vec![statefulset("w", "worker", 2)],
    };
    let out = next(&p, &obs, None, None, t(0));
    assert_eq!(out.status.phase, Phase::Restarting);
    assert_eq!(out.status.replicas["worker"], counts(0, 2, 0, 0, 1));
    assert_eq!(out.actions, vec![]);
    let again = next(&p, &obs, Some(&out.status), None, t(1));
    assert_eq!(again.status.restarts, 1);
    assert_eq!(again.status.phase, Phase::Running);
}

#[test]
fn coordinator_exit_0_in_last_state_of_a_statefulset_pod_succeeds_and_scales_down() {
    let p = plan("jax", "worker=2");
    let mut w0 = pod("worker", 0, PodOwner::StatefulSet, ContainerState::Running);
    w0.container.as_mut().unwrap().last = Some(exit(0, "Completed", "c1"));
    let obs = Observed {
        saved: vec![],
        owned: Default::default(),
        pods: vec![
            w0,
            pod("worker", 1, PodOwner::StatefulSet, ContainerState::Running),
        ],
        workloads: vec![statefulset("train", "worker", 2)],
    };
    let out = next(&p, &obs, None, None, t(0));
    assert_eq!(out.status.phase, Phase::Succeeded);
    assert_eq!(
        out.status.coordinator.as_ref().unwrap().pod.as_deref(),
        Some("worker-0")
    );
    assert_eq!(
        out.actions,
        vec![Action::ScaleStatefulSetToZero {
            name: "train".into(),
            uid: format!("uid-{}", "train"),
            from: 2
        }]
    );
    // Scaled: nothing more to do.
    let obs = Observed {
        saved: vec![],
        owned: Default::default(),
        pods: vec![],
        workloads: vec![statefulset("train", "worker", 0)],
    };
    assert_eq!(
        next(&p, &obs, Some(&out.status), None, t(1)).actions,
        vec![]
    );
}

#[test]
fn on_failure_pods_are_restarted_by_the_kubelet_never_pods_are_deleted() {
    let p = plan("pytorch", "master=1,worker=1");
    for (policy, deleted) in [(PodRestart::OnFailure, false), (PodRestart::Never, true)] {
        let mut w = pod(
            "worker",
            0,
            PodOwner::Job,
            ContainerState::Terminated(exit(137, "OOMKilled", "c")),
        );
        w.restart_policy = policy;
        w.phase = "Running".into();
        let out = next(
            &p,
            &observed(vec![running("master", 0), w]),
            None,
            None,
            t(0),
        );
        assert_eq!(out.status.restarts, 1, "{policy:?}");
        assert_eq!(out.status.phase, Phase::Restarting, "{policy:?}");
        let expected = if deleted {
            vec![Action::DeletePod {
                name: "worker-0".into(),
                uid: "uid-worker-0".into(),
            }]
        } else {
            vec![]
        };
        assert_eq!(out.actions, expected, "{policy:?}");
        // An owned pod is recreated by its owner, not from a manifest.
        assert_eq!(out.status.pending_recreates, vec![]);
    }
}

#[test]
fn restarts_beyond_the_backoff_limit_fail_the_job() {
    let mut p = plan("pytorch", "master=1,worker=1");
    p.policies.backoff_limit = 1;
    let first = pod(
        "worker",
        0,
        PodOwner::Job,
        ContainerState::Terminated(exit(137, "OOMKilled", "c1")),
    );
    let out = next(
        &p,
        &observed(vec![running("master", 0), first]),
        None,
        None,
        t(0),
    );
    assert_eq!(out.status.restarts, 1);
    assert_eq!(out.status.phase, Phase::Restarting);
    let mut second = pod(
        "worker",
        0,
        PodOwner::Job,
        ContainerState::Terminated(exit(137, "OOMKilled", "c2")),
    );
    second.uid = "uid-2".into();
    let out = next(
        &p,
        &observed(vec![running("master", 0), second]),
        Some(&out.status),
        None,
        t(10),
    );
    assert_eq!(out.status.phase, Phase::Failed);
    assert_eq!(out.status.restarts, 1);
    assert_eq!(
        out.status.conditions.last(),
        Some(&condition(
            "Failed",
            "True",
            "BackoffLimitExceeded",
            "worker-0 (pod worker-0) exited with exit code 137 (OOMKilled); the backoff limit of 1 restarts is reached",
            t(10)
        ))
    );
    // Running: the bare master still runs and is stopped; the worker
    // that exited stays, marked.
    assert_eq!(
        out.actions,
        vec![
            Action::DeletePod {
                name: "master-0".into(),
                uid: "uid-master-0".into()
            },
            Action::MarkFinished {
                kind: Kind::Pod,
                name: "worker-0".into(),
                uid: "uid-2".into()
            }
        ]
    );
}

#[test]
fn restart_policy_never_fails_on_a_retryable_exit() {
    let mut p = plan("pytorch", "master=1");
    p.policies.restart = RestartPolicy::Never;
    let m = pod(
        "master",
        0,
        PodOwner::None,
        ContainerState::Terminated(exit(137, "OOMKilled", "c")),
    );
    let out = next(&p, &observed(vec![m]), None, None, t(0));
    assert_eq!(out.status.phase, Phase::Failed);
    assert_eq!(
        out.status.conditions.last().unwrap().reason,
        "RestartPolicyNever"
    );
    assert_eq!(out.actions, vec![mark("master-0")]);
}

#[test]
fn active_deadline_fails_the_job_and_requeues_until_then() {
    let mut p = plan("pytorch", "master=1");
    p.policies.active_deadline_seconds = Some(60);
    let obs = observed(vec![running("master", 0)]);
    let out = next(&p, &obs, None, None, t(0));
    assert_eq!(out.status.phase, Phase::Running);
    assert_eq!(out.requeue_after, Some(Duration::from_secs(60)));
    let out = next(&p, &obs, Some(&out.status), None, t(45));
    assert_eq!(out.requeue_after, Some(Duration::from_secs(15)));
    let out = next(&p, &obs, Some(&out.status), None, t(60));
    assert_eq!(out.status.phase, Phase::Failed);
    assert_eq!(
        out.status.conditions.last(),
        Some(&condition(
            "Failed",
            "True",
            "DeadlineExceeded",
            "the job ran longer than its active deadline of 60s",
            t(60)
        ))
    );
    assert_eq!(
        out.actions,
        vec![Action::DeletePod {
            name: "master-0".into(),
            uid: "uid-master-0".into()
        }]
    );
}

#[test]
fn coordinator_missing_or_not_started_keeps_the_job_pending() {
    let p = plan("mxnet", "scheduler=1,server=1,worker=1");
    let out = next(
        &p,
        &observed(vec![running("server", 0), running("worker", 0)]),
        None,
        None,
        t(0),
    );
    assert_eq!(out.status.phase, Phase::Pending);
    assert_eq!(
        out.status.coordinator,
        Some(CoordinatorStatus {
            replica: "scheduler-0".into(),
            pod: None,
            exit_code: None,
            reason: None
        })
    );
    let mut creating = pod("scheduler", 0, PodOwner::None, ContainerState::Waiting);
    creating.container = None; // no container status yet
    let out = next(
        &p,
        &observed(vec![creating, running("server", 0), running("worker", 0)]),
        None,
        None,
        t(0),
    );
    assert_eq!(out.status.phase, Phase::Pending);
    assert_eq!(out.status.replicas["scheduler"], counts(1, 0, 0, 0, 0));
    assert_eq!(
        out.status.coordinator.unwrap().pod.as_deref(),
        Some("scheduler-0")
    );
}

#[test]
fn statefulset_ordinals_are_counted_per_role_and_a_done_job_completes_by_itself() {
    let p = plan("tensorflow", "chief=1,ps=2,worker=2");
    let obs = Observed {
        saved: vec![],
        owned: Default::default(),
        pods: vec![
            pod(
                "chief",
                0,
                PodOwner::Job,
                ContainerState::Terminated(exit(0, "Completed", "c")),
            ),
            pod("ps", 0, PodOwner::StatefulSet, ContainerState::Running),
            pod("ps", 1, PodOwner::StatefulSet, ContainerState::Running),
            pod("worker", 0, PodOwner::StatefulSet, ContainerState::Running),
            pod("worker", 1, PodOwner::StatefulSet, ContainerState::Waiting),
        ],
        workloads: vec![
            Workload::Job {
                name: "chief".into(),
                uid: format!("uid-{}", "chief"),
                marked: false,
                role: "chief".into(),
                suspended: false,
                finished: false,
                completions: Some(1),
                parallelism: 1,
                offset: None,
            },
            statefulset("ps", "ps", 2),
            statefulset("worker", "worker", 2),
        ],
    };
    let out = next(&p, &obs, None, None, t(0));
    assert_eq!(out.status.phase, Phase::Succeeded);
    assert_eq!(
        out.status.replicas,
        BTreeMap::from([
            ("chief".into(), counts(0, 0, 1, 0, 0)),
            ("ps".into(), counts(0, 2, 0, 0, 0)),
            ("worker".into(), counts(1, 1, 0, 0, 0)),
        ])
    );
    assert_eq!(out.status.active, "3/5");
    assert_eq!(
        out.actions,
        vec![
            Action::ScaleStatefulSetToZero {
                name: "ps".into(),
                uid: format!("uid-{}", "ps"),
                from: 2
            },
            Action::ScaleStatefulSetToZero {
                name: "worker".into(),
                uid: format!("uid-{}", "worker"),
                from: 2
            },
            // The chief's Job has every index succeeded: it completes by
            // itself, not suspended, and it and its pod (with its log)
            // stay, marked; the sets' pods go with them.
            mark("chief-0"),
            Action::MarkFinished {
                kind: Kind::Job,
                name: "chief".into(),
                uid: "uid-chief".into(),
            },
        ]
    );
}

/// A worker Job at the job's end: worker 0's framework container exited 0
/// but its kubelet still says Running, worker 1 still runs. Suspending now
/// would delete worker 0's pod and its log: the suspension waits (looking
/// again in 2 s) until the pod is Succeeded, for at most 30 s after the
/// job finished; then it is suspended anyway (a container may keep the pod
/// Running).
#[test]
fn a_jobs_suspension_waits_for_a_finished_pod_to_settle() {
    let p = plan("pytorch", "master=1,worker=2");
    let mut settling = pod(
        "worker",
        0,
        PodOwner::Job,
        ContainerState::Terminated(exit(0, "Completed", "w0")),
    );
    settling.phase = "Running".into();
    let obs = |worker0: ObservedPod| Observed {
        saved: vec![],
        owned: Default::default(),
        pods: vec![
            completed("master", 0, "m"),
            worker0,
            pod("worker", 1, PodOwner::Job, ContainerState::Running),
        ],
        workloads: vec![Workload::Job {
            name: "worker".into(),
            uid: "uid-worker".into(),
            marked: false,
            role: "worker".into(),
            suspended: false,
            finished: false,
            completions: Some(2),
            parallelism: 2,
            offset: None,
        }],
    };
    let suspend = Action::SuspendJob {
        name: "worker".into(),
        uid: "uid-worker".into(),
    };
    let first = next(&p, &obs(settling.clone()), None, None, t(0));
    assert_eq!(first.status.phase, Phase::Succeeded);
    assert!(!first.actions.contains(&suspend), "{:?}", first.actions);
    assert_eq!(first.requeue_after, Some(Duration::from_secs(2)));
    // Still settling 10 s later: still waiting.
    let later = next(&p, &obs(settling.clone()), Some(&first.status), None, t(10));
    assert!(!later.actions.contains(&suspend), "{:?}", later.actions);
    // Succeeded: suspended at once; the Job controller keeps a Succeeded pod.
    let mut settled = settling.clone();
    settled.phase = "Succeeded".into();
    let done = next(&p, &obs(settled), Some(&first.status), None, t(12));
    assert!(done.actions.contains(&suspend), "{:?}", done.actions);
    assert!(
        done.actions.contains(&mark("worker-0")),
        "{:?}",
        done.actions
    );
    // Never settling: suspended once 30 s have passed.
    let late = next(&p, &obs(settling.clone()), Some(&first.status), None, t(30));
    assert!(late.actions.contains(&suspend), "{:?}", late.actions);
    // Every index's framework exited 0 but a sidecar keeps both pods
    // Running: the Job is not left to complete (it never would), it waits
    // 30 s like any other, then is suspended.
    let mut sidecar = settling.clone();
    sidecar.index = 1;
    sidecar.name = "worker-1".into();
    sidecar.uid = "uid-worker-1".into();
    let mut both = obs(settling);
    both.pods[2] = sidecar;
    let early = next(&p, &both, Some(&first.status), None, t(5));
    assert!(!early.actions.contains(&suspend), "{:?}", early.actions);
    assert!(
        !early.actions.iter().any(|a| matches!(
            a,
            Action::MarkFinished {
                kind: Kind::Job,
                ..
            }
        )),
        "{:?}",
        early.actions
    );
    let late = next(&p, &both, Some(&first.status), None, t(31));
    assert!(late.actions.contains(&suspend), "{:?}", late.actions);
}

/// Once the job finished, the status keeps its coordinator as it ended:
/// the clean-up may delete the pod, and the status still says who exited
/// how.
#[test]
fn a_finished_jobs_coordinator_outlives_its_pod() {
    let p = plan("pytorch", "master=1,worker=1");
    let with_pods = Observed {
        saved: vec![],
        owned: Default::default(),
        pods: vec![
            pod(
                "master",
                0,
                PodOwner::None,
                ContainerState::Terminated(exit(1, "Error", "m")),
            ),
            pod("worker", 0, PodOwner::None, ContainerState::Running),
        ],
        workloads: vec![],
    };
    let failed = next(&p, &with_pods, None, None, t(0));
    assert_eq!(failed.status.phase, Phase::Failed);
    let coordinator = failed.status.coordinator.clone().unwrap();
    assert_eq!(
        (coordinator.pod.as_deref(), coordinator.exit_code),
        (Some("master-0"), Some(1))
    );
    let cleaned = next(&p, &Observed::default(), Some(&failed.status), None, t(5));
    assert_eq!(cleaned.status.coordinator, Some(coordinator));
}

#[test]
fn clean_pod_policy_all_removes_finished_pods_and_none_leaves_everything() {
    let mut p = plan("pytorch", "master=1,worker=1");
    let obs = observed(vec![completed("master", 0, "c"), running("worker", 0)]);
    p.policies.clean_pod = CleanPodPolicy::All;
    assert_eq!(
        next(&p, &obs, None, None, t(0)).actions,
        vec![
            Action::DeletePod {
                name: "master-0".into(),
                uid: "uid-master-0".into()
            },
            Action::DeletePod {
                name: "worker-0".into(),
                uid: "uid-worker-0".into()
            },
        ]
    );
    // None leaves everything running, each pod marked as this run's
    // (a DLJob made for the job later leaves them out), once.
    p.policies.clean_pod = CleanPodPolicy::None;
    let done = next(&p, &obs, None, None, t(0));
    assert_eq!(done.actions, vec![mark("master-0"), mark("worker-0")]);
    let mut marked = obs.clone();
    marked.pods.iter_mut().for_each(|p| p.marked = true);
    assert_eq!(
        next(&p, &marked, Some(&done.status), None, t(1)).actions,
        vec![]
    );
}

/// What a `None` policy leaves running of the run's workloads is marked
/// too; a workload stopped is not (started again, it makes a new run).
#[test]
fn a_finished_run_marks_the_workloads_it_leaves_running() {
    let mut p = plan("tensorflow", "chief=1,ps=1");
    p.policies.clean_pod = CleanPodPolicy::None;
    let sts = |name: &str, replicas| Workload::StatefulSet {
        name: name.into(),
        uid: format!("uid-{name}"),
        marked: false,
        role: "ps".into(),
        replicas,
        offset: None,
    };
    let obs = Observed {
        pods: vec![
            completed("chief", 0, "c"),
            pod("ps", 0, PodOwner::StatefulSet, ContainerState::Running),
        ],
        workloads: vec![sts("ps", 1), sts("old-ps", 0)],
        saved: vec![],
        owned: Default::default(),
    };
    let out = next(&p, &obs, None, None, t(0));
    assert_eq!(out.status.phase, Phase::Succeeded);
    assert_eq!(
        out.actions,
        vec![
            mark("chief-0"),
            mark("ps-0"),
            Action::MarkFinished {
                kind: Kind::StatefulSet,
                name: "ps".into(),
                uid: "uid-ps".into()
            },
        ]
    );
    // Under Running the set is scaled to 0 instead, its pod goes with
    // it, and only the chief stays, marked.
    p.policies.clean_pod = CleanPodPolicy::Running;
    assert_eq!(
        next(&p, &obs, None, None, t(0)).actions,
        vec![
            Action::ScaleStatefulSetToZero {
                name: "ps".into(),
                uid: "uid-ps".into(),
                from: 1
            },
            mark("chief-0"),
        ]
    );
}

#[test]
fn ttl_after_finished_deletes_the_dljob() {
    let mut p = plan("pytorch", "master=1");
    p.policies.ttl_seconds_after_finished = Some(100);
    let obs = observed(vec![completed("master", 0, "c")]);
    let done = next(&p, &obs, None, None, t(0));
    assert_eq!(done.requeue_after, Some(Duration::from_secs(100)));
    assert_eq!(done.actions, vec![mark("master-0")]);
    let mut marked = obs.clone();
    marked.pods[0].marked = true;
    let later = next(&p, &marked, Some(&done.status), None, t(100));
    assert_eq!(later.actions, vec![Action::DeleteDLJob]);
}

#[test]
fn exit_code_classes() {
    use ExitClass::*;
    for (code, policy, class) in [
        (Some(0), RestartPolicy::ExitCode, Success),
        (Some(1), RestartPolicy::ExitCode, Permanent),
        (Some(127), RestartPolicy::ExitCode, Permanent),
        (Some(128), RestartPolicy::ExitCode, Retryable),
        (Some(137), RestartPolicy::ExitCode, Retryable),
        (Some(255), RestartPolicy::ExitCode, Retryable),
        (None, RestartPolicy::ExitCode, Retryable),
        (Some(137), RestartPolicy::Never, Permanent),
        (Some(0), RestartPolicy::Never, Success),
    ] {
        assert_eq!(classify(code, policy), class, "{code:?} {policy:?}");
    }
}

#[test]
fn evicted_pod_without_exit_is_retryable() {
    let p = plan("pytorch", "master=1,worker=1");
    let mut w = running("worker", 0);
    w.container = None;
    w.phase = "Failed".into();
    w.reason = Some("Evicted".into());
    let out = next(
        &p,
        &observed(vec![running("master", 0), w]),
        None,
        None,
        t(0),
    );
    assert_eq!(out.status.phase, Phase::Restarting);
    assert_eq!(out.status.counted_exits["worker-0"], "uid-worker-0/pod");
    assert_eq!(
        out.actions,
        vec![
            Action::SavePod {
                name: "worker-0".into(),
                uid: "uid-worker-0".into()
            },
            Action::DeletePod {
                name: "worker-0".into(),
                uid: "uid-worker-0".into()
            }
        ]
    );
}

/// What keeping the owned objects found is an input like the members:
/// the Secret created is recorded, the unavailable and foreign objects set
/// their conditions with one Warning each, and once they are gone the
/// conditions turn False without another Event.
#[test]
fn the_owned_objects_outcome_sets_the_secret_and_both_conditions() {
    let p = plan("jax", "worker=1");
    let mut obs = Observed {
        pods: vec![pod(
            "worker",
            0,
            PodOwner::StatefulSet,
            ContainerState::Running,
        )],
        owned: OwnedOutcome {
            created_secret: Some("mnist-ssh".into()),
            unavailable: vec!["the cluster does not serve PodGroup".into()],
            refused: vec!["ConfigMap/mnist-volcano was refused: configmaps \"mnist-volcano\" is forbidden: exceeded quota".into()],
            foreign: vec!["Service/mnist exists and is controlled by Deployment \"x\"".into()],
            lost_secret: None,
        },
        ..Default::default()
    };
    let out = next(&p, &obs, None, None, t(0));
    assert_eq!(out.status.ssh_secret.as_deref(), Some("mnist-ssh"));
    let condition = |s: &DLJobStatus, type_: &str| {
        s.conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| (c.status.clone(), c.message.clone()))
    };
    assert_eq!(
        condition(&out.status, OWNED_UNAVAILABLE),
        Some(("True".into(), "the cluster does not serve PodGroup".into()))
    );
    assert_eq!(
        condition(&out.status, OWNERSHIP_CONFLICT),
        Some((
            "True".into(),
            "Service/mnist exists and is controlled by Deployment \"x\"".into()
        ))
    );
    let warnings: Vec<&str> = out
        .events
        .iter()
        .filter(|e| e.warning)
        .map(|e| e.reason.as_str())
        .collect();
    assert_eq!(
        warnings,
        [OWNED_UNAVAILABLE, OWNERSHIP_CONFLICT, OWNED_REFUSED]
    );
    assert_eq!(
        condition(&out.status, OWNED_REFUSED),
        Some((
            "True".into(),
            "ConfigMap/mnist-volcano was refused: configmaps \"mnist-volcano\" is forbidden: exceeded quota".into()
        ))
    );

    obs.owned = OwnedOutcome::default();
    let again = next(&p, &obs, Some(&out.status), None, t(1));
    // Recorded once, kept after.
    assert_eq!(again.status.ssh_secret.as_deref(), Some("mnist-ssh"));
    assert_eq!(
        condition(&again.status, OWNED_UNAVAILABLE).map(|c| c.0),
        Some("False".into())
    );
    assert_eq!(
        condition(&again.status, OWNERSHIP_CONFLICT).map(|c| c.0),
        Some("False".into())
    );
    assert_eq!(
        condition(&again.status, OWNED_REFUSED).map(|c| c.0),
        Some("False".into())
    );
    assert!(
        again.events.iter().all(|e| !e.warning),
        "{:?}",
        again.events
    );
}

/// A job whose coordinator ran and exited 0 between two looks (a launcher
/// that lived 2 s): its conditions say it ran, not Pending → Succeeded.
#[test]
fn a_job_that_finished_before_it_was_seen_running_is_recorded_as_run() {
    let p = plan("pytorch", "master=1,worker=1");
    let waiting = observed(vec![
        pod("master", 0, PodOwner::None, ContainerState::Waiting),
        pod("worker", 0, PodOwner::None, ContainerState::Waiting),
    ]);
    let prev = next(&p, &waiting, None, Some(1), t(0)).status;
    assert_eq!(prev.phase, Phase::Pending);
    assert!(!prev.conditions.iter().any(|c| c.type_ == "Running"));
    let done = observed(vec![
        completed("master", 0, "c1"),
        completed("worker", 0, "c2"),
    ]);
    let s = next(&p, &done, Some(&prev), Some(1), t(2)).status;
    assert_eq!(s.phase, Phase::Succeeded);
    let msg = "master-0 (pod master-0) exited with exit code 0 (Completed)";
    assert_eq!(
        s.conditions,
        vec![
            condition("Created", "True", "Created", CREATED_MSG, t(0)),
            condition(
                "Running",
                "False",
                "Succeeded",
                "ran and finished before it was seen running",
                t(2)
            ),
            condition("Succeeded", "True", "CoordinatorSucceeded", msg, t(2)),
        ]
    );
}

/// Under clean-pod-policy None a final job keeps every pod, and still no
/// member starts again: each Job that has not completed is suspended (the
/// Job controller would replace its failed pods, up to its backoffLimit,
/// and train again for a job that has ended). Suspension deletes what still
/// runs; the failed pods stay, marked as this run's. StatefulSets and bare
/// pods are left as they are.
#[test]
fn under_none_a_final_jobs_member_jobs_start_nothing_again() {
    let mut p = plan("xgboost", "master=1,worker=2");
    p.policies.clean_pod = CleanPodPolicy::None;
    let job = |name: &str, role: &str, completions: u32| Workload::Job {
        name: name.into(),
        uid: format!("uid-{name}"),
        marked: false,
        role: role.into(),
        suspended: false,
        finished: false,
        completions: Some(completions),
        parallelism: completions,
        offset: None,
    };
    let failed = |role: &str, index: u32, run: &str| {
        pod(
            role,
            index,
            PodOwner::Job,
            ContainerState::Terminated(exit(1, "Error", run)),
        )
    };
    let obs = Observed {
        pods: vec![
            failed("master", 0, "m"),
            failed("worker", 0, "w0"),
            pod("worker", 1, PodOwner::Job, ContainerState::Running),
        ],
        workloads: vec![job("j-master", "master", 1), job("j-worker", "worker", 2)],
        ..Observed::default()
    };
    let out = next(&p, &obs, None, None, t(0));
    assert_eq!(out.status.phase, Phase::Failed);
    assert_eq!(
        out.actions,
        vec![
            Action::SuspendJob {
                name: "j-master".into(),
                uid: "uid-j-master".into()
            },
            Action::SuspendJob {
                name: "j-worker".into(),
                uid: "uid-j-worker".into()
            },
            mark("master-0"),
            mark("worker-0"),
        ]
    );
    // Once suspended, nothing more is done.
    let mut stopped = obs.clone();
    for w in &mut stopped.workloads {
        if let Workload::Job { suspended, .. } = w {
            *suspended = true;
        }
    }
    stopped.pods.retain(|p| p.name != "worker-1");
    for p in &mut stopped.pods {
        p.marked = true;
    }
    let again = next(&p, &stopped, Some(&out.status), None, t(5));
    assert_eq!(again.actions, vec![]);
    // A Job whose every index succeeded is left to complete, marked, as
    // under the other policies.
    let done = Observed {
        pods: vec![
            failed("master", 0, "m"),
            pod(
                "worker",
                0,
                PodOwner::Job,
                ContainerState::Terminated(exit(0, "Completed", "w0")),
            ),
            pod(
                "worker",
                1,
                PodOwner::Job,
                ContainerState::Terminated(exit(0, "Completed", "w1")),
            ),
        ],
        ..obs.clone()
    };
    let out = next(&p, &done, None, None, t(0));
    assert!(!out.actions.contains(&Action::SuspendJob {
        name: "j-worker".into(),
        uid: "uid-j-worker".into()
    }));
    // A Job that failed on its own (its podFailurePolicy, its backoffLimit)
    // starts nothing again: not suspended, marked as this run's.
    let mut failed_on_its_own = obs.clone();
    if let Workload::Job { finished, .. } = &mut failed_on_its_own.workloads[0] {
        *finished = true;
    }
    let out2 = next(&p, &failed_on_its_own, None, None, t(0));
    assert!(!out2.actions.contains(&Action::SuspendJob {
        name: "j-master".into(),
        uid: "uid-j-master".into()
    }));
    assert!(out2.actions.contains(&Action::MarkFinished {
        kind: Kind::Job,
        name: "j-master".into(),
        uid: "uid-j-master".into()
    }));
    assert!(out.actions.contains(&Action::MarkFinished {
        kind: Kind::Job,
        name: "j-worker".into(),
        uid: "uid-j-worker".into()
    }));
}

/// The job's SSH Secret was deleted while it ran, and a member waits to
/// mount it: the record goes (so the next pass makes a new Secret, a new
/// key), every member restarts to mount the new key together (keys of two
/// generations would refuse each other), not counted as a retry, and the
/// SSHSecretLost condition says what happened and what to do, with one
/// Warning Event.
#[test]
fn a_deleted_ssh_secret_restarts_every_member_with_a_new_key() {
    let p = plan("mpi", "launcher=1,worker=2");
    let members = || {
        vec![
            pod("launcher", 0, PodOwner::Job, ContainerState::Running),
            pod("worker", 0, PodOwner::StatefulSet, ContainerState::Running),
            pod("worker", 1, PodOwner::StatefulSet, ContainerState::Waiting),
        ]
    };
    let mut prev = next(&p, &observed(members()), None, Some(1), t(0)).status;
    prev.ssh_secret = Some("mnist-ssh".into());
    let lost = Observed {
        owned: OwnedOutcome {
            lost_secret: Some("mnist-ssh".into()),
            ..OwnedOutcome::default()
        },
        ..observed(members())
    };
    let out = next(&p, &lost, Some(&prev), Some(1), t(10));
    assert_eq!(
        out.status.ssh_secret, None,
        "the record goes: a new Secret is made"
    );
    assert_eq!(out.status.phase, Phase::Restarting);
    assert_eq!(out.status.restarts, 0, "not counted as a retry");
    assert_eq!(out.new_restarts, 0);
    assert_eq!(
        out.status.job_restart.as_ref().map(|r| r.uids.len()),
        Some(3)
    );
    let deleted: Vec<&str> = out
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::DeletePod { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deleted, ["launcher-0", "worker-0", "worker-1"]);
    let condition = out
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == SSH_SECRET_LOST)
        .unwrap();
    assert_eq!(condition.status, "True");
    assert_eq!(condition.reason, "SecretDeleted");
    assert!(condition
        .message
        .starts_with("the SSH Secret mnist-ssh the members mount was deleted"));
    assert!(
        out.events
            .iter()
            .any(|e| e.warning && e.reason == SSH_SECRET_LOST),
        "{:?}",
        out.events
    );
    // The next pass finds the new Secret made (and recorded): the condition
    // is cleared, the restart goes on until its pods are gone.
    let mut made = out.status.clone();
    made.ssh_secret = Some("mnist-ssh".into());
    let back = next(&p, &observed(members()), Some(&made), Some(1), t(12));
    let condition = back
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == SSH_SECRET_LOST)
        .unwrap();
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("False", "SecretRecreated")
    );
    // A finished job is left as it is.
    let mut done = prev.clone();
    done.phase = Phase::Succeeded;
    let after = next(&p, &lost, Some(&done), Some(1), t(20));
    assert_eq!(after.status.ssh_secret, Some("mnist-ssh".into()));
    assert_eq!(after.status.job_restart, None);
}

/// Members whose wait for their names gave up or cannot run: the
/// NameWaitFailed condition names each pod and what happened, then what to
/// check, with one Warning Event while it does not change; at most five
/// pods are named; it is cleared once no member says so.
#[test]
fn a_name_wait_that_failed_is_a_condition_and_one_event() {
    let p = plan("xgboost", "master=1,worker=7");
    let gave_up =
        "gave up after 600s: xg-master-0.xg.ml.svc does not resolve (Name or service not known)";
    let members = |failed: usize| {
        let mut pods = vec![running("master", 0)];
        for i in 0..7 {
            let mut w = running("worker", i);
            if (i as usize) < failed {
                w.name_wait = Some(gave_up.to_owned());
            }
            pods.push(w);
        }
        pods
    };
    let first = next(&p, &observed(members(1)), None, Some(1), t(0));
    let condition = first
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == NAME_WAIT_FAILED)
        .unwrap();
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("True", "GaveUp")
    );
    assert_eq!(
        condition.message,
        format!("pod worker-0: dljob-wait-for-names {gave_up}; a pod whose wait gave up started its framework without its names: check the job's headless Service, that dljob's reconciler runs, that the pods are scheduled")
    );
    let warned = |out: &Outcome| {
        out.events
            .iter()
            .filter(|e| e.warning && e.reason == NAME_WAIT_FAILED)
            .count()
    };
    assert_eq!(warned(&first), 1);
    // Unchanged: no second Event.
    let again = next(
        &p,
        &observed(members(1)),
        Some(&first.status),
        Some(1),
        t(5),
    );
    assert_eq!(warned(&again), 0);
    // Seven pods, one that cannot run: five named, the rest counted, both
    // fixes said; a new Event for the new message.
    let mut seven = members(7);
    seven[7].name_wait =
        Some("cannot run: its image ghcr.io/dljob/dljob:0.1.0 cannot be pulled".to_owned());
    let worse = next(&p, &observed(seven), Some(&again.status), Some(1), t(10));
    let condition = worse
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == NAME_WAIT_FAILED)
        .unwrap();
    assert_eq!(condition.reason, "CannotRun");
    let parts: Vec<&str> = condition.message.split("; ").collect();
    assert_eq!(parts.len(), 5 + 1 + 2, "{parts:?}");
    assert_eq!(parts[5], "2 more pods");
    assert!(
        parts[7].starts_with(
            "a pod whose wait cannot run does not start: its image is dljob's (waitForNamesImage"
        ),
        "{}",
        parts[7]
    );
    assert_eq!(warned(&worse), 1);
    // Those pods replaced: cleared, no Event.
    let fine = next(
        &p,
        &observed(members(0)),
        Some(&worse.status),
        Some(1),
        t(20),
    );
    let condition = fine
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == NAME_WAIT_FAILED)
        .unwrap();
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("False", "NamesWaitedFor")
    );
    assert_eq!(warned(&fine), 0);
    // A job whose waits never failed has no such condition.
    let never = next(&p, &observed(members(0)), None, Some(1), t(0));
    assert!(never
        .status
        .conditions
        .iter()
        .all(|c| c.type_ != NAME_WAIT_FAILED));
}

/// An elastic job (master=1,worker=3 under 2:5: workers 1 to 4) whose
/// worker StatefulSet is scaled: grown to 4 and shrunk to 2 it is Running
/// with the new size recorded, `Resized` said once per change, no
/// MemberSizeMismatch; scaled to 6 the condition says the range; a scale
/// during a whole-job restart ends the restart at the new size.
#[test]
fn an_elastic_role_resizes_within_its_range() {
    let mut p = plan("pytorch", "master=1,worker=3");
    p.elastic = Some(Elastic { min: 2, max: 5 });
    let members = |workers: u32| {
        let mut pods = vec![running("master", 0)];
        for i in 0..workers {
            pods.push(pod(
                "worker",
                i,
                PodOwner::StatefulSet,
                ContainerState::Running,
            ));
        }
        Observed {
            workloads: vec![statefulset("w", "worker", workers)],
            ..observed(pods)
        }
    };
    let resized = |out: &Outcome| -> Vec<String> {
        out.events
            .iter()
            .filter(|e| e.reason == RESIZED)
            .map(|e| e.note.clone())
            .collect()
    };
    let mismatch = |out: &Outcome| true_message(out, SIZE_MISMATCH);
    let first = next(&p, &members(3), None, Some(1), t(0));
    assert_eq!(first.status.phase, Phase::Running);
    assert_eq!(first.status.replicas["worker"].replicas, Some(3));
    assert_eq!(first.status.replicas["master"].replicas, None);
    assert_eq!(first.status.active, "4/4");
    assert!(resized(&first).is_empty(), "no Event for the first size");

    let grown = next(&p, &members(4), Some(&first.status), Some(1), t(10));
    assert_eq!(grown.status.phase, Phase::Running);
    assert_eq!(grown.status.replicas["worker"].replicas, Some(4));
    assert_eq!(grown.status.active, "5/5");
    assert_eq!(
        resized(&grown),
        ["role worker resized from 3 to 4 replicas (dljob.dev/elastic \"2:5\" allows 1 to 4); the job has 5 in all"]
    );
    assert!(
        grown.events.iter().all(|e| !e.warning),
        "{:?}",
        grown.events
    );
    assert_eq!(mismatch(&grown), None);
    let again = next(&p, &members(4), Some(&grown.status), Some(1), t(12));
    assert!(resized(&again).is_empty());

    let shrunk = next(&p, &members(2), Some(&again.status), Some(1), t(20));
    assert_eq!(shrunk.status.phase, Phase::Running);
    assert_eq!(shrunk.status.active, "3/3");
    assert_eq!(
        resized(&shrunk),
        ["role worker resized from 4 to 2 replicas (dljob.dev/elastic \"2:5\" allows 1 to 4); the job has 3 in all"]
    );
    assert_eq!(mismatch(&shrunk), None);

    // Past the range (kubectl scale, which no webhook sees).
    let mut beyond = members(6);
    beyond.pods.truncate(5); // the pods past index 3 are refused at admission
    let out = next(&p, &beyond, Some(&shrunk.status), Some(1), t(30));
    assert_eq!(
        mismatch(&out).as_deref(),
        Some("StatefulSet w reaches index 5 of role worker but role \"worker\" may have 1 to 4 replicas under dljob.dev/elastic \"2:5\" (the job's other roles have 1): resize it within that range")
    );
    assert!(out.events.iter().any(|e| e.reason == RESIZED && e.warning));

    // A whole-job restart while the workers grow from 3 to 4: the restart
    // is over once every replica of the new size is back.
    let mut r = p.clone();
    r.policies.restart_scope = RestartScope::Job;
    let mut restarting = first.status.clone();
    restarting.phase = Phase::Restarting;
    restarting.job_restart = None;
    let mut three_back = members(4);
    three_back.pods[4].container = Some(FrameworkContainer {
        state: ContainerState::Waiting,
        last: None,
        restart_count: 0,
    });
    let out = next(&r, &three_back, Some(&restarting), Some(1), t(40));
    assert_eq!(out.status.phase, Phase::Restarting, "4 of 5 back");
    assert_eq!(out.status.active, "4/5");
    let out = next(&r, &members(4), Some(&out.status), Some(1), t(45));
    assert_eq!(out.status.phase, Phase::Running, "all 5 back");
}

/// A job that is not elastic keeps reporting a resized StatefulSet as a
/// mismatch, and records no size.
#[test]
fn a_fixed_role_does_not_resize() {
    let p = plan("pytorch", "master=1,worker=3");
    let with = |workers: u32| Observed {
        workloads: vec![statefulset("w", "worker", workers)],
        ..observed(vec![running("master", 0)])
    };
    let first = next(&p, &with(3), None, Some(1), t(0));
    assert_eq!(first.status.replicas["worker"].replicas, None);
    let out = next(&p, &with(4), Some(&first.status), Some(1), t(10));
    assert!(out.events.iter().all(|e| e.reason != RESIZED));
    assert!(out
        .status
        .conditions
        .iter()
        .any(|c| c.type_ == SIZE_MISMATCH && c.status == "True"));
}

/// `spec.elasticReplicas` (`kubectl scale dljob`, an autoscaler): the
/// elastic role's one StatefulSet or Indexed Job is resized to it, within
/// the range, once; what cannot be applied is the ScaleNotApplied
/// condition with the reason; the status carries the workers' selector.
#[test]
fn the_scale_subresource_resizes_the_elastic_role() {
    let mut p = plan("pytorch", "master=1,worker=3");
    p.elastic = Some(Elastic { min: 2, max: 5 });
    let with = |workloads: Vec<Workload>| Observed {
        workloads,
        ..observed(vec![running("master", 0)])
    };
    let job = |name: &str, completions: u32, offset: Option<u32>| Workload::Job {
        name: name.into(),
        uid: format!("uid-{name}"),
        marked: false,
        role: "worker".into(),
        suspended: false,
        finished: false,
        completions: Some(completions),
        parallelism: completions,
        offset,
    };
    let refused = |out: &Outcome| true_message(out, SCALE_NOT_APPLIED);
    // A first look at the job, its workers `workloads`.
    let look = |plan: &JobPlan, workloads: Vec<Workload>| {
        next(plan, &with(workloads), None, Some(1), t(0))
    };
    let three = || vec![statefulset("w", "worker", 3)];
    // Unset: nothing to do, and the selector is there for an autoscaler.
    let out = look(&p, three());
    assert_eq!(out.actions, vec![]);
    assert_eq!(
        out.status.selector.as_deref(),
        Some("dljob.dev/job=mnist,dljob.dev/role=worker")
    );
    // Grown to 4: the StatefulSet is resized, guarded by its uid; the Job
    // likewise (completions and parallelism).
    p.scale_to = Some(4);
    let out = look(&p, three());
    assert_eq!(
        out.actions,
        vec![Action::Resize {
            kind: Kind::StatefulSet,
            name: "w".into(),
            uid: "uid-w".into(),
            size: 4
        }]
    );
    assert_eq!(refused(&out), None);
    let out = look(&p, vec![job("w", 3, None)]);
    assert_eq!(
        out.actions,
        vec![Action::Resize {
            kind: Kind::Job,
            name: "w".into(),
            uid: "uid-w".into(),
            size: 4
        }]
    );
    // There already: nothing.
    let done = next(
        &p,
        &with(vec![statefulset("w", "worker", 4)]),
        Some(&out.status),
        Some(1),
        t(5),
    );
    assert_eq!(done.actions, vec![]);
    // Beyond the range, several sets, bare pods: said, not applied.
    p.scale_to = Some(5);
    let out = look(&p, three());
    assert_eq!(out.actions, vec![]);
    assert_eq!(
        refused(&out).as_deref(),
        Some("spec.elasticReplicas is 5 but role \"worker\" may have 1 to 4 replicas under dljob.dev/elastic \"2:5\" (the job's other roles have 1): kubectl scale dljob/mnist --replicas=N with N within it")
    );
    assert!(out
        .events
        .iter()
        .any(|e| e.warning && e.reason == SCALE_NOT_APPLIED));
    p.scale_to = Some(4);
    let out = look(&p, vec![job("a", 2, Some(0)), job("b", 1, Some(2))]);
    assert_eq!(out.actions, vec![]);
    assert_eq!(
        refused(&out).as_deref(),
        Some("spec.elasticReplicas is 4 but role worker is split over several workloads (Job a, Job b): resize them yourself, within the range, and remove spec.elasticReplicas")
    );
    let out = look(&p, vec![]);
    assert_eq!(
        refused(&out).as_deref(),
        Some("spec.elasticReplicas is 4 but role worker has no running StatefulSet or Indexed Job to resize (bare pods are created and deleted by you)")
    );
    // Under Kueue the workers do not grow past their declared count.
    let mut kueue = p.clone();
    kueue.fixed_total = true;
    let out = look(&kueue, three());
    assert_eq!(out.actions, vec![]);
    assert_eq!(
        refused(&out).as_deref(),
        Some("spec.elasticReplicas is 4 but role worker keeps at most its declared 3: its gang scheduler's group is the job's declared total and pods beyond it are deleted as excess (Kueue)")
    );
    kueue.scale_to = Some(2);
    let out = look(&kueue, three());
    assert_eq!(out.actions.len(), 1, "shrinking is fine: {:?}", out.actions);
    // A finished job is not resized.
    let mut finished = out.status.clone();
    finished.phase = Phase::Succeeded;
    let out = next(&p, &with(three()), Some(&finished), Some(1), t(9));
    assert!(
        out.actions
            .iter()
            .all(|a| !matches!(a, Action::Resize { .. })),
        "{:?}",
        out.actions
    );
    // Not elastic: nothing resized, the reason said.
    let mut fixed = plan("pytorch", "master=1,worker=3");
    fixed.scale_to = Some(4);
    let out = look(&fixed, three());
    assert_eq!(out.actions, vec![]);
    assert_eq!(out.status.selector, None);
    assert_eq!(
        refused(&out).as_deref(),
        Some("spec.elasticReplicas is 4 but the job is not elastic (dljob.dev/elastic): its size is its members'; remove spec.elasticReplicas")
    );
}
