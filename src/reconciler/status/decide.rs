//! The phase of an unfinished job: the coordinator's success, a permanent
//! exit, the deadline, then the retries — counted once each, planned as
//! deletions (bare pods saved first) and recreations.

use super::classify;
use super::describe;
use super::remaining;
use super::Action;
use super::ExitClass;
use super::JobPlan;
use super::ObservedPod;
use super::Verdict;
use crate::contract::RestartPolicy;
use crate::contract::RestartScope;
use crate::crd::DLJobStatus;
use crate::crd::JobRestart;
use crate::crd::PendingRecreate;
use crate::crd::Phase;
use crate::crd::RoleStatus;
use crate::crd::SavedPod;
use crate::member::PodOwner;
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeMap;

/// Records that bare pod `p`, about to be deleted for a retry, is to come
/// back from its manifest once it is gone, and has the manifest saved
/// first unless it was (the deletion that follows waits for the save).
pub(super) fn recreate_later(
    pending: &mut Vec<PendingRecreate>,
    actions: &mut Vec<Action>,
    p: &ObservedPod,
) {
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
pub(super) struct Members<'a> {
    /// Those not being deleted, by name.
    pub(super) live: &'a [&'a ObservedPod],
    /// Every observed pod, terminating ones included.
    pub(super) all: &'a [ObservedPod],
    /// The saved manifests.
    pub(super) saved: &'a [SavedPod],
    /// The coordinator's pod, if it exists.
    pub(super) coordinator: Option<&'a ObservedPod>,
}

/// What [`decide`] concluded about an unfinished job.
pub(super) struct Decision {
    pub(super) verdict: Verdict,
    /// The retries to make (pods to delete or recreate).
    pub(super) actions: Vec<Action>,
    /// Restarts counted by this decision.
    pub(super) new_restarts: u32,
}

/// The phase of an unfinished job; counts restarts (in `status`'s counted
/// exits and `roles`) and plans retries. In order: the coordinator's 0
/// succeeds the job, a permanent exit fails it, so does the active
/// deadline; then each retryable exit is counted once and retried (or the
/// backoff limit fails the job), and bare pods deleted for a retry come
/// back.
pub(super) fn decide(
    plan: &JobPlan,
    members: &Members<'_>,
    status: &mut DLJobStatus,
    roles: &mut BTreeMap<String, RoleStatus>,
    now: Timestamp,
    lost: &mut Vec<String>,
) -> Decision {
    // Pods being deleted for a whole-job restart: what they do no longer
    // counts (a rank whose peer died often exits 1 on its own).
    let restart_uids: Vec<String> = status
        .job_restart
        .as_ref()
        .map(|r| r.uids.clone())
        .unwrap_or_default();
    let counting: Vec<&ObservedPod> = members
        .live
        .iter()
        .copied()
        .filter(|p| !restart_uids.contains(&p.uid))
        .collect();
    let finished = coordinator_succeeded(members.coordinator)
        .or_else(|| permanent_exit(plan, &counting, status))
        .or_else(|| past_deadline(plan, status, now));
    if let Some(verdict) = finished {
        return Decision::finished(verdict);
    }
    let mut retry = Retry::default();
    if let Err(verdict) = count_retries(plan, &counting, status, roles, &mut retry) {
        return Decision::finished(verdict);
    }
    let restart_cause = restart_whole_job(members.all, status, &mut retry);
    // Forget counted exits of pods that are gone.
    status
        .counted_exits
        .retain(|name, _| members.live.iter().any(|p| &p.name == name));
    recreate_bare(members, status, &mut retry, lost);

    let verdict = progress(plan, status.phase, roles, &retry, restart_cause);
    Decision {
        verdict,
        actions: retry.actions,
        new_restarts: retry.new_restarts,
    }
}

impl Decision {
    /// The job finished: nothing to retry.
    fn finished(verdict: Verdict) -> Self {
        Decision {
            verdict,
            actions: Vec::new(),
            new_restarts: 0,
        }
    }
}

