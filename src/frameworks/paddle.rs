//! PaddlePaddle collective launch (`paddle.distributed.launch`), which reads
//! `PADDLE_MASTER`, `PADDLE_NNODES`, `PADDLE_JOB_ID`, `PADDLE_RANK` and
//! `POD_IP` itself.

use super::{first_replica_of, rank, set, Env, Framework, JobView, Member, RoleRule, Roles};
use crate::contract::{Topology, COMPAT_KUBEFLOW};

pub(crate) struct Paddle;

/// The pod's IP, from the downward API: the address Paddle's launcher
/// advertises for its node, and the coordinator's own master address.
const POD_IP: &str = "POD_IP";

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
        first_replica_of(topology, &["master", "worker"])
    }
    /// Every node knows its own address: Paddle's launcher starts its
    /// coordination server only where the master host is `127.0.0.1` or the
    /// node's own IP (`POD_IP`), never a DNS name.
    fn field_env(
        &self,
        _job: &JobView<'_>,
        _member: &Member<'_>,
    ) -> &'static [(&'static str, &'static str)] {
        &[(POD_IP, "status.podIP")]
    }
    /// The training-operator's PaddleJob: unbuffered Python and, with a
    /// master (parameter-server mode), one server or trainer per pod.
    fn compat_env(&self, job: &JobView<'_>, member: &Member<'_>, env: &mut Env) {
        if job.compat != Some(COMPAT_KUBEFLOW) {
            return;
        }
        set(env, "PYTHONUNBUFFERED", "1");
        if job.topology.count("master").is_some() {
            if member.role == "master" {
                set(env, "PADDLE_SERVER_NUM", "1");
            } else {
                set(env, "PADDLE_TRAINER_NUM", "1");
            }
        }
    }
    fn env(&self, job: &JobView<'_>, member: &Member<'_>, env: &mut Env) {
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
        // Without it the nodes after the coordinator take ranks in the order
        // of names their launchers draw at random.
        set(
            env,
            "PADDLE_RANK",
            rank(self, job.topology, member.role, member.index).to_string(),
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::contract::Topology;
    use crate::frameworks::test_support::{env_of, get, job};
    use crate::frameworks::{by_name, JobView, Member};

    #[test]
    fn master_endpoint_and_node_count() {
        let env = env_of("paddle", "worker=3", "worker", 2, None);
        assert_eq!(
            get(&env, "PADDLE_MASTER"),
            Some("j-worker-0.j.ns.svc:36543")
        );
        assert_eq!(get(&env, "PADDLE_NNODES"), Some("3"));
        assert_eq!(get(&env, "PADDLE_JOB_ID"), Some("j"));
        assert_eq!(get(&env, "PADDLE_RANK"), Some("2"));
    }

    #[test]
    fn coordinator_names_itself_by_its_pod_ip() {
        let env = env_of("paddle", "master=1,worker=2", "master", 0, None);
        assert_eq!(get(&env, "PADDLE_MASTER"), Some("$(POD_IP):36543"));
        assert_eq!(get(&env, "PADDLE_RANK"), Some("0"));
        let f = by_name("paddle").unwrap();
        let t = Topology::parse("master=1,worker=2").unwrap();
        let job = JobView {
            port: 36543,
            ..job(&t)
        };
        let member = |role, index| Member {
            role,
            index,
            gpus: None,
            host_network: false,
        };
        for (role, index) in [("master", 0), ("worker", 1)] {
            assert_eq!(
                f.field_env(&job, &member(role, index)),
                &[("POD_IP", "status.podIP")]
            );
        }
    }
}
