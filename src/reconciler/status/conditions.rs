//! The DLJob's conditions: the phase's own, and the problems reported
//! while they last (one Warning Event when they appear or change).

use super::JobEvent;
use super::Verdict;
use crate::crd::Phase;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

pub(super) const CONDITION_TYPES: [&str; 5] =
    ["Created", "Running", "Restarting", "Succeeded", "Failed"];

/// Sets the conditions for `verdict`: the phase's condition True, the others
/// that exist False; `lastTransitionTime` moves only when a status flips.
pub(super) fn set_conditions(conditions: &mut Vec<Condition>, verdict: &Verdict, now: Timestamp) {
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
    // A job that succeeded between two looks (a launcher that lived 2 s)
    // ran: that is recorded, not a jump from Pending to Succeeded.
    if verdict.phase == Phase::Succeeded && !conditions.iter().any(|c| c.type_ == "Running") {
        set_condition(
            conditions,
            now,
            [
                "Running",
                "False",
                verdict.phase.as_str(),
                "ran and finished before it was seen running",
            ],
        );
    }
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

/// The condition saying an owned object's kind is not served.
pub const OWNED_UNAVAILABLE: &str = "GangUnavailable";

/// The problem condition [`OWNED_UNAVAILABLE`], set from the owned objects
/// the cluster does not serve (each a message naming what to install); see
/// [`set_problem_condition`].
pub(super) const UNAVAILABLE_PROBLEM: Problem = Problem {
    type_: OWNED_UNAVAILABLE,
    reason: "PodGroupNotApplied",
    cleared_reason: "PodGroupServed",
    cleared_message: "the gang scheduler's PodGroup is kept",
};

/// The condition saying an object dljob keeps for the job (its Service,
/// SSH Secret, TensorBoard, Volcano's ConfigMap) was refused by the API
/// server or not kept whole.
pub const OWNED_REFUSED: &str = "OwnedObjectRefused";

/// The problem condition [`OWNED_REFUSED`], set from the owned objects
/// refused (each a message naming it, the API server's words and the way
/// out).
pub(super) const REFUSED_PROBLEM: Problem = Problem {
    type_: OWNED_REFUSED,
    reason: "RefusedByAPIServer",
    cleared_reason: "OwnedObjectsWritten",
    cleared_message: "every object dljob keeps for the job is written",
};

/// The condition saying an object dljob would keep for the job exists and
/// is not this DLJob's: left alone.
pub const OWNERSHIP_CONFLICT: &str = "OwnershipConflict";

/// The problem condition [`OWNERSHIP_CONFLICT`], set from the objects of
/// the job's names that this DLJob does not control (each a message naming
/// the object, whose it is and the fix).
pub(super) const OWNERSHIP_PROBLEM: Problem = Problem {
    type_: OWNERSHIP_CONFLICT,
    reason: "NotControlledByThisJob",
    cleared_reason: "OwnedObjectsKept",
    cleared_message: "every object dljob keeps for the job is this DLJob's",
};

/// The condition saying the job's SSH Secret was deleted.
pub const SSH_SECRET_LOST: &str = "SSHSecretLost";

/// Sets [`SSH_SECRET_LOST`] while the recorded SSH Secret is found gone;
/// see [`set_problem_condition`].
pub fn set_lost_secret_condition(
    conditions: &mut Vec<Condition>,
    lost: Option<&str>,
    now: Timestamp,
) -> Option<JobEvent> {
    let problems: Vec<String> = lost
        .map(|s| {
            format!(
                "the SSH Secret {s} the members mount was deleted, so a pod started now cannot mount it; dljob makes a new one with a new key and restarts every member (not counted as a retry). Do not delete it while the job runs: the DLJob owns it and deleting the DLJob deletes it"
            )
        })
        .into_iter()
        .collect();
    set_problem_condition(
        conditions,
        Problem {
            type_: SSH_SECRET_LOST,
            reason: "SecretDeleted",
            cleared_reason: "SecretRecreated",
            cleared_message: "the job's SSH Secret is there again",
        },
        &problems,
        now,
    )
}

/// The condition saying that members' wait for their names gave up or
/// cannot run.
pub const NAME_WAIT_FAILED: &str = "NameWaitFailed";

/// Pods named at most in [`NAME_WAIT_FAILED`]'s message.
const NAME_WAIT_PODS_SAID: usize = 5;

/// Sets [`NAME_WAIT_FAILED`] from the pods whose init container
/// `dljob-wait-for-names` gave up (their framework started without its
/// names) or cannot run (their framework does not start); see
/// [`set_problem_condition`]. At most [`NAME_WAIT_PODS_SAID`] pods are
/// named, then how many more; then what to check, once.
pub(super) fn set_name_wait_condition(
    conditions: &mut Vec<Condition>,
    pods: &[&super::ObservedPod],
    now: Timestamp,
) -> Option<JobEvent> {
    let failed: Vec<(&str, &str)> = pods
        .iter()
        .filter_map(|p| Some((p.name.as_str(), p.name_wait.as_deref()?)))
        .collect();
    let mut problems: Vec<String> = failed
        .iter()
        .take(NAME_WAIT_PODS_SAID)
        .map(|(pod, what)| {
            format!(
                "pod {pod}: {} {what}",
                crate::contract::WAIT_FOR_NAMES_CONTAINER
            )
        })
        .collect();
    if failed.len() > NAME_WAIT_PODS_SAID {
        problems.push(format!("{} more pods", failed.len() - NAME_WAIT_PODS_SAID));
    }
    let gave_up = failed.iter().any(|(_, w)| w.starts_with("gave up"));
    let cannot_run = failed.iter().any(|(_, w)| w.starts_with("cannot run"));
    if gave_up {
        problems.push("a pod whose wait gave up started its framework without its names: check the job's headless Service, that dljob's reconciler runs, that the pods are scheduled".to_owned());
    }
    if cannot_run {
        problems.push("a pod whose wait cannot run does not start: its image is dljob's (waitForNamesImage in dljob's config, by default the one dljob runs from), which every node that runs members must be able to pull, or else set dljob.dev/wait-for-names: \"false\" on the members".to_owned());
    }
    set_problem_condition(
        conditions,
        Problem {
            type_: NAME_WAIT_FAILED,
            reason: if cannot_run { "CannotRun" } else { "GaveUp" },
            cleared_reason: "NamesWaitedFor",
            cleared_message: "no member's wait for its names failed",
        },
        &problems,
        now,
    )
}

/// The condition saying that the DLJob's `spec.elasticReplicas` (the
/// scale subresource) cannot be applied, and why.
pub const SCALE_NOT_APPLIED: &str = "ScaleNotApplied";

/// The problem condition [`SCALE_NOT_APPLIED`], set from why
/// `spec.elasticReplicas` cannot be applied.
pub(super) const SCALE_PROBLEM: Problem = Problem {
    type_: SCALE_NOT_APPLIED,
    reason: "CannotScale",
    cleared_reason: "Scaled",
    cleared_message: "spec.elasticReplicas is applied, or unset",
};

/// A condition that reports problems while there are any.
pub(super) struct Problem {
    pub(super) type_: &'static str,
    pub(super) reason: &'static str,
    pub(super) cleared_reason: &'static str,
    pub(super) cleared_message: &'static str,
}

/// Sets `problem`'s condition True with `problems` as its message, or False
/// once they are gone (only if it was ever set). Returns the Warning Event
/// to publish: once when the problems appear or change, not on every
/// reconcile.
pub(super) fn set_problem_condition(
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

/// Sets one condition: [type, status, reason, message].
pub(super) fn set_condition(
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
