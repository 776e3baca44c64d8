//! Which replica a member pod is — its role, its index within the role —
//! and its framework container, read the way admission read them: the index
//! by [`member::parse`] (StatefulSet ordinal, Indexed Job completion index
//! or `dljob.dev/index`), the container by [`member::pick_container`].
//! Pure: pods in, values out.

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::ResourceExt;
use serde_json::Value;

use crate::config::Config;
use crate::contract::{self as c, Topology};
use crate::member;
use crate::object::{self, Kind};

/// A member pod as `dljob logs` and `dljob describe` name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ReplicaPod {
    pub name: String,
    pub uid: String,
    /// `dljob.dev/role` (empty when the pod has none).
    pub role: String,
    /// The index within the role; None when the pod does not tell it.
    pub index: Option<u32>,
    /// The framework container's name; None when the pod names a container
    /// it does not have (`dljob.dev/container`) or has none.
    pub container: Option<String>,
    /// The job's topology as the pod declares it.
    pub topology: Option<Topology>,
}

impl ReplicaPod {
    /// Reads `pod`. Never fails: what a pod does not tell stays None.
    pub(crate) fn of(pod: &Pod) -> Self {
        let value = serde_json::to_value(pod).unwrap_or(Value::Null);
        let parsed = member::parse(
            Kind::Pod,
            &value,
            pod.namespace().as_deref(),
            &Config::default(),
        )
        .ok()
        .flatten()
        .map(|p| p.member);
        let role = object::meta_str(&value, &[], "labels", c::ROLE)
            .unwrap_or_default()
            .to_owned();
        let job = member::job_label(&value).unwrap_or_default();
        // A pod that no longer parses (say, its StatefulSet was scaled past
        // the topology) still has the hostname admission gave it: j-r-i.
        let index = parsed
            .as_ref()
            .and_then(|m| m.index)
            .or_else(|| index_from_hostname(&value, job, &role));
        let topology = match &parsed {
            Some(m) => Some(m.spec.replicas.clone()),
            None => object::meta_str(&value, &[], "annotations", c::REPLICAS)
                .and_then(|t| Topology::parse(t).ok()),
        };
        Self {
            name: pod.name_any(),
            uid: pod.uid().unwrap_or_default(),
            role,
            index,
            container: framework_container(&value),
            topology,
        }
    }

    /// The replica read from `container` (`dljob logs -c`) instead of its
    /// framework container: a container or an init container of the pod
    /// (`dljob-wait-for-names`); None when it has no such container.
    pub(crate) fn reading(mut self, pod: &Pod, container: Option<&str>) -> Self {
        if let Some(name) = container {
            let has = pod.spec.as_ref().is_some_and(|s| {
                s.containers.iter().any(|c| c.name == name)
                    || s.init_containers.iter().flatten().any(|c| c.name == name)
            });
            self.container = has.then(|| name.to_owned());
        }
        self
    }

    /// Why nothing of this replica can be read: the container asked for
    /// (`-c`), or the framework container, is not in the pod.
    pub(crate) fn no_container(&self, asked: Option<&str>) -> String {
        let (label, pod) = (self.label(), &self.name);
        match asked {
            Some(name) => format!("{label}: pod {pod} has no container or init container {name}"),
            None => format!(
                "{label}: pod {pod} has no framework container to read (does dljob.dev/container name one it has?)"
            ),
        }
    }

    /// `role-index` (`worker-1`); the pod's name when either is unknown.
    pub(crate) fn label(&self) -> String {
        match self.index {
            Some(i) if !self.role.is_empty() => format!("{}-{i}", self.role),
            _ => self.name.clone(),
        }
    }
}

fn index_from_hostname(pod: &Value, job: &str, role: &str) -> Option<u32> {
    let hostname = object::str_at(pod, &["spec", "hostname"])?;
    let rest = hostname.strip_prefix(job)?.strip_prefix('-')?;
    rest.strip_prefix(role)?.strip_prefix('-')?.parse().ok()
}

