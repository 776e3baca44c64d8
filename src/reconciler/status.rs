//! The job status as a pure function (DESIGN §5):
//! (the members' observed pods and workloads, the previous status, now) →
//! (the new status, the actions that make the cluster follow it).
//!
//! No client, no clock: the I/O layer observes, calls [`next`], writes the
//! status if it changed and executes the actions, each of which is
//! idempotent. Everything a restart of the reconciler must not forget — the
//! exits already counted, the bare pods still to recreate — is in the status
//! (a bare pod's manifest itself is kept in a PodTemplate, never in the
//! status: it holds the pod's env).
//!
//! The observed members are the run's: pods and workloads another DLJob's
//! finished run marked ([`c::FINISHED_RUN`]) are left out by the caller.
//! When this run finishes, what is left of it is marked in turn.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::contract::{self as c, CleanPodPolicy, Policies, RestartPolicy, RestartScope, Topology};
use crate::crd::{
    CoordinatorStatus, DLJobStatus, JobRestart, PendingRecreate, Phase, RoleStatus, SavedPod,
};
use crate::frameworks::Framework;
use crate::member::PodOwner;

/// What the job's members agree on (from the DLJob spec).
#[derive(Clone)]
pub struct JobPlan {
    pub framework: &'static dyn Framework,
    pub topology: Topology,
    pub policies: Policies,
}

impl std::fmt::Debug for JobPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobPlan")
            .field("framework", &self.framework.name())
            .field("topology", &self.topology.to_string())
            .field("policies", &self.policies)
            .finish()
    }
}

/// The pod's own `spec.restartPolicy`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PodRestart {
    #[default]
    Always,
    OnFailure,
    Never,
}

/// How a container run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exit {
    /// None: the pod failed without its container reporting an exit
    /// (eviction, node loss) — treated as retryable.
    pub code: Option<i32>,
    /// `Completed`, `Error`, `OOMKilled`, `Evicted`, …
    pub reason: Option<String>,
    /// Identifies this run of the container (its container id, else its
    /// finish time), so that one exit is counted once.
    pub run: String,
}

/// The framework container's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ContainerState {
    Waiting,
    Running,
    Terminated(Exit),
}

/// The framework container of one pod (only its exit code counts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameworkContainer {
    pub state: ContainerState,
    /// `lastState.terminated`: the previous run, after a kubelet restart.
    pub last: Option<Exit>,
    pub restart_count: u32,
}

/// One member pod as the status needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct ObservedPod {
    pub name: String,
    pub uid: String,
    pub role: String,
    pub index: u32,
    pub owner: PodOwner,
    pub restart_policy: PodRestart,
    /// `status.phase`.
    pub phase: String,
    /// `status.reason` (e.g. `Evicted`).
    pub reason: Option<String>,
    /// Has a deletionTimestamp: it is going away, its exits do not count.
    pub deleting: bool,
    pub container: Option<FrameworkContainer>,
    /// Still held by dljob's scheduling gate ([`c::WORKERS_READY_GATE`]).
    pub gated: bool,
    /// Already marked [`c::FINISHED_RUN`] by this job's finished run.
    pub marked: bool,
}

/// A member workload, for the clean-pod policy and the size check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Workload {
    StatefulSet {
        name: String,
        uid: String,
        role: String,
        replicas: u32,
        /// `dljob.dev/index-offset`: one of several sets of its role.
        offset: Option<u32>,
        /// Already marked [`c::FINISHED_RUN`] by this job's finished run.
        marked: bool,
    },
    Job {
        name: String,
        uid: String,
        role: String,
        /// Already marked [`c::FINISHED_RUN`] by this job's finished run.
        marked: bool,
        suspended: bool,
        /// `spec.completions` (None: not set).
        completions: Option<u32>,
        /// `spec.parallelism` (1 when not set).
        parallelism: u32,
        /// `dljob.dev/index-offset`: one of several sets of its role.
        offset: Option<u32>,
    },
}

/// Everything observed of one job's members.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observed {
    pub pods: Vec<ObservedPod>,
    pub workloads: Vec<Workload>,
    /// The PodTemplates this DLJob saved bare pods' manifests in (read only
    /// while a recreate is pending).
    pub saved: Vec<SavedPod>,
}

/// A member kind, for [`Action::MarkFinished`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberKind {
    Pod,
    StatefulSet,
    Job,
}

/// One idempotent change to the cluster. Every change to a member is made
/// only if it still has the uid observed (a pod or workload recreated under
/// the same name is left alone).
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Read the bare pod and keep its manifest (in a new PodTemplate the
    /// DLJob owns) to recreate it from, and record that PodTemplate in the
    /// status; before the pod is deleted (which waits for it).
    SavePod { name: String, uid: String },
    /// Delete the pod if it still has this uid.
    DeletePod { name: String, uid: String },
    /// Create the bare pod `name` again from the manifest saved in
    /// `saved` (AlreadyExists means another pod took the name: said).
    CreatePod { name: String, saved: SavedPod },
    /// Delete a saved manifest no recreate needs any more.
    DeleteSaved { saved: SavedPod },
    /// Annotate `dljob.dev/scaled-from: from`, then scale to 0.
    ScaleStatefulSetToZero {
        name: String,
        uid: String,
        from: u32,
    },
    /// `spec.suspend: true`.
    SuspendJob { name: String, uid: String },
    /// Annotate the member [`c::FINISHED_RUN`]: what is left of a finished
    /// run never counts toward a later run of the same job.
    MarkFinished {
        kind: MemberKind,
        name: String,
        uid: String,
    },
    /// ttl-seconds-after-finished: delete the DLJob.
    DeleteDLJob,
    /// Remove dljob's scheduling gate from the pod if it still has this uid:
    /// the members it waits for run.
    RemoveSchedulingGate { name: String, uid: String },
}

