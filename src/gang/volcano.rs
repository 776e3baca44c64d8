//! Volcano (scheduling.volcano.sh): pods scheduled by the `volcano`
//! scheduler, each naming its PodGroup in an annotation; the reconciler
//! keeps the PodGroup with `minMember` (and `minResources`). A pod whose
//! PodGroup does not exist yet stays Pending until it does.

use serde_json::{json, Value};

use super::{Group, PodGroupKind, PodMarks, Scheduler};

/// The pod annotation naming its PodGroup.
pub(crate) const GROUP_NAME: &str = "scheduling.k8s.io/group-name";

pub(crate) struct Volcano;

impl Scheduler for Volcano {
    fn name(&self) -> &'static str {
        "volcano"
    }
    fn pod(&self, group: &Group<'_>) -> PodMarks {
        PodMarks {
            labels: Vec::new(),
            annotations: vec![(GROUP_NAME, group.name.to_owned())],
            scheduler_name: Some("volcano"),
            scheduling_group: None,
        }
    }
    fn pod_group_kind(&self) -> Option<PodGroupKind> {
        Some(PodGroupKind {
            group: "scheduling.volcano.sh",
            version: "v1beta1",
            kind: "PodGroup",
            plural: "podgroups",
        })
    }
    fn pod_group_spec(&self, group: &Group<'_>, min_resources: Option<&Value>) -> Value {
        let mut spec = json!({"minMember": group.min_member});
        if let Some(queue) = group.queue {
            spec["queue"] = json!(queue);
        }
        if let Some(r) = min_resources {
            spec["minResources"] = r.clone();
        }
        spec
    }
    fn install_hint(&self) -> &'static str {
        "install Volcano (https://volcano.sh/en/docs/installation/), or set dljob.dev/gang to another scheduler on every member"
    }
    fn queues(&self) -> bool {
        true
    }
    fn topology_refusal(&self, _required: bool) -> Option<String> {
        Some("Volcano keeps a job together by tiers of its HyperNodes (the PodGroup's spec.networkTopology), not by a node label, and dljob does not declare those; use dljob.dev/gang: kubernetes or kueue for a node label".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gang::test_support::group;

    #[test]
    fn pods_name_their_group_and_the_group_its_minimum() {
        let g = group(8, 9, Some("research"));
        assert_eq!(
            Volcano.pod(&g),
            PodMarks {
                labels: vec![],
                annotations: vec![("scheduling.k8s.io/group-name", "mnist".into())],
                scheduler_name: Some("volcano"),
                scheduling_group: None,
            }
        );
        let resources = json!({"cpu": "16", "nvidia.com/gpu": "8"});
        assert_eq!(
            Volcano.pod_group_spec(&g, Some(&resources)),
            json!({"minMember": 8, "queue": "research", "minResources": {"cpu": "16", "nvidia.com/gpu": "8"}})
        );
        assert_eq!(
            Volcano.pod_group_spec(&group(3, 3, None), None),
            json!({"minMember": 3})
        );
    }
}