/// The framework container's name by the one container rule, from the
/// pod's own annotations, containers, their resources and DRA claims.
fn framework_container(pod: &Value) -> Option<String> {
    let spec = object::at(pod, &["spec"])?;
    let containers = object::containers(spec);
    let facts = member::container_facts(spec);
    let annotation = |key| object::meta_str(pod, &[], "annotations", key);
    let (i, _) = member::pick_container(
        annotation(c::CONTAINER),
        annotation(c::K8S_DEFAULT_CONTAINER),
        annotation(c::FRAMEWORK).unwrap_or(""),
        &facts,
    )?;
    Some(object::name_of(&containers[i]).to_owned())
}

/// Orders replicas by role — in the topology's order (the framework's,
/// coordinator first, as `dljob label` writes it), roles it does not name
/// after, by name — then by index.
#[derive(Clone, Debug, Default)]
pub(crate) struct ReplicaOrder {
    topology: Option<Topology>,
}

impl ReplicaOrder {
    pub(crate) fn new(topology: Option<Topology>) -> Self {
        Self { topology }
    }

    /// The first topology any of `pods` declares.
    pub(crate) fn of_pods<'p>(pods: impl IntoIterator<Item = &'p ReplicaPod>) -> Self {
        Self::new(pods.into_iter().find_map(|p| p.topology.clone()))
    }

    fn role_position(&self, role: &str) -> usize {
        self.topology
            .as_ref()
            .and_then(|t| t.roles().position(|(r, _)| r == role))
            .unwrap_or(usize::MAX)
    }

    /// The sort key of a replica: role position, role, index, pod name.
    pub(crate) fn key<'p>(&self, p: &'p ReplicaPod) -> (usize, &'p str, u32, &'p str) {
        (
            self.role_position(&p.role),
            &p.role,
            p.index.unwrap_or(u32::MAX),
            &p.name,
        )
    }

    /// Roles in order: the topology's, then `others` not in it, by name.
    pub(crate) fn roles<'r>(&self, others: impl IntoIterator<Item = &'r str>) -> Vec<String> {
        let mut roles: Vec<String> = self
            .topology
            .iter()
            .flat_map(|t| t.roles().map(|(r, _)| r.to_owned()))
            .collect();
        let mut rest: Vec<&str> = others
            .into_iter()
            .filter(|r| !roles.iter().any(|k| k == r))
            .collect();
        rest.sort_unstable();
        rest.dedup();
        roles.extend(rest.into_iter().map(str::to_owned));
        roles
    }

    /// The replica's position in the whole job (roles in topology order),
    /// when the topology names its role and covers its index.
    pub(crate) fn rank(&self, role: &str, index: u32) -> Option<u32> {
        let mut offset = 0;
        for (r, n) in self.topology.as_ref()?.roles() {
            if r == role {
                return (index < n).then_some(offset + index);
            }
            offset += n;
        }
        None
    }

    /// The widest `role-index` the topology allows (0 without one).
    pub(crate) fn label_width(&self) -> usize {
        self.topology.as_ref().map_or(0, |t| {
            t.roles()
                .map(|(r, n)| r.len() + 1 + (n - 1).to_string().len())
                .max()
                .unwrap_or(0)
        })
    }
}

/// The status of `container` in `pod`, a container or an init container.
pub(crate) fn container_status<'p>(
    pod: &'p Pod,
    container: Option<&str>,
) -> Option<&'p ContainerStatus> {
    let name = container?;
    let status = pod.status.as_ref()?;
    [&status.container_statuses, &status.init_container_statuses]
        .into_iter()
        .flatten()
        .flatten()
        .find(|s| s.name == name)
}

