//! The job status as a pure function (ARCHITECTURE.md §5):
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

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::contract::{Elastic, Policies, RestartPolicy, Topology};
use crate::crd::{CoordinatorStatus, DLJobStatus, JobRestart, Phase, RoleStatus, SavedPod};
use crate::frameworks::{ElasticRole, Framework};
use crate::member::PodOwner;
use crate::object::Kind;

mod conditions;
mod decide;
mod finish;
mod gate;
mod sizes;
#[cfg(test)]
mod tests;

use self::conditions::{set_condition, set_conditions, set_problem_condition, Problem};
pub use self::conditions::{
    set_lost_secret_condition, NAME_WAIT_FAILED, OWNED_REFUSED, OWNED_UNAVAILABLE,
    OWNERSHIP_CONFLICT, SCALE_NOT_APPLIED, SSH_SECRET_LOST,
};
use self::conditions::{
    set_name_wait_condition, OWNERSHIP_PROBLEM, REFUSED_PROBLEM, SCALE_PROBLEM, UNAVAILABLE_PROBLEM,
};
use self::decide::{decide, Members};
use self::finish::{clean_up, mark_finished};
pub use self::gate::LAUNCHER_GATED;
use self::gate::{gate_finished, release_gated};
use self::sizes::SIZE_PROBLEM;
pub use self::sizes::{size_mismatches, SIZE_MISMATCH};

/// What the job's members agree on (from the DLJob spec).
#[derive(Clone)]
pub struct JobPlan {
    pub framework: &'static dyn Framework,
    pub topology: Topology,
    pub policies: Policies,
    /// `dljob.dev/elastic`: the framework's elastic role resizes within it.
    pub elastic: Option<Elastic>,
    /// The DLJob's name (the job's).
    pub name: String,
    /// `spec.elasticReplicas` (the scale subresource): the elastic role's
    /// replicas wanted.
    pub scale_to: Option<u32>,
    /// The gang scheduler's group is the declared total (Kueue's, which
    /// deletes pods beyond it): the elastic role grows no further.
    pub fixed_total: bool,
}

impl JobPlan {
    /// The role that resizes, and the replicas it may have.
    pub fn resizable(&self) -> Option<ElasticRole> {
        ElasticRole::of(self.framework, &self.topology, self.elastic)
    }
}
impl std::fmt::Debug for JobPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobPlan")
            .field("framework", &self.framework.name())
            .field("topology", &self.topology.to_string())
            .field("policies", &self.policies)
            .field("elastic", &self.elastic)
            .field("name", &self.name)
            .field("scale_to", &self.scale_to)
            .field("fixed_total", &self.fixed_total)
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
    /// dljob's name wait ([`crate::contract::WAIT_FOR_NAMES_CONTAINER`])
    /// gave up or cannot run: what its status says, in a few words.
    pub name_wait: Option<String>,
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
        /// The Job has finished on its own (its `Complete` or `Failed`
        /// condition): it starts no pod again, suspended or not.
        finished: bool,
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
    /// What keeping the job's owned objects found.
    pub owned: OwnedOutcome,
}

