//! What a finished job does to its members: the clean-pod policy, then
//! the mark of the finished run on what is left.

use super::*;

/// The clean-pod policy on a finished job; every action is skipped once done.
pub(super) fn clean_up(
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
pub(super) fn mark_finished(
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
