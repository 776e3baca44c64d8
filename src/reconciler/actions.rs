//! Executing the status function's actions, each idempotent: a member
//! gone, an action already done or a member replaced under the same name
//! are success. Bare pods' manifests are saved here before their delete.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, PodTemplate, PodTemplateSpec};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use super::events::Recorder;
use super::failure::Error;
use super::observe;
use super::ownership::foreign_controller;
use super::status::{Action, JobEvent};
use super::writes::{
    create_params, guarded, tolerate, tolerate_gone_or_replaced, CONFLICT, MANAGER, NOT_FOUND,
};
use crate::contract as c;
use crate::crd::{DLJob, DLJobStatus, SavedPod};
use crate::object::Kind;
use crate::telemetry::Chain;

/// The names dljob gives the PodTemplates it saves bare pods' manifests
/// in start so (the API server completes each, `generateName`).
pub(crate) const SAVED_PREFIX: &str = "dljob-recreate-";

/// The job's saved manifests this DLJob controls, by the PodTemplate's
/// uid. Which of them a recreate uses is the status's to say (by uid): a
/// PodTemplate anyone else made, whatever its name, labels or owner, is
/// never recreated from.
pub(super) async fn saved_manifests(
    client: &Client,
    namespace: &str,
    job: &DLJob,
) -> Result<BTreeMap<String, PodTemplate>, kube::Error> {
    let api: Api<PodTemplate> = Api::namespaced(client.clone(), namespace);
    let name = job.name_any();
    let uid = job.uid().unwrap_or_default();
    let list = api
        .list(&ListParams::default().labels(&format!("{}={name}", c::JOB)))
        .await?;
    Ok(list
        .items
        .into_iter()
        .filter(|t| foreign_controller(&t.metadata, &name, &uid).is_none())
        .filter(|t| t.name_any().starts_with(SAVED_PREFIX))
        .filter_map(|t| Some((t.uid()?, t)))
        .collect())
}

/// Where one reconcile's actions go.
pub(super) struct Target<'a> {
    pub(super) client: &'a Client,
    pub(super) recorder: &'a Recorder,
    pub(super) namespace: &'a str,
    pub(super) job: &'a DLJob,
    /// The saved manifests this DLJob controls, by PodTemplate uid.
    pub(super) saved: &'a BTreeMap<String, PodTemplate>,
    /// dljob's volume names (a saved manifest leaves them out: the webhook
    /// adds its own again when the pod is recreated).
    pub(super) reserved: Vec<&'a str>,
}

/// What saving the bare pods left for the actions after the status write.
pub(super) struct Saving<'a> {
    /// The pods whose manifest could not be saved: not deleted.
    unsaved: Vec<&'a str>,
    /// The first failure, returned once every other action was tried.
    failed: Option<Error>,
}