/// What keeping the job's owned objects (Service, PodGroup, TensorBoard,
/// SSH Secret) found, for the status to tell.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnedOutcome {
    /// The SSH Secret this pass created (or found recorded): the status
    /// records it.
    pub created_secret: Option<String>,
    /// Optional objects the cluster does not serve, refused or did not
    /// keep whole, each a message naming the way out
    /// ([`OWNED_UNAVAILABLE`]).
    pub unavailable: Vec<String>,
    /// Other objects the API server refused or did not keep whole (a
    /// quota, a policy, a webhook of the cluster's), each a message naming
    /// it and why ([`OWNED_REFUSED`]).
    pub refused: Vec<String>,
    /// Objects of the job's names this DLJob does not control
    /// ([`OWNERSHIP_CONFLICT`]).
    pub foreign: Vec<String>,
    /// The recorded SSH Secret, found gone (a dry-run create would make
    /// it) while a member waited to start: its pods cannot mount it.
    pub lost_secret: Option<String>,
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
        kind: Kind,
        name: String,
        uid: String,
    },
    /// ttl-seconds-after-finished: delete the DLJob.
    DeleteDLJob,
    /// Remove dljob's scheduling gate from the pod if it still has this uid:
    /// the members it waits for run.
    RemoveSchedulingGate { name: String, uid: String },
    /// The elastic role's workload, if it still has this uid, to `size`
    /// replicas (a StatefulSet's replicas; a Job's completions and
    /// parallelism together): `spec.elasticReplicas`.
    Resize {
        kind: Kind,
        name: String,
        uid: String,
        size: u32,
    },
}
/// A Kubernetes Event about the job: a phase change, or a member
/// workload's size starting to differ from its role's count.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
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

    /// Its framework container exited 0 for good (a policy that does not
    /// restart it), yet the kubelet has not marked the pod finished (yet,
    /// or never while another container runs).
    pub(super) fn settling(&self) -> bool {
        let exited_0 = match self.container.as_ref().map(|c| &c.state) {
            Some(ContainerState::Terminated(e)) => {
                self.restart_policy != PodRestart::Always && e.code == Some(0)
            }
            _ => false,
        };
        exited_0 && self.phase != "Succeeded" && self.phase != "Failed"
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
    pub(super) fn exit_key(&self, exit: &Exit) -> String {
        format!("{}/{}", self.uid, exit.run)
    }

    pub(super) fn replica(&self) -> String {
        format!("{}-{}", self.role, self.index)
    }
}
/// Why the job finished, or is where it is.
pub(super) struct Verdict {
    pub(super) phase: Phase,
    pub(super) reason: &'static str,
    pub(super) message: String,
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
    let mut roles = role_counts(plan, &prev, &pods);
    let resized = set_elastic_size(plan, &prev, &observed.workloads, &mut roles);
    // A finished job's coordinator is what it was when the job finished:
    // its pod may be cleaned up since.
    let coordinator = if prev.phase.is_finished() {
        None
    } else {
        coordinator(plan, &pods, &mut status)
    };

    // The job's SSH Secret is gone: a new one (a new key) is made on the
    // next pass, and every member restarts to mount it; keys of two
    // generations in one job would refuse each other. Not counted as a
    // retry: no member failed.
    if let (Some(secret), false) = (&observed.owned.lost_secret, prev.phase.is_finished()) {
        status.ssh_secret = None;
        if status.job_restart.is_none() {
            status.job_restart = Some(JobRestart {
                cause: format!(
                    "the SSH Secret {secret} was deleted: a new key is made and every member restarts with it"
                ),
                uids: pods.iter().map(|p| p.uid.clone()).collect(),
            });
        }
    }
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
            coordinator,
        };
        let decision = decide(plan, &members, &mut status, &mut roles, now, &mut lost);
        (decision.verdict, decision.actions, decision.new_restarts)
    };

    status.restarts = roles.values().map(|r| r.restarts).sum();
    let active: u32 = roles.values().map(|r| r.active).sum();
    status.active = format!("{active}/{}", wanted(plan, &roles));
    status.replicas = roles;
    status.phase = verdict.phase;

    let requeue_after = if verdict.phase.is_finished() {
        if !prev.phase.is_finished() {
            status.completion_time = Some(Time(now));
        }
        finish(plan, &pods, observed, &mut status, now, &mut actions)
    } else {
        let deadline = plan.policies.active_deadline_seconds;
        deadline
            .zip(status.start_time.as_ref())
            .and_then(|(deadline, start)| remaining(start.0, deadline, now))
    };

    let mut events = phase_events(&prev, previous.is_none(), &verdict, &lost);
    events.extend(resized);
    if !prev.phase.is_finished() {
        set_conditions(&mut status.conditions, &verdict, now);
    }
    let mismatches = size_mismatches(
        &plan.topology,
        plan.resizable().as_ref(),
        &observed.workloads,
    );
    let conditions = &mut status.conditions;
    events.extend(set_problem_condition(
        conditions,
        SIZE_PROBLEM,
        &mismatches,
        now,
    ));
    if verdict.phase.is_finished() {
        gate_finished(&mut status.conditions, now);
    } else {
        release_gated(plan, &pods, &mut status.conditions, &mut actions, now);
    }
    if let Some(secret) = &observed.owned.created_secret {
        status.ssh_secret = Some(secret.clone());
    }
    let owned = &observed.owned;
    let conditions = &mut status.conditions;
    events.extend(set_problem_condition(
        conditions,
        UNAVAILABLE_PROBLEM,
        &owned.unavailable,
        now,
    ));
    events.extend(set_lost_secret_condition(
        conditions,
        owned.lost_secret.as_deref(),
        now,
    ));
    events.extend(set_problem_condition(
        conditions,
        OWNERSHIP_PROBLEM,
        &owned.foreign,
        now,
    ));
    events.extend(set_problem_condition(
        conditions,
        REFUSED_PROBLEM,
        &owned.refused,
        now,
    ));
    events.extend(set_name_wait_condition(conditions, &pods, now));
    let unscaled = if verdict.phase.is_finished() {
        Vec::new()
    } else {
        resize_to_spec(plan, &observed.workloads, &mut actions)
    };
    events.extend(set_problem_condition(
        conditions,
        SCALE_PROBLEM,
        &unscaled,
        now,
    ));
    status.selector = plan.resizable().map(|e| {
        format!(
            "{}={},{}={}",
            crate::contract::JOB,
            plan.name,
            crate::contract::ROLE,
            e.role
        )
    });
    Outcome {
        status,
        actions,
        events,
        requeue_after,
        new_restarts,
    }
}