/// What the retries of one decision amount to.
#[derive(Default)]
struct Retry {
    actions: Vec<Action>,
    /// Restarts counted by this decision.
    new_restarts: u32,
    /// Restarts used so far, these included.
    used: u32,
    /// Something is being retried (the job is Restarting).
    retrying: bool,
}

/// The coordinator's 0 finishes the job.
fn coordinator_succeeded(coordinator: Option<&ObservedPod>) -> Option<Verdict> {
    let p = coordinator?;
    let e = p.exit().filter(|e| e.code == Some(0))?;
    Some(Verdict {
        phase: Phase::Succeeded,
        reason: "CoordinatorSucceeded",
        message: describe(p, &e),
    })
}

/// A permanent exit of any member fails the job — unless, with restart
/// scope Job, a new retryable exit is seen at the same moment: a rank whose
/// peer was killed typically exits 1 then, and which came first cannot be
/// told, so the job restarts.
fn permanent_exit(plan: &JobPlan, pods: &[&ObservedPod], status: &DLJobStatus) -> Option<Verdict> {
    let policy = plan.policies.restart;
    let job_retry = plan.policies.restart_scope == RestartScope::Job
        && pods.iter().any(|p| {
            p.exit().is_some_and(|e| {
                classify(e.code, policy) == ExitClass::Retryable
                    && status.counted_exits.get(&p.name) != Some(&p.exit_key(&e))
            })
        });
    if job_retry {
        return None;
    }
    pods.iter().find_map(|p| {
        let e = p
            .exit()
            .filter(|e| classify(e.code, policy) == ExitClass::Permanent)?;
        let reason = if policy == RestartPolicy::Never && e.code.is_none_or(|c| c > 127) {
            "RestartPolicyNever"
        } else {
            "ExitCode"
        };
        Some(Verdict {
            phase: Phase::Failed,
            reason,
            message: describe(p, &e),
        })
    })
}

/// The active deadline has passed.
fn past_deadline(plan: &JobPlan, status: &DLJobStatus, now: Timestamp) -> Option<Verdict> {
    let deadline = plan.policies.active_deadline_seconds?;
    let start = status.start_time.as_ref()?;
    remaining(start.0, deadline, now)
        .is_none()
        .then(|| Verdict {
            phase: Phase::Failed,
            reason: "DeadlineExceeded",
            message: format!("the job ran longer than its active deadline of {deadline}s"),
        })
}

/// Retryable exits: each counted once (the backoff limit reached fails the
/// job: `Err`), the pod deleted to run again (a bare one saved first). With
/// restart scope Job the first new one starts a whole-job restart instead.
fn count_retries(
    plan: &JobPlan,
    pods: &[&ObservedPod],
    status: &mut DLJobStatus,
    roles: &mut BTreeMap<String, RoleStatus>,
    retry: &mut Retry,
) -> Result<(), Verdict> {
    let policy = plan.policies.restart;
    retry.used = roles.values().map(|r| r.restarts).sum();
    for p in pods {
        let Some(e) = p.exit() else { continue };
        if classify(e.code, policy) != ExitClass::Retryable {
            continue;
        }
        let key = p.exit_key(&e);
        if status.counted_exits.get(&p.name) != Some(&key) {
            if retry.used >= plan.policies.backoff_limit {
                return Err(Verdict {
                    phase: Phase::Failed,
                    reason: "BackoffLimitExceeded",
                    message: format!(
                        "{}; the backoff limit of {} restarts is reached",
                        describe(p, &e),
                        plan.policies.backoff_limit
                    ),
                });
            }
            retry.used += 1;
            retry.new_restarts += 1;
            if let Some(r) = roles.get_mut(&p.role) {
                r.restarts += 1;
            }
            status.counted_exits.insert(p.name.clone(), key);
            retry.retrying = true;
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
            retry.retrying = true;
            delete_for_retry(p, &mut status.pending_recreates, &mut retry.actions);
        }
    }
    Ok(())
}