/// A Kubernetes Event about the job: a phase change, or a member
/// workload's size starting to differ from its role's count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobEvent {
    pub warning: bool,
    pub reason: String,
    pub note: String,
}

/// What [`next`] decided.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub status: DLJobStatus,
    pub actions: Vec<Action>,
    /// The phase's Event when the phase changed, then the
    /// [`SIZE_MISMATCH`] Event when that condition appeared or changed.
    pub events: Vec<JobEvent>,
    /// Reconcile again after this long (a deadline or the ttl).
    pub requeue_after: Option<Duration>,
    /// Restarts counted by this call (for metrics).
    pub new_restarts: u32,
}

/// The class of an exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitClass {
    /// 0.
    Success,
    /// 1–127: the program failed; retrying will not help.
    Permanent,
    /// 128–255 (killed by a signal, OOM) or no exit code: worth a retry.
    Retryable,
}

/// Classifies an exit under the job's restart policy.
pub fn classify(code: Option<i32>, policy: RestartPolicy) -> ExitClass {
    let class = match code {
        Some(0) => ExitClass::Success,
        Some(1..=127) => ExitClass::Permanent,
        _ => ExitClass::Retryable,
    };
    match (class, policy) {
        (ExitClass::Retryable, RestartPolicy::Never) => ExitClass::Permanent,
        (c, _) => c,
    }
}

impl ObservedPod {
    /// The exit that speaks for this pod: the framework container's
    /// `state.terminated`, else its `lastState.terminated`, else — for a pod
    /// that failed as a whole — an exit without code.
    pub fn exit(&self) -> Option<Exit> {
        let from_container = self.container.as_ref().and_then(|c| match &c.state {
            ContainerState::Terminated(e) => Some(e.clone()),
            _ => c.last.clone(),
        });
        from_container.or_else(|| {
            (self.phase == "Failed").then(|| Exit {
                code: None,
                reason: self.reason.clone(),
                run: "pod".to_owned(),
            })
        })
    }

    /// The framework container stopped and nothing will restart it: the
    /// pod must be deleted to run again.
    pub fn finished(&self) -> bool {
        if self.phase == "Succeeded" || self.phase == "Failed" {
            return true;
        }
        match self.container.as_ref().map(|c| &c.state) {
            Some(ContainerState::Terminated(e)) => match self.restart_policy {
                PodRestart::Never => true,
                PodRestart::OnFailure => e.code == Some(0),
                PodRestart::Always => false,
            },
            _ => false,
        }
    }

    /// Key of the exit in `countedExits`.
    fn exit_key(&self, exit: &Exit) -> String {
        format!("{}/{}", self.uid, exit.run)
    }

    fn replica(&self) -> String {
        format!("{}-{}", self.role, self.index)
    }
}

/// Why the job finished, or is where it is.
struct Verdict {
    phase: Phase,
    reason: &'static str,
    message: String,
}

/// Computes the job's next status and the actions to take.
pub fn next(
    plan: &JobPlan,
    observed: &Observed,
    previous: Option<&DLJobStatus>,
    generation: Option<i64>,
    now: Timestamp,
) -> Outcome {
    let prev = previous.cloned().unwrap_or_default();
    let mut status = prev.clone();
    status.observed_generation = generation;
    if status.start_time.is_none() {
        status.start_time = Some(Time(now));
    }
    let mut pods: Vec<&ObservedPod> = observed.pods.iter().filter(|p| !p.deleting).collect();
    pods.sort_by(|a, b| a.name.cmp(&b.name));

    // Counts per role, every role of the topology listed.
    let mut roles: BTreeMap<String, RoleStatus> = plan
        .topology
        .roles()
        .map(|(r, _)| {
            let restarts = prev.replicas.get(r).map_or(0, |s| s.restarts);
            (
                r.to_owned(),
                RoleStatus {
                    restarts,
                    ..RoleStatus::default()
                },
            )
        })
        .collect();
    for p in &pods {
        let Some(counts) = roles.get_mut(&p.role) else {
            continue;
        };
        let exit = p.exit();
        match (&p.container, exit) {
            (Some(c), _) if c.state == ContainerState::Running => counts.active += 1,
            (_, Some(e)) if e.code == Some(0) => counts.succeeded += 1,
            (_, Some(_)) => counts.failed += 1,
            (_, None) => counts.pending += 1,
        }
    }

    // The coordinator.
    let coordinator_replica = plan.framework.coordinator(&plan.topology);
    let coordinator_pod = coordinator_replica.and_then(|(role, index)| {
        pods.iter()
            .find(|p| p.role == role && p.index == index)
            .copied()
    });
    status.coordinator = coordinator_replica.map(|(role, index)| {
        let exit = coordinator_pod.and_then(|p| p.exit());
        CoordinatorStatus {
            replica: format!("{role}-{index}"),
            pod: coordinator_pod.map(|p| p.name.clone()),
            exit_code: exit.as_ref().and_then(|e| e.code),
            reason: exit.and_then(|e| e.reason),
        }
    });

    let mut lost = Vec::new();
    let (verdict, mut actions, new_restarts) = if prev.phase.is_finished() {
        let verdict = Verdict {
            phase: prev.phase,
            reason: "",
            message: String::new(),
        };
        (verdict, Vec::new(), 0)
    } else {
        let members = Members {
            live: &pods,
            all: &observed.pods,
            saved: &observed.saved,
            coordinator: coordinator_pod,
        };
        let decision = decide(plan, &members, &mut status, &mut roles, now, &mut lost);
        (decision.verdict, decision.actions, decision.new_restarts)
    };

    status.restarts = roles.values().map(|r| r.restarts).sum();
    let active: u32 = roles.values().map(|r| r.active).sum();
    status.active = format!("{active}/{}", plan.topology.total());
    status.replicas = roles;
    status.phase = verdict.phase;

    let mut requeue_after = None;
    if verdict.phase.is_finished() {
        if !prev.phase.is_finished() {
            status.completion_time = Some(Time(now));
        }
        status.pending_recreates.clear();
        status.job_restart = None;
        clean_up(plan.policies.clean_pod, &pods, observed, &mut actions);
        mark_finished(plan.policies.clean_pod, &pods, observed, &mut actions);
        actions.extend(
            observed
                .saved
                .iter()
                .map(|t| Action::DeleteSaved { saved: t.clone() }),
        );
        if let (Some(ttl), Some(done)) = (
            plan.policies.ttl_seconds_after_finished,
            status.completion_time.as_ref(),
        ) {
            match remaining(done.0, ttl, now) {
                None => actions.push(Action::DeleteDLJob),
                Some(d) => requeue_after = Some(d),
            }
        }
    } else if let (Some(deadline), Some(start)) = (
        plan.policies.active_deadline_seconds,
        status.start_time.as_ref(),
    ) {
        requeue_after = remaining(start.0, deadline, now);
    }

    let mut events = Vec::new();
    if prev.phase != verdict.phase || previous.is_none() {
        events.push(JobEvent {
            warning: verdict.phase == Phase::Failed || verdict.phase == Phase::Restarting,
            reason: verdict.reason.to_owned(),
            note: verdict.message.clone(),
        });
    }
    if !lost.is_empty() {
        events.push(JobEvent {
            warning: true,
            reason: "RecreateLost".to_owned(),
            note: format!(
                "bare pod(s) {} cannot be recreated: the manifest dljob saved to recreate them from (a PodTemplate owned by this DLJob) is gone; create them again from your manifests",
                lost.join(", ")
            ),
        });
    }
    if !prev.phase.is_finished() {
        set_conditions(&mut status.conditions, &verdict, now);
    }
    events.extend(set_size_condition(
        &mut status.conditions,
        &size_mismatches(&plan.topology, &observed.workloads),
        now,
    ));
    if !verdict.phase.is_finished() {
        release_gated(plan, &pods, &mut status.conditions, &mut actions, now);
    } else if status
        .conditions
        .iter()
        .any(|c| c.type_ == LAUNCHER_GATED && c.status == "True")
    {
        set_condition(
            &mut status.conditions,
            now,
            [
                LAUNCHER_GATED,
                "False",
                "JobFinished",
                "the job finished before its launcher started",
            ],
        );
    }
    Outcome {
        status,
        actions,
        events,
        requeue_after,
        new_restarts,
    }
}

