//! XGBoost (Rabit/collective tracker). XGBoost reads none of these from the
//! environment: the program passes `DMLC_TRACKER_URI`, `DMLC_TRACKER_PORT`
//! (as an integer) and `DMLC_TASK_ID` to `xgboost.collective`, and the master
//! runs `RabitTracker(n_workers=WORLD_SIZE, sortby="task")`.

use super::{first_replica_of, rank, set, Env, Framework, JobView, Member, RoleRule, Roles};
use crate::contract::{Topology, COMPAT_KUBEFLOW};

pub(crate) struct XgBoost;

const ROLES: &[RoleRule] = &[RoleRule::at_most_one("master"), RoleRule::any("worker")];

impl Framework for XgBoost {
    fn name(&self) -> &'static str {
        "xgboost"
    }
    fn roles(&self) -> Roles {
        Roles::Fixed(ROLES)
    }
    fn default_port(&self) -> u16 {
        9999
    }
    fn coordinator<'t>(&self, topology: &'t Topology) -> Option<(&'t str, u32)> {
        first_replica_of(topology, &["master", "worker"])
    }
    fn env(&self, job: &JobView<'_>, member: &Member<'_>, env: &mut Env) {
        let Some((coord_role, coord_index)) = self.coordinator(job.topology) else {
            return;
        };
        let master = job.host(coord_role, coord_index);
        let port = job.port.to_string();
        let world = job.topology.total().to_string();
        let r = rank(self, job.topology, member.role, member.index).to_string();
        set(env, "MASTER_ADDR", master.clone());
        set(env, "MASTER_PORT", port.clone());
        set(env, "WORLD_SIZE", world.clone());
        set(env, "RANK", r.clone());
        set(env, "WORKER_PORT", port.clone());
        set(env, "DMLC_TRACKER_URI", master);
        set(env, "DMLC_TRACKER_PORT", port);
        // XGBoost's tracker (`sortby="task"`) orders task ids as strings:
        // padded to one width, "02" sorts before "10" and ranks follow RANK.
        let width = (job.topology.total().saturating_sub(1)).to_string().len();
        set(env, "DMLC_TASK_ID", format!("{r:0>width$}"));
        set(env, "DMLC_NUM_WORKER", world);
    }
    /// The training-operator's XGBoostJob (also what its LightGBM images
    /// read): every worker's host, and unbuffered Python.
    fn compat_env(&self, job: &JobView<'_>, _member: &Member<'_>, env: &mut Env) {
        if job.compat != Some(COMPAT_KUBEFLOW) {
            return;
        }
        set(env, "PYTHONUNBUFFERED", "1");
        let workers = job.topology.count_or_zero("worker");
        if workers > 0 {
            let hosts: Vec<String> = (0..workers).map(|i| job.host("worker", i)).collect();
            set(env, "WORKER_ADDRS", hosts.join(","));
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::frameworks::test_support::{compat_env_of, env_of, get};

    #[test]
    fn tracker_is_the_master() {
        let env = env_of("xgboost", "master=1,worker=2", "worker", 1, None);
        assert_eq!(get(&env, "MASTER_ADDR"), Some("j-master-0.j.ns.svc"));
        assert_eq!(get(&env, "MASTER_PORT"), Some("9999"));
        assert_eq!(get(&env, "WORLD_SIZE"), Some("3"));
        assert_eq!(get(&env, "RANK"), Some("2"));
        assert_eq!(get(&env, "WORKER_PORT"), Some("9999"));
        assert_eq!(get(&env, "WORKER_ADDRS"), None, "only under compat");
        assert_eq!(get(&env, "DMLC_TRACKER_URI"), Some("j-master-0.j.ns.svc"));
        assert_eq!(get(&env, "DMLC_TRACKER_PORT"), Some("9999"));
        assert_eq!(get(&env, "DMLC_TASK_ID"), Some("2"));
        assert_eq!(get(&env, "DMLC_NUM_WORKER"), Some("3"));
    }

    #[test]
    fn the_operators_worker_list_under_kubeflow_compat() {
        let env = compat_env_of("kubeflow", "xgboost", "master=1,worker=2", "master", 0);
        assert_eq!(
            get(&env, "WORKER_ADDRS"),
            Some("j-worker-0.j.ns.svc,j-worker-1.j.ns.svc")
        );
        assert_eq!(get(&env, "WORKER_PORT"), Some("9999"));
        assert_eq!(get(&env, "PYTHONUNBUFFERED"), Some("1"));
        let alone = compat_env_of("kubeflow", "xgboost", "master=1", "master", 0);
        assert_eq!(get(&alone, "WORKER_ADDRS"), None);
    }

    #[test]
    fn task_ids_are_padded_so_that_string_order_is_rank_order() {
        let id = |index| {
            let env = env_of("xgboost", "master=1,worker=11", "worker", index, None);
            get(&env, "DMLC_TASK_ID").unwrap().to_owned()
        };
        assert_eq!(id(0), "01");
        assert_eq!(id(10), "11");
        let env = env_of("xgboost", "master=1,worker=11", "master", 0, None);
        assert_eq!(get(&env, "DMLC_TASK_ID"), Some("00"));
        assert_eq!(get(&env, "RANK"), Some("0"));
        let env = env_of("xgboost", "master=1,worker=99", "worker", 98, None);
        assert_eq!(get(&env, "DMLC_TASK_ID"), Some("99"));
    }
}