/// Whether the container has run at all, so that the kubelet has logs of
/// it (the current run's, or the last one's while it waits to restart).
pub(crate) fn has_run(s: &ContainerStatus) -> bool {
    let now = s.state.as_ref();
    now.is_some_and(|st| st.running.is_some() || st.terminated.is_some())
        || s.last_state
            .as_ref()
            .is_some_and(|st| st.terminated.is_some())
}

/// The container run the status shows, while it runs or after it ended:
/// its container ID (else its restart count). None while it waits.
pub(crate) fn run_of(s: &ContainerStatus) -> Option<String> {
    let st = s.state.as_ref()?;
    let id = match (&st.running, &st.terminated) {
        (Some(_), _) => None,
        (None, Some(t)) => t.container_id.clone(),
        (None, None) => return None,
    };
    Some(
        id.or_else(|| s.container_id.clone())
            .unwrap_or_else(|| format!("restart {}", s.restart_count)),
    )
}

/// Whether the container runs now.
pub(crate) fn is_running(s: &ContainerStatus) -> bool {
    s.state.as_ref().is_some_and(|st| st.running.is_some())
}

/// The container's last exit: the current state's, else the last state's
/// (after the kubelet restarted it) — exit code and reason.
pub(crate) fn last_exit(s: &ContainerStatus) -> Option<(i32, Option<&str>)> {
    [s.state.as_ref(), s.last_state.as_ref()]
        .into_iter()
        .flatten()
        .find_map(|st| st.terminated.as_ref())
        .map(|t| (t.exit_code, t.reason.as_deref()))
}

