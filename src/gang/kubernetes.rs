//! Kubernetes' own gang scheduling (`scheduling.k8s.io/v1alpha2`, alpha in
//! 1.36 behind the feature gates `GenericWorkload` and `GangScheduling`):
//! a standalone PodGroup with `spec.schedulingPolicy.gang.minCount`, joined
//! by a pod through `spec.schedulingGroup.podGroupName`, which the API
//! server lets be set only at creation — so admission is where it is set.
//! kube-scheduler then binds the group all or nothing; no other scheduler
//! is involved. The PodGroup has no resource field: the gang is a count.

use serde_json::{json, Value};

use super::{Group, PodGroupKind, PodMarks, Scheduler};

pub(crate) struct Kubernetes;

impl Scheduler for Kubernetes {
    fn name(&self) -> &'static str {
        "kubernetes"
    }
    fn pod(&self, group: &Group<'_>) -> PodMarks {
        PodMarks {
            labels: Vec::new(),
            annotations: Vec::new(),
            // kube-scheduler itself: the pod keeps its scheduler.
            scheduler_name: None,
            scheduling_group: Some(group.name.to_owned()),
        }
    }
    fn pod_group_kind(&self) -> Option<PodGroupKind> {
        Some(PodGroupKind {
            group: "scheduling.k8s.io",
            version: "v1alpha2",
            kind: "PodGroup",
            plural: "podgroups",
        })
    }
    /// With a topology (1.36's `TopologyAwareWorkloadScheduling` gate):
    /// every pod of the group in one domain of the node label.
    fn pod_group_spec(&self, group: &Group<'_>, _min_resources: Option<&Value>) -> Value {
        let mut spec = json!({"schedulingPolicy": {"gang": {"minCount": group.min_member}}});
        if let Some((key, _)) = group.topology {
            spec["schedulingConstraints"] = json!({"topology": [{"key": key}]});
        }
        spec
    }
    fn topology_refusal(&self, required: bool) -> Option<String> {
        (!required).then(|| {
            "the kubernetes gang's topology constraint is a requirement only (every pod in one domain); write dljob.dev/topology without \"preferred:\"".to_owned()
        })
    }
    /// Its PodGroup has no resource field.
    fn wants_min_resources(&self) -> bool {
        false
    }
    fn install_hint(&self) -> &'static str {
        "Kubernetes 1.36 or later serves it with the feature gates GenericWorkload=true and GangScheduling=true on kube-apiserver and kube-scheduler and --runtime-config=scheduling.k8s.io/v1alpha2=true on kube-apiserver (1.35's alpha, scheduling.k8s.io/v1alpha1 with spec.workloadRef, is not supported); until then the pods are scheduled one by one, or set dljob.dev/gang to another scheduler on every member"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gang::test_support::group;

    /// The PodGroup as the 1.36 API server stored it
    /// (tests/fixtures/cluster/native-gang/podgroup-scheduled.json) and
    /// the pod's field as it read it back (pod-in-group-bound.json).
    #[test]
    fn pods_join_the_group_by_name_and_the_group_is_a_min_count() {
        let fixtures = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/cluster/native-gang/"
        );
        let read = |f: &str| -> Value {
            serde_json::from_str(&std::fs::read_to_string(format!("{fixtures}{f}")).unwrap())
                .unwrap()
        };
        let stored = read("podgroup-scheduled.json");
        let pod = read("pod-in-group-bound.json");
        let g = crate::gang::Group::new("ddp", 3, None, 0, None);
        let spec = Kubernetes.pod_group_spec(&g, None);
        assert_eq!(spec, json!({"schedulingPolicy": {"gang": {"minCount": 3}}}));
        assert_eq!(stored["spec"]["schedulingPolicy"], spec["schedulingPolicy"]);
        let kind = Kubernetes.pod_group_kind().unwrap();
        assert_eq!(
            stored["apiVersion"],
            format!("{}/{}", kind.group, kind.version)
        );
        assert_eq!(stored["kind"], kind.kind);
        let marks = Kubernetes.pod(&g);
        assert_eq!(
            pod["spec"]["schedulingGroup"],
            json!({"podGroupName": marks.scheduling_group.unwrap()})
        );
        assert_eq!(pod["spec"]["schedulerName"], "default-scheduler");
        assert_eq!(marks.scheduler_name, None);
        assert!(marks.labels.is_empty() && marks.annotations.is_empty());
        // A queue means nothing to it; no group is ever of 0 (the API
        // server refuses minCount 0 as missing).
        assert!(!Kubernetes.queues());
        assert!(!Kubernetes.wants_min_resources());
        assert_eq!(
            Kubernetes.pod_group_spec(&group(1, 1, None), None),
            json!({"schedulingPolicy": {"gang": {"minCount": 1}}})
        );
        // One rack for all (the PodGroup's schedulingConstraints, alpha in
        // 1.36 behind TopologyAwareWorkloadScheduling); required only.
        assert_eq!(
            Kubernetes.pod_group_spec(
                &group(4, 4, None).within(Some(("example.com/rack", true))),
                None
            ),
            json!({"schedulingPolicy": {"gang": {"minCount": 4}}, "schedulingConstraints": {"topology": [{"key": "example.com/rack"}]}})
        );
        assert_eq!(Kubernetes.topology_refusal(true), None);
        assert!(Kubernetes.topology_refusal(false).is_some());
    }
}