/// Time left until `start + seconds`, None when it has passed.
fn remaining(start: Timestamp, seconds: u32, now: Timestamp) -> Option<Duration> {
    let end = start
        .checked_add(SignedDuration::from_secs(i64::from(seconds)))
        .ok()?;
    let left = now.duration_until(end);
    if left <= SignedDuration::ZERO {
        None
    } else {
        Duration::try_from(left).ok()
    }
}

fn describe(p: &ObservedPod, e: &Exit) -> String {
    let code = e.code.map_or("without an exit code".to_owned(), |c| {
        format!("with exit code {c}")
    });
    match &e.reason {
        Some(r) => format!("{} (pod {}) exited {code} ({r})", p.replica(), p.name),
        None => format!("{} (pod {}) exited {code}", p.replica(), p.name),
    }
}

/// Records that bare pod `p`, about to be deleted for a retry, is to come
/// back from its manifest once it is gone, and has the manifest saved
/// first unless it was (the deletion that follows waits for the save).
fn recreate_later(pending: &mut Vec<PendingRecreate>, actions: &mut Vec<Action>, p: &ObservedPod) {
    let saved = match pending.iter().find(|r| r.uid == p.uid) {
        Some(r) => r.saved.is_some(),
        None => {
            pending.push(PendingRecreate {
                name: p.name.clone(),
                uid: p.uid.clone(),
                saved: None,
            });
            false
        }
    };
    if !saved && !p.deleting {
        actions.push(Action::SavePod {
            name: p.name.clone(),
            uid: p.uid.clone(),
        });
    }
}

/// The members of a job as [`decide`] sees them.
struct Members<'a> {
    /// Those not being deleted, by name.
    live: &'a [&'a ObservedPod],
    /// Every observed pod, terminating ones included.
    all: &'a [ObservedPod],
    /// The saved manifests.
    saved: &'a [SavedPod],
    /// The coordinator's pod, if it exists.
    coordinator: Option<&'a ObservedPod>,
}

/// What [`decide`] concluded about an unfinished job.
struct Decision {
    verdict: Verdict,
    /// The retries to make (pods to delete or recreate).
    actions: Vec<Action>,
    /// Restarts counted by this decision.
    new_restarts: u32,
}

