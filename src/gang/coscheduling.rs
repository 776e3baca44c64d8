//! The scheduler-plugins coscheduling plugin (scheduling.x-k8s.io, v0.25
//! and later): pods labelled with their PodGroup's name, scheduled by the
//! scheduler running the plugin; the reconciler keeps the PodGroup with
//! `minMember`. The plugin denies a labelled pod whose PodGroup does not
//! exist yet, and retries it: it waits until the reconciler made it.

use serde_json::{json, Value};

use super::{Group, PodGroupKind, PodMarks, Scheduler};

/// The pod label naming its PodGroup.
pub(crate) const GROUP_LABEL: &str = "scheduling.x-k8s.io/pod-group";

pub(crate) struct Coscheduling;

impl Scheduler for Coscheduling {
    fn name(&self) -> &'static str {
        "coscheduling"
    }
    /// The plugin's Helm chart runs it as a second scheduler named
    /// `scheduler-plugins-scheduler`; the config's `schedulerNames` says
    /// otherwise (an empty name leaves `schedulerName` alone, for a
    /// cluster whose default scheduler runs the plugin).
    fn pod(&self, group: &Group<'_>) -> PodMarks {
        PodMarks {
            labels: vec![(GROUP_LABEL, group.name.to_owned())],
            annotations: Vec::new(),
            scheduler_name: Some("scheduler-plugins-scheduler"),
            scheduling_group: None,
        }
    }
    fn pod_group_kind(&self) -> Option<PodGroupKind> {
        Some(PodGroupKind {
            group: "scheduling.x-k8s.io",
            version: "v1alpha1",
            kind: "PodGroup",
            plural: "podgroups",
        })
    }
    fn pod_group_spec(&self, group: &Group<'_>, min_resources: Option<&Value>) -> Value {
        let mut spec = json!({"minMember": group.min_member});
        if let Some(r) = min_resources {
            spec["minResources"] = r.clone();
        }
        spec
    }
    fn install_hint(&self) -> &'static str {
        "install scheduler-plugins' CRDs and the coscheduling plugin (https://github.com/kubernetes-sigs/scheduler-plugins/blob/master/doc/install.md), or set dljob.dev/gang to another scheduler on every member"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gang::test_support::group;

    #[test]
    fn pods_carry_the_group_label_and_the_group_its_minimum() {
        let g = group(4, 4, None);
        assert_eq!(
            Coscheduling.pod(&g),
            PodMarks {
                labels: vec![("scheduling.x-k8s.io/pod-group", "mnist".into())],
                annotations: vec![],
                scheduler_name: Some("scheduler-plugins-scheduler"),
                scheduling_group: None,
            }
        );
        assert_eq!(
            Coscheduling.pod_group_spec(&g, None),
            json!({"minMember": 4})
        );
    }
}
