//! The gated role (mpi's launcher, chainer's master): held by dljob's
//! scheduling gate until every other member runs.

use super::set_condition;
use super::Action;
use super::ContainerState;
use super::JobPlan;
use super::ObservedPod;
use crate::contract as c;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;

/// The condition saying why a launcher waits (frameworks with a gated role).
pub const LAUNCHER_GATED: &str = "LauncherGated";

/// The gated role's pods (mpi's launcher, chainer's master) start once every
/// other member's framework container runs: until then the condition says
/// what they wait for; then their scheduling gates are removed.
pub(super) fn release_gated(
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
        stop_waiting(
            conditions,
            now,
            "WorkersRunning",
            &format!("every other member ran; the {gated_role} started"),
        );
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

/// A job that finished before its launcher started says so in the
/// condition.
pub(super) fn gate_finished(conditions: &mut Vec<Condition>, now: Timestamp) {
    stop_waiting(
        conditions,
        now,
        "JobFinished",
        "the job finished before its launcher started",
    );
}

/// A condition that says the launcher waits is set to False with `reason`;
/// one that does not is left alone.
fn stop_waiting(conditions: &mut Vec<Condition>, now: Timestamp, reason: &str, message: &str) {
    if conditions
        .iter()
        .any(|c| c.type_ == LAUNCHER_GATED && c.status == "True")
    {
        set_condition(conditions, now, [LAUNCHER_GATED, "False", reason, message]);
    }
}