/// The phase of an unfinished job; counts restarts (in `status`'s counted
/// exits and `roles`) and plans retries.
fn decide(
    plan: &JobPlan,
    members: &Members<'_>,
    status: &mut DLJobStatus,
    roles: &mut BTreeMap<String, RoleStatus>,
    now: Timestamp,
    lost: &mut Vec<String>,
) -> Decision {
    let Members {
        live: pods,
        all,
        saved,
        coordinator,
    } = *members;
    let mut actions = Vec::new();
    let mut new_restarts = 0;
    let policy = plan.policies.restart;
    // 1. The coordinator's 0 finishes the job.
    if let Some(p) = coordinator {
        if let Some(e) = p.exit().filter(|e| e.code == Some(0)) {
            return Decision {
                verdict: Verdict {
                    phase: Phase::Succeeded,
                    reason: "CoordinatorSucceeded",
                    message: describe(p, &e),
                },
                actions,
                new_restarts,
            };
        }
    }
    // Pods being deleted for a whole-job restart: what they do no longer
    // counts (a rank whose peer died often exits 1 on its own).
    let restart_uids: Vec<String> = status
        .job_restart
        .as_ref()
        .map(|r| r.uids.clone())
        .unwrap_or_default();
    let doomed = |p: &ObservedPod| restart_uids.contains(&p.uid);
    // Restart scope Job: a new retryable exit seen together with permanent
    // ones restarts the job — a rank whose peer was killed typically exits
    // 1 in the same moment, and which came first cannot be told.
    let job_retry = plan.policies.restart_scope == RestartScope::Job
        && pods.iter().filter(|p| !doomed(p)).any(|p| {
            p.exit().is_some_and(|e| {
                classify(e.code, policy) == ExitClass::Retryable
                    && status.counted_exits.get(&p.name) != Some(&p.exit_key(&e))
            })
        });
    // 2. A permanent exit of any member fails it.
    for p in pods.iter().filter(|p| !doomed(p) && !job_retry) {
        if let Some(e) = p.exit() {
            if classify(e.code, policy) == ExitClass::Permanent {
                let reason = if policy == RestartPolicy::Never && e.code.is_none_or(|c| c > 127) {
                    "RestartPolicyNever"
                } else {
                    "ExitCode"
                };
                return Decision {
                    verdict: Verdict {
                        phase: Phase::Failed,
                        reason,
                        message: describe(p, &e),
                    },
                    actions,
                    new_restarts,
                };
            }
        }
    }
    // 3. The active deadline.
    if let (Some(deadline), Some(start)) = (
        plan.policies.active_deadline_seconds,
        status.start_time.as_ref(),
    ) {
        if remaining(start.0, deadline, now).is_none() {
            return Decision {
                verdict: Verdict {
                    phase: Phase::Failed,
                    reason: "DeadlineExceeded",
                    message: format!("the job ran longer than its active deadline of {deadline}s"),
                },
                actions,
                new_restarts,
            };
        }
    }
    // 4. Retryable exits: count each once, retry, or give up.
    let total: u32 = roles.values().map(|r| r.restarts).sum();
    let mut restarts = total;
    let mut retrying = false;
    for p in pods.iter().filter(|p| !doomed(p)) {
        let Some(e) = p.exit() else { continue };
        if classify(e.code, policy) != ExitClass::Retryable {
            continue;
        }
        let key = p.exit_key(&e);
        let counted = status.counted_exits.get(&p.name) == Some(&key);
        if !counted {
            if restarts >= plan.policies.backoff_limit {
                return Decision {
                    verdict: Verdict {
                        phase: Phase::Failed,
                        reason: "BackoffLimitExceeded",
                        message: format!(
                            "{}; the backoff limit of {} restarts is reached",
                            describe(p, &e),
                            plan.policies.backoff_limit
                        ),
                    },
                    actions,
                    new_restarts,
                };
            }
            restarts += 1;
            new_restarts += 1;
            if let Some(r) = roles.get_mut(&p.role) {
                r.restarts += 1;
            }
            status.counted_exits.insert(p.name.clone(), key);
            retrying = true;
            if plan.policies.restart_scope == RestartScope::Job {
                // Every member goes, counted as this one restart.
                status.job_restart = Some(JobRestart {
                    cause: describe(p, &e),
                    uids: pods.iter().map(|p| p.uid.clone()).collect(),
                });
                break;
            }
        }
        if p.finished() {
            retrying = true;
            if p.owner == PodOwner::None {
                recreate_later(&mut status.pending_recreates, &mut actions, p);
            }
            actions.push(Action::DeletePod {
                name: p.name.clone(),
                uid: p.uid.clone(),
            });
        }
    }
    // A whole-job restart: delete every pod it covers while it exists
    // (bare ones come back from their own spec, below); it is over once
    // they are all gone.
    if let Some(restart) = status.job_restart.as_mut() {
        restart.uids.retain(|uid| all.iter().any(|p| &p.uid == uid));
        for p in all.iter().filter(|p| restart.uids.contains(&p.uid)) {
            retrying = true;
            if p.owner == PodOwner::None {
                recreate_later(&mut status.pending_recreates, &mut actions, p);
            }
            if !p.deleting {
                actions.push(Action::DeletePod {
                    name: p.name.clone(),
                    uid: p.uid.clone(),
                });
            }
        }
    }
    let restart_cause = status.job_restart.as_ref().map(|r| r.cause.clone());
    if status
        .job_restart
        .as_ref()
        .is_some_and(|r| r.uids.is_empty())
    {
        status.job_restart = None;
    }
    // Forget counted exits of pods that are gone.
    let names: Vec<&str> = pods.iter().map(|p| p.name.as_str()).collect();
    status
        .counted_exits
        .retain(|name, _| names.contains(&name.as_str()));
    // 5. Bare pods deleted for a retry come back from their own spec, once
    // the old pod (maybe still terminating) is gone. One whose saved
    // manifest is gone (deleted by hand) cannot: it is dropped, and said.
    status.pending_recreates.retain(|r| {
        match all.iter().find(|p| p.name == r.name) {
            Some(p) => p.uid == r.uid, // still the old one: keep waiting
            None => true,
        }
    });
    status.pending_recreates.retain(|r| {
        let gone = !all.iter().any(|p| p.name == r.name);
        let from = r
            .saved
            .as_ref()
            .filter(|s| saved.iter().any(|t| t.uid == s.uid));
        match (gone, from) {
            (true, None) => {
                lost.push(r.name.clone());
                return false;
            }
            (true, Some(s)) => actions.push(Action::CreatePod {
                name: r.name.clone(),
                saved: s.clone(),
            }),
            (false, _) => {}
        }
        retrying = true;
        true
    });
    // A saved manifest no recreate needs (its pod is back, was given up, or
    // it was saved twice) goes.
    for t in saved {
        let needed = status
            .pending_recreates
            .iter()
            .any(|r| r.saved.as_ref().is_some_and(|s| s.uid == t.uid));
        if !needed {
            actions.push(Action::DeleteSaved { saved: t.clone() });
        }
    }

    let want = plan.topology.total();
    let active: u32 = roles.values().map(|r| r.active).sum();
    let prev = status.phase;
    let verdict = if retrying || (prev == Phase::Restarting && active < want) {
        Verdict {
            phase: Phase::Restarting,
            reason: "Restarting",
            message: match restart_cause {
                Some(cause) => format!(
                    "restarting every member (restart scope Job) after {cause}: {restarts} of {} restarts used",
                    plan.policies.backoff_limit
                ),
                None => format!(
                    "retrying after a retryable exit: {restarts} of {} restarts used",
                    plan.policies.backoff_limit
                ),
            },
        }
    } else if active >= want || prev == Phase::Running {
        Verdict {
            phase: Phase::Running,
            reason: "Running",
            message: format!("all {want} replicas started"),
        }
    } else {
        Verdict {
            phase: Phase::Pending,
            reason: "Pending",
            message: format!("{active} of {want} replicas running"),
        }
    };
    Decision {
        verdict,
        actions,
        new_restarts,
    }
}