/// The replicas the job has now: the topology's, its elastic role's as
/// [`set_elastic_size`] found them.
pub(super) fn wanted(plan: &JobPlan, roles: &BTreeMap<String, RoleStatus>) -> u32 {
    plan.topology
        .roles()
        .map(|(r, n)| roles.get(r).and_then(|s| s.replicas).unwrap_or(n))
        .fold(0, u32::saturating_add)
}

/// The elastic role's replicas now, from its workloads (the StatefulSets'
/// replicas, the Jobs' completions; stopped ones left out), recorded in
/// its [`RoleStatus`]; where it changed since the last status, the
/// `Resized` Event. A role of bare pods keeps its count (a pod more or less
/// is a member admitted or lost, not a resize), and so does a finished
/// job. A size outside the range is recorded as it is (the
/// `MemberSizeMismatch` condition says so).
fn set_elastic_size(
    plan: &JobPlan,
    prev: &DLJobStatus,
    workloads: &[Workload],
    roles: &mut BTreeMap<String, RoleStatus>,
) -> Option<JobEvent> {
    let e = plan.resizable()?;
    let before = prev.replicas.get(e.role).and_then(|s| s.replicas);
    let declared = plan.topology.count_or_zero(e.role);
    let mut sized = false;
    let mut now = 0u32;
    for w in workloads {
        match w {
            Workload::StatefulSet { role, replicas, .. } if role == e.role => {
                sized = true;
                now = now.saturating_add(*replicas);
            }
            Workload::Job {
                role,
                suspended: false,
                completions: Some(n),
                ..
            } if role == e.role => {
                sized = true;
                now = now.saturating_add(*n);
            }
            _ => {}
        }
    }
    let now = if prev.phase.is_finished() {
        before.unwrap_or(declared)
    } else if sized && now > 0 {
        now
    } else {
        before.unwrap_or(declared)
    };
    roles.entry(e.role.to_owned()).or_default().replicas = Some(now);
    let before = before?;
    (before != now).then(|| JobEvent {
        warning: !e.range.contains(&now),
        reason: RESIZED.to_owned(),
        note: format!(
            "role {} resized from {before} to {now} replicas ({} \"{}\" allows {} to {}); the job has {} in all",
            e.role,
            crate::contract::ELASTIC,
            e.elastic,
            e.range.start(),
            e.range.end(),
            e.others.saturating_add(now)
        ),
    })
}

