//! TensorFlow: `TF_CONFIG` for chief/master, worker, ps and evaluator.

use serde::Serialize;

use super::{
    first_replica_of, rank_order, set, Env, Framework, JobView, Member, OrderedMap, RoleRule,
    Roles, Task,
};
use crate::contract::{RestartScope, Topology};

pub(crate) struct TensorFlow;

/// `TF_CONFIG`, keys in the order TensorFlow's docs write them.
#[derive(Serialize)]
struct TfConfig<'a> {
    cluster: OrderedMap<'a, Vec<String>>,
    task: Task<'a>,
    environment: &'static str,
}

const ROLES: &[RoleRule] = &[
    RoleRule::at_most_one("chief"),
    RoleRule::at_most_one("master"),
    RoleRule::any("worker"),
    RoleRule::any("ps"),
    RoleRule::at_most_one("evaluator"),
];

impl Framework for TensorFlow {
    fn name(&self) -> &'static str {
        "tensorflow"
    }
    fn roles(&self) -> Roles {
        Roles::Fixed(ROLES)
    }
    /// Parameter-server training survives a worker's restart.
    fn default_restart_scope(&self) -> RestartScope {
        RestartScope::Pod
    }
    fn default_port(&self) -> u16 {
        2222
    }
    fn coordinator<'t>(&self, topology: &'t Topology) -> Option<(&'t str, u32)> {
        first_replica_of(topology, &["chief", "master", "worker"])
    }
    fn check_topology(&self, topology: &Topology) -> Vec<String> {
        if topology.count("chief").is_some() && topology.count("master").is_some() {
            vec![format!(
                "{}: a tensorflow job has a chief or a master, not both; keep one",
                crate::contract::REPLICAS
            )]
        } else {
            Vec::new()
        }
    }
    fn env(&self, job: &JobView<'_>, member: &Member<'_>, env: &mut Env) {
        if job.topology.total() <= 1 {
            return;
        }
        let cluster = rank_order(self, job.topology)
            .into_iter()
            .filter(|role| *role != "evaluator")
            .map(|role| {
                let n = job.topology.count_or_zero(role);
                (role, (0..n).map(|i| job.host_port(role, i)).collect())
            })
            .collect();
        let config = TfConfig {
            cluster: OrderedMap(cluster),
            task: Task {
                kind: member.role,
                index: member.index,
            },
            environment: "cloud",
        };
        let json = serde_json::to_string(&config).expect("TF_CONFIG serialises");
        set(env, "TF_CONFIG", json);
    }
}

#[cfg(test)]
mod tests {
    use crate::frameworks::test_support::{env_of, get};
    use serde_json::{json, Value};

    fn tf_config(topology: &str, role: &str, index: u32) -> Value {
        let env = env_of("tensorflow", topology, role, index, None);
        serde_json::from_str(get(&env, "TF_CONFIG").unwrap()).unwrap()
    }

    #[test]
    fn parameter_server_job_lists_every_role_with_ports() {
        assert_eq!(
            tf_config("chief=1,worker=2,ps=1", "worker", 1),
            json!({
                "cluster": {
                    "chief": ["j-chief-0.j.ns.svc:2222"],
                    "worker": ["j-worker-0.j.ns.svc:2222", "j-worker-1.j.ns.svc:2222"],
                    "ps": ["j-ps-0.j.ns.svc:2222"]
                },
                "task": {"type": "worker", "index": 1},
                "environment": "cloud"
            })
        );
    }

    #[test]
    fn evaluator_is_not_in_the_cluster() {
        assert_eq!(
            tf_config("worker=1,evaluator=1", "evaluator", 0),
            json!({
                "cluster": {"worker": ["j-worker-0.j.ns.svc:2222"]},
                "task": {"type": "evaluator", "index": 0},
                "environment": "cloud"
            })
        );
    }

    #[test]
    fn single_replica_job_gets_no_tf_config() {
        assert!(env_of("tensorflow", "worker=1", "worker", 0, None).is_empty());
    }

    #[test]
    fn coordinator_is_chief_else_worker_zero() {
        let tf = crate::frameworks::by_name("tensorflow").unwrap();
        let t = crate::contract::Topology::parse("worker=2,chief=1").unwrap();
        assert_eq!(tf.coordinator(&t), Some(("chief", 0)));
        let t = crate::contract::Topology::parse("ps=1,worker=2").unwrap();
        assert_eq!(tf.coordinator(&t), Some(("worker", 0)));
        let t = crate::contract::Topology::parse("master=1,worker=2").unwrap();
        assert_eq!(tf.coordinator(&t), Some(("master", 0)));
    }

    #[test]
    fn chief_and_master_together_are_refused() {
        let tf = crate::frameworks::by_name("tensorflow").unwrap();
        let t = crate::contract::Topology::parse("chief=1,master=1,worker=1").unwrap();
        assert_eq!(
            crate::frameworks::check_topology(tf, &t),
            vec![
                "dljob.dev/replicas: a tensorflow job has a chief or a master, not both; keep one"
            ]
        );
    }
}