/// The clean-pod policy on a finished job; every action is skipped once done.
fn clean_up(
    policy: CleanPodPolicy,
    pods: &[&ObservedPod],
    observed: &Observed,
    actions: &mut Vec<Action>,
) {
    if policy == CleanPodPolicy::None {
        return;
    }
    for w in &observed.workloads {
        match w {
            Workload::StatefulSet {
                name,
                uid,
                replicas,
                ..
            } if *replicas > 0 => actions.push(Action::ScaleStatefulSetToZero {
                name: name.clone(),
                uid: uid.clone(),
                from: *replicas,
            }),
            Workload::Job {
                name,
                uid,
                suspended,
                ..
            } if !suspended => actions.push(Action::SuspendJob {
                name: name.clone(),
                uid: uid.clone(),
            }),
            _ => {}
        }
    }
    for p in pods {
        let delete = match policy {
            CleanPodPolicy::Running => p.owner == PodOwner::None && !p.finished(),
            CleanPodPolicy::All => true,
            CleanPodPolicy::None => false,
        };
        if delete {
            actions.push(Action::DeletePod {
                name: p.name.clone(),
                uid: p.uid.clone(),
            });
        }
    }
}

/// Marks what is left of a finished run once the clean-pod policy has run
/// ([`c::FINISHED_RUN`]): every pod it does not delete, and every workload
/// it does not stop. A pod of a StatefulSet being scaled to 0 goes with it;
/// a workload stopped (0 replicas, suspended) is not live and makes no new
/// run until it is started again, as a new run. Each is marked once.
fn mark_finished(
    policy: CleanPodPolicy,
    pods: &[&ObservedPod],
    observed: &Observed,
    actions: &mut Vec<Action>,
) {
    let deleted: Vec<&str> = actions
        .iter()
        .filter_map(|a| match a {
            Action::DeletePod { uid, .. } => Some(uid.as_str()),
            _ => None,
        })
        .collect();
    let stopping = policy != CleanPodPolicy::None;
    let mut marks = Vec::new();
    for p in pods {
        let goes = deleted.contains(&p.uid.as_str())
            || (stopping && p.owner == PodOwner::StatefulSet)
            || (stopping && p.owner == PodOwner::Job && !p.finished());
        if !p.marked && !goes {
            marks.push(Action::MarkFinished {
                kind: MemberKind::Pod,
                name: p.name.clone(),
                uid: p.uid.clone(),
            });
        }
    }
    if !stopping {
        for w in &observed.workloads {
            let (kind, name, uid, marked, live) = match w {
                Workload::StatefulSet {
                    name,
                    uid,
                    marked,
                    replicas,
                    ..
                } => (MemberKind::StatefulSet, name, uid, *marked, *replicas > 0),
                Workload::Job {
                    name,
                    uid,
                    marked,
                    suspended,
                    ..
                } => (MemberKind::Job, name, uid, *marked, !suspended),
            };
            if live && !marked {
                marks.push(Action::MarkFinished {
                    kind,
                    name: name.clone(),
                    uid: uid.clone(),
                });
            }
        }
    }
    actions.extend(marks);
}

const CONDITION_TYPES: [&str; 5] = ["Created", "Running", "Restarting", "Succeeded", "Failed"];

/// Sets the conditions for `verdict`: the phase's condition True, the others
/// that exist False; `lastTransitionTime` moves only when a status flips.
fn set_conditions(conditions: &mut Vec<Condition>, verdict: &Verdict, now: Timestamp) {
    if !conditions.iter().any(|c| c.type_ == "Created") {
        set_condition(
            conditions,
            now,
            [
                "Created",
                "True",
                "Created",
                "the DLJob was created from its members' annotations",
            ],
        );
    }
    let mine = match verdict.phase {
        Phase::Pending => "",
        p => p.as_str(),
    };
    if !mine.is_empty() {
        set_condition(
            conditions,
            now,
            [mine, "True", verdict.reason, &verdict.message],
        );
    }
    // Every other phase condition that is True becomes False.
    let others: Vec<String> = conditions
        .iter()
        .filter(|c| {
            CONDITION_TYPES[1..].contains(&c.type_.as_str())
                && c.type_ != mine
                && c.status == "True"
        })
        .map(|c| c.type_.clone())
        .collect();
    for t in others {
        set_condition(
            conditions,
            now,
            [&t, "False", verdict.phase.as_str(), &verdict.message],
        );
    }
    conditions.sort_by_key(|c| {
        CONDITION_TYPES
            .iter()
            .position(|t| *t == c.type_)
            .unwrap_or(CONDITION_TYPES.len())
    });
}

