//! What a finished job does to its members: the clean-pod policy, then
//! the mark of the finished run on what is left.

use super::Action;
use super::Observed;
use super::ObservedPod;
use super::Workload;
use crate::contract::CleanPodPolicy;
use crate::member::PodOwner;
use crate::object::Kind;
use std::time::Duration;

/// How long after the job finished a Job member's suspension waits for a
/// pod whose framework container exited 0 to be marked Succeeded by its
/// kubelet: suspending a Job deletes its pods that are not yet, and a
/// deleted pod's log is gone.
pub(super) const SETTLE: Duration = Duration::from_secs(30);
/// How soon to look again while a suspension waits.
const SETTLE_POLL: Duration = Duration::from_secs(2);

/// What the clean-up did besides its actions.
#[derive(Default)]
pub(super) struct CleanUp {
    /// Jobs left as they are: every index's pod succeeded (it completes
    /// on its own), or the Job has finished by itself.
    pub(super) left_to_complete: Vec<String>,
    /// When to look again: a suspension waits for a pod to settle.
    pub(super) again: Option<Duration>,
}

/// The clean-pod policy on a finished job; every action is skipped once
/// done. `since` is how long ago the job finished. Jobs are suspended under
/// every policy (see below); StatefulSets and pods are the policy's.
///
/// A Job member is suspended to stop what still runs, but not when every
/// index's pod has already succeeded (the Job completes by itself, and its
/// pods and their logs stay), and not yet while a pod whose framework
/// container exited 0 is still Running to its kubelet (for at most
/// [`SETTLE`]): suspending deletes such a pod, and its log with it.
pub(super) fn clean_up(
    policy: CleanPodPolicy,
    pods: &[&ObservedPod],
    observed: &Observed,
    since: Duration,
    actions: &mut Vec<Action>,
) -> CleanUp {
    let mut out = CleanUp::default();
    // Under every policy a Job member that has not completed is suspended:
    // once the job is final no member starts again, and the Job controller
    // would otherwise replace a failed pod (up to its backoffLimit) and
    // train again for a job that has ended. Suspension deletes only what
    // still runs or waits, so under None every finished pod stays.
    let stops = policy != CleanPodPolicy::None;
    for w in &observed.workloads {
        match w {
            Workload::StatefulSet {
                name,
                uid,
                replicas,
                ..
            } if stops && *replicas > 0 => actions.push(Action::ScaleStatefulSetToZero {
                name: name.clone(),
                uid: uid.clone(),
                from: *replicas,
            }),
            // Finished on its own (its backoffLimit, a FailJob rule, every
            // index done): it starts nothing again, and stays as it is.
            Workload::Job {
                uid,
                suspended: false,
                finished: true,
                ..
            } => out.left_to_complete.push(uid.clone()),
            Workload::Job {
                name,
                uid,
                suspended,
                role,
                completions,
                offset,
                ..
            } if !suspended => {
                let first = offset.unwrap_or(0);
                let of_job: Vec<&&ObservedPod> = pods
                    .iter()
                    .filter(|p| p.owner == PodOwner::Job && &p.role == role)
                    .filter(|p| {
                        p.index >= first && completions.is_some_and(|n| p.index - first < n)
                    })
                    .collect();
                // Succeeded pods only: one whose framework exited 0 but that
                // another container keeps Running would keep the Job (and
                // what it holds) forever; it settles, or is stopped.
                let done = completions.is_some_and(|n| {
                    (first..first + n).all(|i| {
                        of_job
                            .iter()
                            .any(|p| p.index == i && p.phase == "Succeeded")
                    })
                });
                if done {
                    out.left_to_complete.push(uid.clone());
                } else if since < SETTLE && of_job.iter().any(|p| p.settling()) {
                    out.again = Some(SETTLE_POLL);
                } else {
                    actions.push(Action::SuspendJob {
                        name: name.clone(),
                        uid: uid.clone(),
                    });
                }
            }
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
    out
}

/// Marks what is left of a finished run once the clean-pod policy has run
/// ([`c::FINISHED_RUN`]): every pod it does not delete, and every workload
/// it does not stop. A pod of a StatefulSet being scaled to 0 goes with it;
/// a workload stopped (0 replicas, suspended) is not live and makes no new
/// run until it is started again, as a new run. Each is marked once.
pub(super) fn mark_finished(
    policy: CleanPodPolicy,
    pods: &[&ObservedPod],
    observed: &Observed,
    left_to_complete: &[String],
    actions: &mut Vec<Action>,
) {
    // The uids the actions already delete (pods) and suspend (Jobs).
    let (mut deleted, mut suspended) = (Vec::new(), Vec::new());
    for a in actions.iter() {
        match a {
            Action::DeletePod { uid, .. } => deleted.push(uid.as_str()),
            Action::SuspendJob { uid, .. } => suspended.push(uid.as_str()),
            _ => {}
        }
    }
    let stopping = policy != CleanPodPolicy::None;
    let mut marks = Vec::new();
    for p in pods {
        // Jobs are suspended under every policy (a Job left to complete
        // has no unfinished pod): what still runs in one goes with it.
        let goes = deleted.contains(&p.uid.as_str())
            || (stopping && p.owner == PodOwner::StatefulSet)
            || (p.owner == PodOwner::Job && !p.finished());
        if !p.marked && !goes {
            marks.push(Action::MarkFinished {
                kind: Kind::Pod,
                name: p.name.clone(),
                uid: p.uid.clone(),
            });
        }
    }
    for w in &observed.workloads {
        // Stopped (or being stopped) by the policy: not live. A Job left to
        // complete on its own is live, and marked.
        let (kind, name, uid, marked, live) = match w {
            Workload::StatefulSet {
                name,
                uid,
                marked,
                replicas,
                ..
            } => (Kind::StatefulSet, name, uid, *marked, *replicas > 0),
            Workload::Job {
                name,
                uid,
                marked,
                suspended,
                ..
            } => (Kind::Job, name, uid, *marked, !suspended),
        };
        let left = kind == Kind::Job && left_to_complete.contains(uid);
        let stopped = kind == Kind::Job && suspended.contains(&uid.as_str());
        if live && !marked && !stopped && (!stopping || left) {
            marks.push(Action::MarkFinished {
                kind,
                name: name.clone(),
                uid: uid.clone(),
            });
        }
    }
    actions.extend(marks);
}
