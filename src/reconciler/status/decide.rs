//! The phase of an unfinished job: the coordinator's success, a permanent
//! exit, the deadline, then the retries — counted once each, planned as
//! deletions (bare pods saved first) and recreations.

use super::*;

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
/// exits and `roles`) and plans retries.
pub(super) fn decide(
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