/// The condition type reporting member workloads whose size differs from
/// their role's count (DESIGN §4: `kubectl scale` of a member StatefulSet
/// never reaches the webhook, which can only refuse the extra pods).
pub const SIZE_MISMATCH: &str = "MemberSizeMismatch";

/// One sentence per member workload whose size differs from its role's
/// count, with the fix. A StatefulSet scaled to 0 or a suspended Job is
/// stopped, not resized (the reconciler itself stops them when the job
/// finishes); a role the topology lacks is the webhook's to refuse.
pub fn size_mismatches(topology: &Topology, workloads: &[Workload]) -> Vec<String> {
    let fix = |what: &str| {
        format!("{what}, or change dljob.dev/replicas ({topology}) on every member of the job")
    };
    let mut out = Vec::new();
    // Roles split over several sets: their sizes must add up.
    let mut sets: BTreeMap<&str, u32> = BTreeMap::new();
    for w in workloads {
        let (name, role, size, offset, kind) = match w {
            Workload::StatefulSet {
                name,
                role,
                replicas,
                offset,
                ..
            } => (name, role, *replicas, *offset, "StatefulSet"),
            Workload::Job {
                name,
                role,
                suspended,
                completions,
                parallelism,
                offset,
                ..
            } => {
                if *suspended {
                    continue;
                }
                // A whole role's Job must have the role's count; a set its
                // own size, all running at once either way.
                let want = match offset {
                    Some(_) => *completions,
                    None => topology.count(role),
                };
                let Some(want) = want else {
                    if offset.is_none() {
                        continue; // not a role of the topology
                    }
                    out.push(format!(
                        "Job {name} has no completions: {}",
                        fix("re-create it with completions")
                    ));
                    continue;
                };
                if offset.is_none() && *completions != Some(want) {
                    let has = completions
                        .map_or("no completions".to_owned(), |n| format!("completions {n}"));
                    out.push(format!(
                        "Job {name} has {has} but role {role} has {want}: {}",
                        fix(&format!("re-create it with completions {want}"))
                    ));
                    continue;
                }
                if *parallelism < want {
                    out.push(format!(
                        "Job {name} has parallelism {parallelism} but role {role} has {want} replicas that must all run at once: {}",
                        fix(&format!("set its parallelism to {want}"))
                    ));
                }
                if offset.is_none() {
                    continue; // checked in full above
                }
                (name, role, want, *offset, "Job")
            }
        };
        let Some(count) = topology.count(role) else {
            continue;
        };
        match offset {
            Some(offset) => {
                let sum = sets.entry(role.as_str()).or_default();
                *sum = sum.saturating_add(size);
                if size > 0 && offset.saturating_add(size) > count {
                    out.push(format!(
                        "{kind} {name} has {size} from {role} index {offset} but role {role} has {count} (indexes 0 to {}): {}",
                        count - 1,
                        fix(&format!("make it at most {}", count.saturating_sub(offset)))
                    ));
                }
            }
            None if size > 0 && size != count => {
                out.push(format!(
                    "StatefulSet {name} has {size} replicas but role {role} has {count}: {}",
                    fix(&format!(
                        "scale it back (kubectl scale statefulset {name} --replicas={count})"
                    ))
                ));
            }
            None => {}
        }
    }
    for (role, covered) in sets {
        let count = topology.count_or_zero(role);
        if covered != count && covered > 0 {
            out.push(format!(
                "the sets of role {role} have {covered} replicas in all but role {role} has {count}: {}",
                fix(&format!("resize them to add up to {count}"))
            ));
        }
    }
    out
}

/// Sets [`SIZE_MISMATCH`] from the workloads whose size differs from
/// their role's count; see [`set_problem_condition`].
fn set_size_condition(
    conditions: &mut Vec<Condition>,
    mismatches: &[String],
    now: Timestamp,
) -> Option<JobEvent> {
    set_problem_condition(
        conditions,
        Problem {
            type_: SIZE_MISMATCH,
            reason: "SizeDiffersFromTopology",
            cleared_reason: "SizesMatchTopology",
            cleared_message: "every member StatefulSet and Job has its role's size",
        },
        mismatches,
        now,
    )
}

/// The condition saying an owned object's kind is not served.
pub const OWNED_UNAVAILABLE: &str = "GangUnavailable";

/// Sets [`OWNED_UNAVAILABLE`] from the owned objects the cluster does not
/// serve (each a message naming what to install); see
/// [`set_problem_condition`].
pub fn set_owned_condition(
    conditions: &mut Vec<Condition>,
    not_served: &[String],
    now: Timestamp,
) -> Option<JobEvent> {
    set_problem_condition(
        conditions,
        Problem {
            type_: OWNED_UNAVAILABLE,
            reason: "PodGroupNotApplied",
            cleared_reason: "PodGroupServed",
            cleared_message: "the gang scheduler's PodGroup is kept",
        },
        not_served,
        now,
    )
}

/// The condition saying an object dljob would keep for the job exists and
/// is not this DLJob's: left alone.
pub const OWNERSHIP_CONFLICT: &str = "OwnershipConflict";

/// Sets [`OWNERSHIP_CONFLICT`] from the objects of the job's names that
/// this DLJob does not control (each a message naming the object, whose it
/// is and the fix); see [`set_problem_condition`].
pub fn set_ownership_condition(
    conditions: &mut Vec<Condition>,
    foreign: &[String],
    now: Timestamp,
) -> Option<JobEvent> {
    set_problem_condition(
        conditions,
        Problem {
            type_: OWNERSHIP_CONFLICT,
            reason: "NotControlledByThisJob",
            cleared_reason: "OwnedObjectsKept",
            cleared_message: "every object dljob keeps for the job is this DLJob's",
        },
        foreign,
        now,
    )
}

/// A condition that reports problems while there are any.
struct Problem {
    type_: &'static str,
    reason: &'static str,
    cleared_reason: &'static str,
    cleared_message: &'static str,
}

