//! PaddlePaddle collective launch.

use super::{named_else_worker0, set, Env, Framework, Job, Member, RoleRule, Roles};
use crate::contract::Topology;

pub struct Paddle;

/// The coordinator's own pod IP, from the downward API.
const POD_IP: &str = "DLJOB_POD_IP";

const ROLES: &[RoleRule] = &[RoleRule::at_most_one("master"), RoleRule::any("worker")];

impl Framework for Paddle {
    fn name(&self) -> &'static str {
        "paddle"
    }
    fn roles(&self) -> Roles {
        Roles::Fixed(ROLES)
    }
    fn default_port(&self) -> u16 {
        36543
    }
    fn coordinator<'t>(&self, topology: &'t Topology) -> Option<(&'t str, u32)> {
        named_else_worker0(topology, &["master"])
    }
    /// The coordinator learns its own address: Paddle's launcher starts
    /// its coordination server only where the master host is `127.0.0.1` or
    /// the node's own IP, never a DNS name.
    fn field_env(
        &self,
        job: &Job<'_>,
        member: &Member<'_>,
    ) -> &'static [(&'static str, &'static str)] {
        if self.coordinator(job.topology) == Some((member.role, member.index)) {
            &[(POD_IP, "status.podIP")]
        } else {
            &[]
        }
    }
    fn env(&self, job: &Job<'_>, member: &Member<'_>, env: &mut Env) {
        let Some((role, index)) = self.coordinator(job.topology) else {
            return;
        };
        if (role, index) == (member.role, member.index) {
            set(env, "PADDLE_MASTER", format!("$({POD_IP}):{}", job.port));
        } else {
            set(env, "PADDLE_MASTER", job.host_port(role, index));
        }
        set(env, "PADDLE_NNODES", job.topology.total().to_string());
        set(env, "PADDLE_JOB_ID", job.name);
    }
}

#[cfg(test)]
mod tests {
    use crate::contract::Topology;
    use crate::frameworks::test_support::{env_of, get};
    use crate::frameworks::{by_name, Job, Member};

    #[test]
    fn master_endpoint_and_node_count() {
        let env = env_of("paddle", "worker=3", "worker", 2, None);
        assert_eq!(
            get(&env, "PADDLE_MASTER"),
            Some("j-worker-0.j.ns.svc:36543")
        );
        assert_eq!(get(&env, "PADDLE_NNODES"), Some("3"));
        assert_eq!(get(&env, "PADDLE_JOB_ID"), Some("j"));
    }

    #[test]
    fn coordinator_names_itself_by_its_pod_ip() {
        let env = env_of("paddle", "master=1,worker=2", "master", 0, None);
        assert_eq!(get(&env, "PADDLE_MASTER"), Some("$(DLJOB_POD_IP):36543"));
        let f = by_name("paddle").unwrap();
        let t = Topology::parse("master=1,worker=2").unwrap();
        let job = Job {
            name: "j",
            namespace: "ns",
            cluster_domain: "",
            topology: &t,
            port: 36543,
            slots: 1,
            elastic: None,
        };
        let member = |role, index| Member {
            role,
            index,
            gpus: None,
        };
        assert_eq!(
            f.field_env(&job, &member("master", 0)),
            &[("DLJOB_POD_IP", "status.podIP")]
        );
        assert!(f.field_env(&job, &member("worker", 0)).is_empty());
    }
}