/// `spec.elasticReplicas` applied: the [`Action::Resize`] of the elastic
/// role's one StatefulSet or Indexed Job whose size differs from it.
/// Returns why it cannot be applied instead (for [`SCALE_NOT_APPLIED`]):
/// a size outside the range, a role of several workloads or of bare pods,
/// a job that is not elastic.
fn resize_to_spec(
    plan: &JobPlan,
    workloads: &[Workload],
    actions: &mut Vec<Action>,
) -> Vec<String> {
    let Some(wanted) = plan.scale_to else {
        return Vec::new();
    };
    let Some(e) = plan.resizable() else {
        return vec![format!(
            "spec.elasticReplicas is {wanted} but the job is not elastic (dljob.dev/elastic): its size is its members'; remove spec.elasticReplicas"
        )];
    };
    if !e.range.contains(&wanted) {
        return vec![format!(
            "spec.elasticReplicas is {wanted} but {}: kubectl scale dljob/{} --replicas=N with N within it",
            e.said(),
            plan.name
        )];
    }
    let declared = plan.topology.count_or_zero(e.role);
    if plan.fixed_total && wanted > declared {
        return vec![format!(
            "spec.elasticReplicas is {wanted} but role {} keeps at most its declared {declared}: its gang scheduler's group is the job's declared total and pods beyond it are deleted as excess (Kueue)",
            e.role
        )];
    }
    let running: Vec<(Kind, &str, &str, u32, bool)> = workloads
        .iter()
        .filter_map(|w| match w {
            Workload::StatefulSet {
                name,
                uid,
                role,
                replicas,
                offset,
                ..
            } if role == e.role && *replicas > 0 => Some((
                Kind::StatefulSet,
                name.as_str(),
                uid.as_str(),
                *replicas,
                offset.is_some(),
            )),
            Workload::Job {
                name,
                uid,
                role,
                suspended: false,
                completions,
                offset,
                ..
            } if role == e.role => Some((
                Kind::Job,
                name.as_str(),
                uid.as_str(),
                completions.unwrap_or(0),
                offset.is_some(),
            )),
            _ => None,
        })
        .collect();
    match running.as_slice() {
        [(kind, name, uid, size, false)] => {
            if *size != wanted {
                actions.push(Action::Resize {
                    kind: *kind,
                    name: (*name).to_owned(),
                    uid: (*uid).to_owned(),
                    size: wanted,
                });
            }
            Vec::new()
        }
        [] => vec![format!(
            "spec.elasticReplicas is {wanted} but role {} has no running StatefulSet or Indexed Job to resize (bare pods are created and deleted by you)",
            e.role
        )],
        several => vec![format!(
            "spec.elasticReplicas is {wanted} but role {} is split over {} ({}): resize them yourself, within the range, and remove spec.elasticReplicas",
            e.role,
            if several.len() == 1 { "a set with dljob.dev/index-offset" } else { "several workloads" },
            several.iter().map(|w| format!("{} {}", w.0.as_str(), w.1)).collect::<Vec<_>>().join(", ")
        )],
    }
}

/// The Event of an elastic role whose replicas changed.
pub const RESIZED: &str = "Resized";

/// Counts per role, every role of the topology listed, the restarts
/// carried over from the previous status.
fn role_counts(
    plan: &JobPlan,
    prev: &DLJobStatus,
    pods: &[&ObservedPod],
) -> BTreeMap<String, RoleStatus> {
    let mut roles: BTreeMap<String, RoleStatus> = plan
        .topology
        .roles()
        .map(|(r, _)| {
            let restarts = prev.replicas.get(r).map_or(0, |s| s.restarts);
            (
                r.to_owned(),
                RoleStatus {
                    restarts,
                    replicas: prev.replicas.get(r).and_then(|s| s.replicas),
                    ..RoleStatus::default()
                },
            )
        })
        .collect();
    for p in pods {
        let Some(counts) = roles.get_mut(&p.role) else {
            continue;
        };
        match (&p.container, p.exit()) {
            (Some(c), _) if c.state == ContainerState::Running => counts.active += 1,
            (_, Some(e)) if e.code == Some(0) => counts.succeeded += 1,
            (_, Some(_)) => counts.failed += 1,
            (_, None) => counts.pending += 1,
        }
    }
    roles
}