/// Sets `problem`'s condition True with `problems` as its message, or False
/// once they are gone (only if it was ever set). Returns the Warning Event
/// to publish: once when the problems appear or change, not on every
/// reconcile.
fn set_problem_condition(
    conditions: &mut Vec<Condition>,
    problem: Problem,
    problems: &[String],
    now: Timestamp,
) -> Option<JobEvent> {
    let before = conditions
        .iter()
        .find(|c| c.type_ == problem.type_)
        .map(|c| (c.status == "True", c.message.clone()));
    if problems.is_empty() {
        if before.is_some_and(|(on, _)| on) {
            set_condition(
                conditions,
                now,
                [
                    problem.type_,
                    "False",
                    problem.cleared_reason,
                    problem.cleared_message,
                ],
            );
        }
        return None;
    }
    let message = problems.join("; ");
    set_condition(
        conditions,
        now,
        [problem.type_, "True", problem.reason, &message],
    );
    let unchanged = before.is_some_and(|(on, m)| on && m == message);
    (!unchanged).then(|| JobEvent {
        warning: true,
        reason: problem.type_.to_owned(),
        note: message,
    })
}

/// The condition saying why a launcher waits (frameworks with a gated role).
pub const LAUNCHER_GATED: &str = "LauncherGated";

/// The gated role's pods (mpi's launcher, chainer's master) start once every
/// other member's framework container runs: until then the condition says
/// what they wait for; then their scheduling gates are removed.
fn release_gated(
    plan: &JobPlan,
    pods: &[&ObservedPod],
    conditions: &mut Vec<Condition>,
    actions: &mut Vec<Action>,
    now: Timestamp,
) {
    let Some(gated_role) = plan.framework.gated_role() else {
        return;
    };
    let others = plan.topology.total() - plan.topology.count_or_zero(gated_role);
    let running = pods
        .iter()
        .filter(|p| {
            p.role != gated_role
                && p.container
                    .as_ref()
                    .is_some_and(|c| c.state == ContainerState::Running)
        })
        .count() as u32;
    let gated: Vec<&&ObservedPod> = pods.iter().filter(|p| p.gated).collect();
    if gated.is_empty() {
        if conditions
            .iter()
            .any(|c| c.type_ == LAUNCHER_GATED && c.status == "True")
        {
            set_condition(
                conditions,
                now,
                [
                    LAUNCHER_GATED,
                    "False",
                    "WorkersRunning",
                    &format!("every other member ran; the {gated_role} started"),
                ],
            );
        }
        return;
    }
    if running >= others {
        actions.extend(gated.iter().map(|p| Action::RemoveSchedulingGate {
            name: p.name.clone(),
            uid: p.uid.clone(),
        }));
        set_condition(
            conditions,
            now,
            [LAUNCHER_GATED, "False", "WorkersRunning", &format!("all {others} other members run: the {gated_role}'s scheduling gate {} is removed", c::WORKERS_READY_GATE)],
        );
    } else {
        let names: Vec<String> = gated
            .iter()
            .map(|p| format!("{}-{}", p.role, p.index))
            .collect();
        set_condition(
            conditions,
            now,
            [LAUNCHER_GATED, "True", "WaitingForWorkers", &format!("{} waits (scheduling gate {}) until every other member runs: {running} of {others} run", names.join(", "), c::WORKERS_READY_GATE)],
        );
    }
}