/// Deletes `p` to run again; a bare pod is recreated from its saved
/// manifest once gone.
fn delete_for_retry(
    p: &ObservedPod,
    pending: &mut Vec<PendingRecreate>,
    actions: &mut Vec<Action>,
) {
    if p.owner == PodOwner::None {
        recreate_later(pending, actions, p);
    }
    if !p.deleting {
        actions.push(Action::DeletePod {
            name: p.name.clone(),
            uid: p.uid.clone(),
        });
    }
}

/// A whole-job restart deletes every pod it covers while it exists (bare
/// ones come back from their own spec); it is over once they are all gone.
/// Returns its cause, for the message.
fn restart_whole_job(
    all: &[ObservedPod],
    status: &mut DLJobStatus,
    retry: &mut Retry,
) -> Option<String> {
    let restart = status.job_restart.as_mut()?;
    restart.uids.retain(|uid| all.iter().any(|p| &p.uid == uid));
    for p in all.iter().filter(|p| restart.uids.contains(&p.uid)) {
        retry.retrying = true;
        delete_for_retry(p, &mut status.pending_recreates, &mut retry.actions);
    }
    let cause = restart.cause.clone();
    if restart.uids.is_empty() {
        status.job_restart = None;
    }
    Some(cause)
}

/// Bare pods deleted for a retry come back from their own spec, once the
/// old pod (maybe still terminating) is gone. One whose saved manifest is
/// gone (deleted by hand) cannot: it is dropped, and said (`lost`). A saved
/// manifest no recreate needs (its pod is back, was given up, or it was
/// saved twice) goes.
fn recreate_bare(
    members: &Members<'_>,
    status: &mut DLJobStatus,
    retry: &mut Retry,
    lost: &mut Vec<String>,
) {
    let Members { all, saved, .. } = *members;
    status.pending_recreates.retain(|r| {
        match all.iter().find(|p| p.name == r.name) {
            Some(p) => p.uid == r.uid, // still the old one: keep waiting
            None => true,
        }
    });
    status.pending_recreates.retain(|r| {
        let gone = !all.iter().any(|p| p.name == r.name);
        let from = r.saved.as_ref().filter(|s| saved.iter().any(|t| s.is(t)));
        match (gone, from) {
            (true, None) => {
                lost.push(r.name.clone());
                return false;
            }
            (true, Some(s)) => retry.actions.push(Action::CreatePod {
                name: r.name.clone(),
                saved: s.clone(),
            }),
            (false, _) => {}
        }
        retry.retrying = true;
        true
    });
    for t in saved {
        let needed = status
            .pending_recreates
            .iter()
            .any(|r| r.saved.as_ref().is_some_and(|s| s.is(t)));
        if !needed {
            retry.actions.push(Action::DeleteSaved { saved: t.clone() });
        }
    }
}

/// The phase of a job that goes on: Restarting while retries are under
/// way (and until every replica is back), Running once all started, else
/// Pending.
fn progress(
    plan: &JobPlan,
    prev: Phase,
    roles: &BTreeMap<String, RoleStatus>,
    retry: &Retry,
    restart_cause: Option<String>,
) -> Verdict {
    let want = super::wanted(plan, roles);
    let active: u32 = roles.values().map(|r| r.active).sum();
    let limit = plan.policies.backoff_limit;
    let used = retry.used;
    if retry.retrying || (prev == Phase::Restarting && active < want) {
        Verdict {
            phase: Phase::Restarting,
            reason: "Restarting",
            message: match restart_cause {
                Some(cause) => format!(
                    "restarting every member (restart scope Job) after {cause}: {used} of {limit} restarts used"
                ),
                None => format!("retrying after a retryable exit: {used} of {limit} restarts used"),
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
    }
}
