//! JAX multi-process: coordinator address, process count and id.

use super::{first_replica_of, set, Env, Framework, JobView, Member, RoleRule, Roles};
use crate::contract::{Topology, COMPAT_KUBEFLOW};

pub(crate) struct Jax;

const ROLES: &[RoleRule] = &[RoleRule::at_least_one("worker")];

impl Framework for Jax {
    fn name(&self) -> &'static str {
        "jax"
    }
    fn roles(&self) -> Roles {
        Roles::Fixed(ROLES)
    }
    fn default_port(&self) -> u16 {
        6666
    }
    fn coordinator<'t>(&self, topology: &'t Topology) -> Option<(&'t str, u32)> {
        first_replica_of(topology, &["worker"])
    }
    fn env(&self, job: &JobView<'_>, member: &Member<'_>, env: &mut Env) {
        set(env, "JAX_COORDINATOR_ADDRESS", job.host_port("worker", 0));
        set(env, "JAX_NUM_PROCESSES", job.topology.total().to_string());
        set(env, "JAX_PROCESS_ID", member.index.to_string());
    }
    /// The training-operator's JAXJob names: the coordinator's host and
    /// port apart.
    fn compat_env(&self, job: &JobView<'_>, member: &Member<'_>, env: &mut Env) {
        if job.compat != Some(COMPAT_KUBEFLOW) {
            return;
        }
        set(env, "PYTHONUNBUFFERED", "1");
        set(env, "COORDINATOR_PORT", job.port.to_string());
        set(env, "COORDINATOR_ADDRESS", job.host("worker", 0));
        set(env, "NUM_PROCESSES", job.topology.total().to_string());
        set(env, "PROCESS_ID", member.index.to_string());
    }
}

#[cfg(test)]
mod tests {
    use crate::frameworks::test_support::{compat_env_of, env_of, get};

    #[test]
    fn process_id_is_the_worker_index() {
        let env = env_of("jax", "worker=4", "worker", 3, None);
        assert_eq!(
            get(&env, "JAX_COORDINATOR_ADDRESS"),
            Some("j-worker-0.j.ns.svc:6666")
        );
        assert_eq!(get(&env, "JAX_NUM_PROCESSES"), Some("4"));
        assert_eq!(get(&env, "JAX_PROCESS_ID"), Some("3"));
        assert_eq!(get(&env, "PROCESS_ID"), None, "only under compat");
    }

    #[test]
    fn the_operators_names_under_kubeflow_compat() {
        let env = compat_env_of("kubeflow", "jax", "worker=4", "worker", 3);
        assert_eq!(
            get(&env, "COORDINATOR_ADDRESS"),
            Some("j-worker-0.j.ns.svc")
        );
        assert_eq!(get(&env, "COORDINATOR_PORT"), Some("6666"));
        assert_eq!(get(&env, "NUM_PROCESSES"), Some("4"));
        assert_eq!(get(&env, "PROCESS_ID"), Some("3"));
        assert_eq!(get(&env, "PYTHONUNBUFFERED"), Some("1"));
        // dljob's own names are there too.
        assert_eq!(get(&env, "JAX_PROCESS_ID"), Some("3"));
    }
}