impl Target<'_> {
    /// Executes the [`Action::SavePod`]s, each pod's manifest kept in a
    /// PodTemplate and recorded in `status`, which is written next, before
    /// any pod is deleted: a recreate uses only what the status names.
    pub(super) async fn save_pods<'a>(
        &self,
        actions: &'a [Action],
        status: &mut DLJobStatus,
    ) -> Saving<'a> {
        let mut saving = Saving {
            unsaved: Vec::new(),
            failed: None,
        };
        for action in actions {
            let Action::SavePod { name, uid } = action else {
                continue;
            };
            match self.save_pod(name, uid).await {
                Ok(Some(saved)) => {
                    if let Some(r) = status.pending_recreates.iter_mut().find(|r| r.uid == *uid) {
                        r.saved = Some(saved);
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(job = %self.job.name_any(), namespace = %self.namespace, pod = %name, error = %Chain(&e), "saving a bare pod's manifest failed; it is not deleted");
                    saving.unsaved.push(uid);
                    saving.failed.get_or_insert(e);
                }
            }
        }
        saving
    }

    /// Executes the other actions in order. Every one is tried, one failing
    /// or another: one refused (say by a webhook) must not keep the job
    /// from the rest (its TTL). A bare pod is deleted only once its
    /// manifest is saved, and recorded.
    pub(super) async fn execute_all(
        &self,
        actions: &[Action],
        saving: Saving<'_>,
    ) -> Result<(), Error> {
        let Saving {
            unsaved,
            mut failed,
        } = saving;
        for action in actions {
            let result = match action {
                Action::SavePod { .. } => continue,
                Action::DeletePod { uid, .. } if unsaved.contains(&uid.as_str()) => continue,
                Action::CreatePod { name: pod, .. } => match self.execute(action).await {
                    Err(Error::NameTaken(who)) => {
                        self.tell(JobEvent {
                            warning: true,
                            reason: "RecreateBlocked".to_owned(),
                            note: format!(
                                "bare pod {pod} cannot be recreated: {who}; delete it (dljob then recreates the job's)"
                            ),
                        })
                        .await;
                        Ok(())
                    }
                    other => other,
                },
                _ => self.execute(action).await,
            };
            if let Err(e) = result {
                if e.namespace_terminating() {
                    tracing::debug!(job = %self.job.name_any(), namespace = %self.namespace, ?action, "the namespace is being deleted: action not taken");
                } else {
                    tracing::warn!(job = %self.job.name_any(), namespace = %self.namespace, ?action, error = %Chain(&e), "an action failed; the others go on");
                }
                failed.get_or_insert(e);
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// Publishes `event` on the DLJob; a failure is logged, not returned.
    pub(super) async fn tell(&self, event: JobEvent) {
        if let Err(e) = self
            .recorder
            .publish(&self.job.object_ref(&()), &event)
            .await
        {
            if super::failure::namespace_terminating(&e) {
                tracing::debug!(job = %self.job.name_any(), "the namespace is being deleted: Event not published");
            } else {
                tracing::warn!(job = %self.job.name_any(), error = %Chain(&e), "publishing an Event failed");
            }
        }
    }

    fn merge() -> PatchParams {
        PatchParams {
            field_manager: Some(MANAGER.to_owned()),
            ..PatchParams::default()
        }
    }

    /// Executes one action; each is idempotent (gone, already done and a
    /// member replaced under the same name are success).
    async fn execute(&self, action: &Action) -> Result<(), Error> {
        let (client, namespace) = (self.client, self.namespace);
        let pods = || Api::<Pod>::namespaced(client.clone(), namespace);
        let merge = Self::merge();
        match action {
            // Saved before the status write: see [`Target::save_pods`].
            Action::SavePod { .. } => {}
            Action::DeletePod { name, uid } => {
                let dp = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: Some(uid.clone()),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                tolerate(
                    pods().delete(name, &dp).await.map(drop),
                    &[NOT_FOUND, CONFLICT],
                )?
            }
            Action::RemoveSchedulingGate { name, uid } => {
                // Strategic merge: schedulingGates merge by name, so this
                // removes dljob's gate and nothing else; the uid makes it a
                // no-op on a recreated pod of the same name.
                let patch = json!({
                    "metadata": guarded(uid, json!({})),
                    "spec": {"schedulingGates": [{"$patch": "delete", "name": c::WORKERS_READY_GATE}]}
                });
                tolerate_gone_or_replaced(
                    pods()
                        .patch(name, &merge, &Patch::Strategic(&patch))
                        .await
                        .map(drop),
                )?
            }
            Action::CreatePod { name, saved } => {
                let Some(template) = self.saved.get(&saved.uid).filter(|t| {
                    saved
                        .digest
                        .as_deref()
                        .is_none_or(|d| d == observe::saved_digest(t))
                }) else {
                    return Ok(()); // not listed, or changed: status::next gives it up
                };
                let template = template.template.clone().unwrap_or_default();
                let meta = template.metadata.unwrap_or_default();
                let pod = Pod {
                    metadata: kube::api::ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(namespace.to_owned()),
                        labels: meta.labels,
                        annotations: meta.annotations,
                        ..Default::default()
                    },
                    spec: template.spec,
                    status: None,
                };
                match pods().create(&create_params(), &pod).await {
                    Ok(_) => {}
                    // Not one of the job's (those the decision saw): someone
                    // else's pod took the name meanwhile.
                    Err(kube::Error::Api(s)) if s.code == CONFLICT => {
                        return Err(Error::NameTaken(format!(
                            "a pod named {name} exists that is not this job's"
                        )))
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Action::DeleteSaved { saved } => {
                let api: Api<PodTemplate> = Api::namespaced(client.clone(), namespace);
                let dp = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: Some(saved.uid.clone()),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                tolerate(
                    api.delete(&saved.name, &dp).await.map(drop),
                    &[NOT_FOUND, CONFLICT],
                )?
            }
            Action::ScaleStatefulSetToZero { name, uid, from } => {
                // One patch of the StatefulSet itself (not its scale
                // subresource, which carries no labels for the admission
                // policy to judge): replicas 0 with the size it had, which
                // the validating webhook reads as its size still.
                let sets: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
                let stop = json!({
                    "metadata": guarded(uid, json!({"annotations": {c::SCALED_FROM: from.to_string()}})),
                    "spec": {"replicas": 0}
                });
                tolerate_gone_or_replaced(
                    sets.patch(name, &merge, &Patch::Merge(&stop))
                        .await
                        .map(drop),
                )?
            }
            Action::Resize {
                kind,
                name,
                uid,
                size,
            } => {
                // The workload itself, not its scale subresource (which
                // carries no labels for the admission policy to judge);
                // the webhook checks the size against the range again.
                let spec = match kind {
                    Kind::Job => json!({"completions": size, "parallelism": size}),
                    _ => json!({"replicas": size}),
                };
                let resize = json!({"metadata": guarded(uid, json!({})), "spec": spec});
                let patch = Patch::Merge(&resize);
                let result = match kind {
                    Kind::Job => Api::<Job>::namespaced(client.clone(), namespace)
                        .patch(name, &merge, &patch)
                        .await
                        .map(drop),
                    _ => Api::<StatefulSet>::namespaced(client.clone(), namespace)
                        .patch(name, &merge, &patch)
                        .await
                        .map(drop),
                };
                tolerate_gone_or_replaced(result)?
            }
            Action::SuspendJob { name, uid } => {
                let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
                let suspend =
                    json!({"metadata": guarded(uid, json!({})), "spec": {"suspend": true}});
                tolerate_gone_or_replaced(
                    jobs.patch(name, &merge, &Patch::Merge(&suspend))
                        .await
                        .map(drop),
                )?
            }
            Action::MarkFinished { kind, name, uid } => {
                let mark = json!({"metadata": guarded(
                    uid,
                    json!({"annotations": {c::FINISHED_RUN: self.job.uid().unwrap_or_default()}})
                )});
                let patch = Patch::Merge(&mark);
                let result = match kind {
                    Kind::Pod => pods().patch(name, &merge, &patch).await.map(drop),
                    Kind::StatefulSet => Api::<StatefulSet>::namespaced(client.clone(), namespace)
                        .patch(name, &merge, &patch)
                        .await
                        .map(drop),
                    Kind::Job => Api::<Job>::namespaced(client.clone(), namespace)
                        .patch(name, &merge, &patch)
                        .await
                        .map(drop),
                };
                tolerate_gone_or_replaced(result)?
            }
            Action::DeleteDLJob => {
                let jobs: Api<DLJob> = Api::namespaced(client.clone(), namespace);
                let dp = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: self.job.uid(),
                        resource_version: None,
                    }),
                    ..DeleteParams::background()
                };
                tolerate(
                    jobs.delete(&self.job.name_any(), &dp).await.map(drop),
                    &[NOT_FOUND, CONFLICT],
                )?
            }
        }
        Ok(())
    }

    /// Keeps bare pod `name` (if it still has `uid`) in a new PodTemplate
    /// the DLJob owns, named by the API server (`generateName`: no name to
    /// squat), to recreate it from once it is deleted. None: the pod is gone
    /// or was replaced (the delete that follows is then a no-op).
    async fn save_pod(&self, name: &str, uid: &str) -> Result<Option<SavedPod>, Error> {
        let (client, namespace) = (self.client, self.namespace);
        let Some(pod) = Api::<Pod>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await?
        else {
            return Ok(None);
        };
        if pod.uid().as_deref() != Some(uid) {
            return Ok(None);
        }
        let manifest = observe::recreate_manifest(&pod, &self.reserved);
        let template = PodTemplate {
            metadata: kube::api::ObjectMeta {
                generate_name: Some(SAVED_PREFIX.to_owned()),
                namespace: Some(namespace.to_owned()),
                labels: Some(BTreeMap::from([(c::JOB.to_owned(), self.job.name_any())])),
                annotations: Some(BTreeMap::from([(c::RECREATES.to_owned(), name.to_owned())])),
                owner_references: self.job.controller_owner_ref(&()).map(|o| vec![o]),
                ..Default::default()
            },
            template: Some(PodTemplateSpec {
                metadata: serde_json::from_value(json!({
                    "labels": manifest["metadata"]["labels"],
                    "annotations": manifest["metadata"]["annotations"],
                }))
                .ok(),
                spec: serde_json::from_value(manifest["spec"].clone()).ok(),
            }),
        };
        let created = Api::<PodTemplate>::namespaced(client.clone(), namespace)
            .create(&create_params(), &template)
            .await?;
        Ok(Some(SavedPod {
            name: created.name_any(),
            uid: created.uid().unwrap_or_default(),
            digest: Some(observe::saved_digest(&created)),
        }))
    }
}