/// The coordinator's pod, if it exists; its replica, pod and exit go into
/// the status.
fn coordinator<'a>(
    plan: &JobPlan,
    pods: &[&'a ObservedPod],
    status: &mut DLJobStatus,
) -> Option<&'a ObservedPod> {
    let replica = plan.framework.coordinator(&plan.topology);
    let pod = replica.and_then(|(role, index)| {
        pods.iter()
            .find(|p| p.role == role && p.index == index)
            .copied()
    });
    status.coordinator = replica.map(|(role, index)| {
        let exit = pod.and_then(|p| p.exit());
        CoordinatorStatus {
            replica: format!("{role}-{index}"),
            pod: pod.map(|p| p.name.clone()),
            exit_code: exit.as_ref().and_then(|e| e.code),
            reason: exit.and_then(|e| e.reason),
        }
    });
    pod
}

/// What a finished job leaves: nothing pending, the clean-pod policy
/// applied, what is left marked, the saved manifests deleted, and the
/// DLJob itself once its ttl passed. Returns when to look again for the
/// ttl.
fn finish(
    plan: &JobPlan,
    pods: &[&ObservedPod],
    observed: &Observed,
    status: &mut DLJobStatus,
    now: Timestamp,
    actions: &mut Vec<Action>,
) -> Option<Duration> {
    status.pending_recreates.clear();
    status.job_restart = None;
    let since = status
        .completion_time
        .as_ref()
        .and_then(|t| now.duration_since(t.0).try_into().ok())
        // No completion time, or one ahead of this clock: waited enough.
        .unwrap_or(finish::SETTLE);
    let cleaned = clean_up(plan.policies.clean_pod, pods, observed, since, actions);
    mark_finished(
        plan.policies.clean_pod,
        pods,
        observed,
        &cleaned.left_to_complete,
        actions,
    );
    actions.extend(
        observed
            .saved
            .iter()
            .map(|t| Action::DeleteSaved { saved: t.clone() }),
    );
    let ttl = plan.policies.ttl_seconds_after_finished.and_then(|ttl| {
        let done = status.completion_time.as_ref()?;
        let left = remaining(done.0, ttl, now);
        if left.is_none() {
            actions.push(Action::DeleteDLJob);
        }
        left
    });
    [ttl, cleaned.again].into_iter().flatten().min()
}

/// The phase's Event when the phase changed (or on the first status), and
/// one about bare pods that cannot be recreated.
fn phase_events(
    prev: &DLJobStatus,
    first: bool,
    verdict: &Verdict,
    lost: &[String],
) -> Vec<JobEvent> {
    let mut events = Vec::new();
    if prev.phase != verdict.phase || first {
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
                "bare pod(s) {} cannot be recreated: the manifest dljob saved to recreate them from (a PodTemplate owned by this DLJob) is gone or was changed since; create them again from your manifests",
                lost.join(", ")
            ),
        });
    }
    events
}
/// Time left until `start + seconds`, None when it has passed.
pub(super) fn remaining(start: Timestamp, seconds: u32, now: Timestamp) -> Option<Duration> {
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
pub(super) fn describe(p: &ObservedPod, e: &Exit) -> String {
    let code = e.code.map_or("without an exit code".to_owned(), |c| {
        format!("with exit code {c}")
    });
    match &e.reason {
        Some(r) => format!("{} (pod {}) exited {code} ({r})", p.replica(), p.name),
        None => format!("{} (pod {}) exited {code}", p.replica(), p.name),
    }
}
