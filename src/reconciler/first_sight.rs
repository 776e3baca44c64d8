//! First sight of a job: the DLJob of every job that has a live member
//! and none yet.

use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource};

use super::index::MemberIndex;
use super::listed::Unreadable;
use super::resources;
use super::writes::{create_params, tolerate, CONFLICT};
use crate::crd::DLJob;

/// Creates `object` unless it exists (AlreadyExists is success).
async fn create_if_absent<K>(api: Api<K>, object: &K) -> Result<(), kube::Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    tolerate(
        api.create(&create_params(), object).await.map(drop),
        &[CONFLICT],
    )
}

/// Creates the DLJob of every job that has a live member and no DLJob yet
/// (first sight of a member). Returns how many it created.
pub async fn create_missing(
    client: &Client,
    index: &MemberIndex,
    dljobs: &Store<DLJob>,
    unreadable: &Unreadable,
) -> Result<usize, kube::Error> {
    let mut created = 0;
    for ((namespace, name), entry) in index.live_jobs() {
        let job = ObjectRef::new(&name).within(&namespace);
        if dljobs.get(&job).is_some() || unreadable.contains(&job) {
            continue;
        }
        let job = resources::dljob_for(&entry.member, entry.tensorboard_volume.as_ref());
        match create_if_absent(Api::<DLJob>::namespaced(client.clone(), &namespace), &job).await {
            Ok(()) => created += 1,
            // One job the API server refuses (a spec its schema rejects)
            // must not keep the others from getting theirs.
            Err(kube::Error::Api(s)) if s.code == 422 || s.code == 400 => {
                tracing::warn!(job = %name, %namespace, error = %s.message, "the API server refused the job's DLJob");
            }
            Err(e) => return Err(e),
        }
    }
    Ok(created)
}