/// Sets one condition: [type, status, reason, message].
fn set_condition(
    conditions: &mut Vec<Condition>,
    now: Timestamp,
    [type_, status, reason, message]: [&str; 4],
) {
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = Time(now);
                c.status = status.to_owned();
            }
            c.reason = reason.to_owned();
            c.message = message.to_owned();
        }
        None => conditions.push(Condition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message: message.to_owned(),
            last_transition_time: Time(now),
            observed_generation: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frameworks;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap()
    }

    fn plan(framework: &str, topology: &str) -> JobPlan {
        JobPlan {
            framework: frameworks::by_name(framework).unwrap(),
            topology: Topology::parse(topology).unwrap(),
            policies: Policies::default(),
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
            name,
        }
    }

    /// The mark a finished run leaves on pod `name`.
    fn mark(name: &str) -> Action {
        Action::MarkFinished {
            kind: MemberKind::Pod,
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
                };
                r.saved = Some(saved.clone());
                saved
            })
            .collect()
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

    fn counts(pending: u32, active: u32, succeeded: u32, failed: u32, restarts: u32) -> RoleStatus {
        RoleStatus {
            pending,
            active,
            succeeded,
            failed,
            restarts,
        }
    }

    fn condition(
        type_: &str,
        status: &str,
        reason: &str,
        message: &str,
        at: Timestamp,
    ) -> Condition {
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
            format!(
                "restarting every member (restart scope Job) after {cause}: 1 of 3 restarts used"
            )
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

    /// Worker sets: each within the role's indexes from its offset, and
    /// all of them adding up to the role's count.
    #[test]
    fn worker_sets_are_sized_against_their_role_together() {
        let t = Topology::parse("master=1,worker=6").unwrap();
        let set = |name: &str, replicas, offset| Workload::StatefulSet {
            name: name.into(),
            uid: format!("uid-{name}"),
            marked: false,
            role: "worker".into(),
            replicas,
            offset: Some(offset),
        };
        assert!(size_mismatches(&t, &[set("gpu8", 2, 0), set("gpu4", 4, 2)]).is_empty());
        assert_eq!(
            size_mismatches(&t, &[set("gpu8", 2, 0), set("gpu4", 5, 2)]),
            vec![
                "StatefulSet gpu4 has 5 from worker index 2 but role worker has 6 (indexes 0 to 5): make it at most 4, or change dljob.dev/replicas (master=1,worker=6) on every member of the job",
                "the sets of role worker have 7 replicas in all but role worker has 6: resize them to add up to 6, or change dljob.dev/replicas (master=1,worker=6) on every member of the job",
            ]
        );
        assert_eq!(
            size_mismatches(&t, &[set("gpu8", 2, 0), set("gpu4", 3, 2)]),
            vec!["the sets of role worker have 5 replicas in all but role worker has 6: resize them to add up to 6, or change dljob.dev/replicas (master=1,worker=6) on every member of the job"]
        );
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
            pod(
                "master",
                0,
                PodOwner::None,
                ContainerState::Terminated(exit(0, "Completed", "c1")),
            ),
            pod(
                "worker",
                0,
                PodOwner::None,
                ContainerState::Terminated(exit(0, "Completed", "c2")),
            ),
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
            pod(
                "worker",
                0,
                PodOwner::None,
                ContainerState::Terminated(exit(0, "Completed", "c")),
            ),
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
                note: "bare pod(s) worker-0 cannot be recreated: the manifest dljob saved to recreate them from (a PodTemplate owned by this DLJob) is gone; create them again from your manifests".into(),
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
            pods: vec![
                pod("worker", 0, PodOwner::StatefulSet, ContainerState::Running),
                w1,
            ],
            workloads: vec![Workload::StatefulSet {
                name: "w".into(),
                uid: format!("uid-{}", "w"),
                marked: false,
                role: "worker".into(),
                replicas: 2,
                offset: None,
            }],
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
            pods: vec![
                w0,
                pod("worker", 1, PodOwner::StatefulSet, ContainerState::Running),
            ],
            workloads: vec![Workload::StatefulSet {
                name: "train".into(),
                uid: format!("uid-{}", "train"),
                marked: false,
                role: "worker".into(),
                replicas: 2,
                offset: None,
            }],
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
            pods: vec![],
            workloads: vec![Workload::StatefulSet {
                name: "train".into(),
                uid: format!("uid-{}", "train"),
                marked: false,
                role: "worker".into(),
                replicas: 0,
                offset: None,
            }],
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
                    kind: MemberKind::Pod,
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
    fn statefulset_ordinals_are_counted_per_role_and_jobs_are_suspended() {
        let p = plan("tensorflow", "chief=1,ps=2,worker=2");
        let obs = Observed {
            saved: vec![],
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
                    completions: Some(1),
                    parallelism: 1,
                    offset: None,
                },
                Workload::StatefulSet {
                    name: "ps".into(),
                    uid: format!("uid-{}", "ps"),
                    marked: false,
                    role: "ps".into(),
                    replicas: 2,
                    offset: None,
                },
                Workload::StatefulSet {
                    name: "worker".into(),
                    uid: format!("uid-{}", "worker"),
                    marked: false,
                    role: "worker".into(),
                    replicas: 2,
                    offset: None,
                },
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
                Action::SuspendJob {
                    name: "chief".into(),
                    uid: format!("uid-{}", "chief"),
                },
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
                // The chief's finished pod stays (its Job is suspended);
                // the sets' pods go with them.
                mark("chief-0"),
            ]
        );
    }

    #[test]
    fn clean_pod_policy_all_removes_finished_pods_and_none_leaves_everything() {
        let mut p = plan("pytorch", "master=1,worker=1");
        let obs = observed(vec![
            pod(
                "master",
                0,
                PodOwner::None,
                ContainerState::Terminated(exit(0, "Completed", "c")),
            ),
            running("worker", 0),
        ]);
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
                pod(
                    "chief",
                    0,
                    PodOwner::None,
                    ContainerState::Terminated(exit(0, "Completed", "c")),
                ),
                pod("ps", 0, PodOwner::StatefulSet, ContainerState::Running),
            ],
            workloads: vec![sts("ps", 1), sts("old-ps", 0)],
            saved: vec![],
        };
        let out = next(&p, &obs, None, None, t(0));
        assert_eq!(out.status.phase, Phase::Succeeded);
        assert_eq!(
            out.actions,
            vec![
                mark("chief-0"),
                mark("ps-0"),
                Action::MarkFinished {
                    kind: MemberKind::StatefulSet,
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
        let obs = observed(vec![pod(
            "master",
            0,
            PodOwner::None,
            ContainerState::Terminated(exit(0, "Completed", "c")),
        )]);
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

    #[test]
    fn member_sizes_that_differ_from_their_roles_are_reported_with_the_fix() {
        let topology = Topology::parse("chief=1,ps=2,worker=4").unwrap();
        let sts = |name: &str, role: &str, replicas| Workload::StatefulSet {
            name: name.into(),
            uid: format!("uid-{name}"),
            marked: false,
            role: role.into(),
            replicas,
            offset: None,
        };
        let job = |name: &str, role: &str, suspended, completions, parallelism| Workload::Job {
            name: name.into(),
            uid: format!("uid-{name}"),
            marked: false,
            role: role.into(),
            suspended,
            completions,
            parallelism,
            offset: None,
        };
        let fix = "or change dljob.dev/replicas (chief=1,ps=2,worker=4) on every member of the job";
        assert_eq!(
            size_mismatches(
                &topology,
                &[
                    sts("ps", "ps", 3),
                    sts("stopped", "ps", 0),
                    sts("other", "evaluator", 7),
                    job("chief", "chief", false, Some(2), 2),
                    job("w", "worker", false, Some(4), 2),
                    job("w-suspended", "worker", true, Some(1), 1),
                    job("w-ok", "worker", false, Some(4), 4),
                ]
            ),
            [
                format!("StatefulSet ps has 3 replicas but role ps has 2: scale it back (kubectl scale statefulset ps --replicas=2), {fix}"),
                format!("Job chief has completions 2 but role chief has 1: re-create it with completions 1, {fix}"),
                format!("Job w has parallelism 2 but role worker has 4 replicas that must all run at once: set its parallelism to 4, {fix}"),
            ]
        );
    }
}