/// Why a pod has no logs yet, e.g. `Pending (ContainerCreating)`,
/// `Pending (not scheduled yet)`.
pub(crate) fn not_started(pod: &Pod, container: Option<&str>) -> String {
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    let waiting = container_status(pod, container)
        .and_then(|s| s.state.as_ref()?.waiting.as_ref()?.reason.as_deref());
    let scheduled = pod.spec.as_ref().is_some_and(|s| s.node_name.is_some());
    let why = waiting
        .or_else(|| status.and_then(|s| s.reason.as_deref()))
        .unwrap_or(if scheduled {
            "waiting to start"
        } else {
            "not scheduled yet"
        });
    format!("{phase} ({why})")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    fn statefulset_pod(name: &str, ordinal: &str, replicas: &str) -> Pod {
        pod(json!({
            "metadata": {
                "name": name, "namespace": "ml", "uid": format!("uid-{name}"),
                "labels": {"dljob.dev/job": "tf", "dljob.dev/role": "worker",
                           "apps.kubernetes.io/pod-index": ordinal},
                "annotations": {"dljob.dev/framework": "tensorflow", "dljob.dev/replicas": replicas},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "tf-worker", "uid": "s", "controller": true}]
            },
            "spec": {"hostname": format!("tf-worker-{ordinal}"),
                     "containers": [{"name": "sidecar"}, {"name": "tensorflow"}]}
        }))
    }

    #[test]
    fn a_statefulset_pod_is_its_role_and_ordinal_with_the_framework_named_container() {
        let p = ReplicaPod::of(&statefulset_pod("tf-worker-1", "1", "chief=1,worker=2"));
        assert_eq!(p.label(), "worker-1");
        assert_eq!(p.container.as_deref(), Some("tensorflow"));
        assert_eq!(p.topology.unwrap().to_string(), "chief=1,worker=2");
    }

    #[test]
    fn a_pod_past_the_topology_keeps_the_index_of_its_hostname() {
        // worker-2 of a topology with 2 workers does not parse as a member.
        let p = ReplicaPod::of(&statefulset_pod("tf-worker-2", "2", "chief=1,worker=2"));
        assert_eq!(p.label(), "worker-2");
    }

    #[test]
    fn a_pod_without_role_index_or_containers_is_named_by_itself() {
        let p = ReplicaPod::of(&pod(json!({
            "metadata": {"name": "odd", "labels": {"dljob.dev/job": "tf"}}
        })));
        assert_eq!(p.label(), "odd");
        assert_eq!(p.container, None);
        assert_eq!(p.index, None);
        let p = ReplicaPod::of(&Pod::default());
        assert_eq!((p.label(), p.role), (String::new(), String::new()));
    }

    #[test]
    fn the_annotation_chooses_the_container_and_a_missing_one_is_none() {
        let mut v = json!({
            "metadata": {"name": "p", "labels": {"dljob.dev/job": "tf", "dljob.dev/role": "chief"},
                         "annotations": {"dljob.dev/framework": "tensorflow", "dljob.dev/container": "trainer"}},
            "spec": {"containers": [{"name": "tensorflow"}, {"name": "trainer"}]}
        });
        assert_eq!(
            ReplicaPod::of(&pod(v.clone())).container.as_deref(),
            Some("trainer")
        );
        v["metadata"]["annotations"]["dljob.dev/container"] = json!("nope");
        assert_eq!(ReplicaPod::of(&pod(v)).container, None);
    }

    #[test]
    fn replicas_sort_in_topology_order_then_index() {
        let order = ReplicaOrder::new(Some(Topology::parse("chief=1,worker=12,ps=2").unwrap()));
        let r = |role: &str, index: Option<u32>, name: &str| ReplicaPod {
            name: name.into(),
            uid: String::new(),
            role: role.into(),
            index,
            container: None,
            topology: None,
        };
        let mut pods = [
            r("ps", Some(0), "c"),
            r("worker", Some(10), "d"),
            r("evaluator", Some(0), "e"),
            r("worker", Some(2), "f"),
            r("chief", Some(0), "g"),
            r("worker", None, "a"),
        ];
        pods.sort_by(|a, b| order.key(a).cmp(&order.key(b)));
        let labels: Vec<String> = pods.iter().map(ReplicaPod::label).collect();
        assert_eq!(
            labels,
            [
                "chief-0",
                "worker-2",
                "worker-10",
                "a",
                "ps-0",
                "evaluator-0"
            ]
        );
        assert_eq!(order.rank("worker", 2), Some(3));
        assert_eq!(order.rank("ps", 1), Some(14));
        assert_eq!(order.rank("ps", 2), None);
        assert_eq!(order.label_width(), "worker-11".len());
        assert_eq!(
            order.roles(["ps", "evaluator", "aux", "aux"]),
            ["chief", "worker", "ps", "aux", "evaluator"]
        );
    }

    #[test]
    fn not_started_says_why() {
        let mut p = pod(json!({"metadata": {"name": "p"}, "status": {"phase": "Pending"}}));
        assert_eq!(not_started(&p, Some("c")), "Pending (not scheduled yet)");
        p = pod(json!({
            "metadata": {"name": "p"}, "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
            "status": {"phase": "Pending", "containerStatuses": [
                {"name": "c", "image": "", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"waiting": {"reason": "ContainerCreating"}}}]}
        }));
        assert_eq!(not_started(&p, Some("c")), "Pending (ContainerCreating)");
        assert_eq!(not_started(&p, None), "Pending (waiting to start)");
    }

    #[test]
    fn runs_and_exits_come_from_state_then_last_state() {
        let s: ContainerStatus = serde_json::from_value(json!({
            "name": "c", "image": "", "imageID": "", "ready": false, "restartCount": 2,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "containerID": "cri://a"}}
        }))
        .unwrap();
        assert!(has_run(&s));
        assert!(!is_running(&s));
        assert_eq!(run_of(&s), None);
        assert_eq!(last_exit(&s), Some((137, Some("OOMKilled"))));
        let s: ContainerStatus = serde_json::from_value(json!({
            "name": "c", "image": "", "imageID": "", "ready": true, "restartCount": 3,
            "containerID": "cri://b", "state": {"running": {}}
        }))
        .unwrap();
        assert_eq!(run_of(&s).as_deref(), Some("cri://b"));
        assert!(is_running(&s));
        assert_eq!(last_exit(&s), None);
    }
}
