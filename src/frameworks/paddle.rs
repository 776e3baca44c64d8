//! PaddlePaddle collective launch.

use super::{named_else_worker0, set, Env, Framework, Job, Member, RoleRule, Roles};
use crate::contract::Topology;

pub struct Paddle;

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
    fn env(&self, job: &Job<'_>, _member: &Member<'_>, env: &mut Env) {
        let Some((role, index)) = self.coordinator(job.topology) else {
            return;
        };
        set(env, "PADDLE_MASTER", job.host_port(role, index));
        set(env, "PADDLE_NNODES", job.topology.total().to_string());
        set(env, "PADDLE_JOB_ID", job.name);
    }
}

#[cfg(test)]
mod tests {
    use crate::frameworks::test_support::{env_of, get};

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
}
