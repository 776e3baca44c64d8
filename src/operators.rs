//! The jobs of other operators that dljob recognises (a PyTorchJob, an
//! MPIJob, a Volcano Job, …): which `dljob convert` converts, and what the
//! other offline commands say of them.

use serde_json::Value;

/// A kind of job from another operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Source {
    pub(crate) api_version: &'static str,
    pub(crate) kind: &'static str,
    /// The converter of `dljob convert` that reads it; none yet.
    pub(crate) converter: Option<Converter>,
}

/// Which of `dljob convert`'s converters reads a kind: one per operator
/// job form. `migrate` maps each to its code in one exhaustive match, so a
/// row here without a converter there does not compile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Converter {
    // The replica-spec operators (training-operator, MPI operator).
    PyTorch,
    TensorFlow,
    XGBoost,
    Paddle,
    Jax,
    MxNet,
    MxNetV1Beta1,
    MpiV1,
    Mpi,
    // Their older forms.
    ChainerJob,
    MxJobV1Alpha1,
    MxJobFioravanzo,
    TfJobV1Alpha1,
    TfJobMlkube,
    // Volcano's Job, with its plugins.
    Volcano,
    // Kubeflow Trainer v2, on its runtime.
    TrainJob,
}

/// A kind recognised as an operator's job that `dljob convert` does not read.
const fn not_yet(api_version: &'static str, kind: &'static str) -> Source {
    Source {
        api_version,
        kind,
        converter: None,
    }
}

const fn source(api_version: &'static str, kind: &'static str, converter: Converter) -> Source {
    Source {
        converter: Some(converter),
        ..not_yet(api_version, kind)
    }
}

const SOURCES: &[Source] = &[
    source("kubeflow.org/v1", "PyTorchJob", Converter::PyTorch),
    source("kubeflow.org/v1", "TFJob", Converter::TensorFlow),
    source("kubeflow.org/v1", "XGBoostJob", Converter::XGBoost),
    source("kubeflow.org/v1", "PaddleJob", Converter::Paddle),
    source("kubeflow.org/v1", "JAXJob", Converter::Jax),
    source("kubeflow.org/v1", "MXJob", Converter::MxNet),
    source("kubeflow.org/v1beta1", "MXJob", Converter::MxNetV1Beta1),
    source("kubeflow.org/v1", "MPIJob", Converter::MpiV1),
    source("kubeflow.org/v2beta1", "MPIJob", Converter::Mpi),
    source("kubeflow.org/v1alpha1", "ChainerJob", Converter::ChainerJob),
    source("kubeflow.org/v1alpha1", "MXJob", Converter::MxJobV1Alpha1),
    source(
        "fioravanzo.org/v1alpha1",
        "MXJob",
        Converter::MxJobFioravanzo,
    ),
    source("kubeflow.org/v1alpha1", "TFJob", Converter::TfJobV1Alpha1),
    source("mlkube.io/v1beta1", "TfJob", Converter::TfJobMlkube),
    source("batch.volcano.sh/v1alpha1", "Job", Converter::Volcano),
    source(
        "trainer.kubeflow.org/v1alpha1",
        "TrainJob",
        Converter::TrainJob,
    ),
];

/// What [`recognise`] calls a `kubeflow.org` kind named like a job that
/// is none of the operators' (`kind` is then not the document's).
pub(crate) const UNKNOWN_KUBEFLOW_JOB: &str = "job of a kind dljob does not know";

/// Kinds of the `kubeflow.org` group, in API versions not listed above.
const KUBEFLOW_KINDS: &[&str] = &[
    "PyTorchJob",
    "TFJob",
    "XGBoostJob",
    "PaddleJob",
    "JAXJob",
    "MXJob",
    "MPIJob",
    "ChainerJob",
];

/// Which operator's job `value` is, if any.
pub(crate) fn recognise(value: &Value) -> Option<Source> {
    let api_version = value.get("apiVersion")?.as_str()?;
    let kind = value.get("kind")?.as_str()?;
    if let Some(s) = SOURCES
        .iter()
        .find(|s| s.api_version == api_version && s.kind == kind)
    {
        return Some(*s);
    }
    let group = api_version.split('/').next().unwrap_or("");
    if group == "trainer.kubeflow.org" && kind == "TrainJob" {
        return Some(not_yet("trainer.kubeflow.org, another version", "TrainJob"));
    }
    if group != "kubeflow.org" {
        return None;
    }
    match KUBEFLOW_KINDS.iter().find(|k| **k == kind) {
        Some(kind) => Some(not_yet("kubeflow.org, another version", kind)),
        // Another kubeflow.org job kind: not passed over as if it were
        // none of an operator's (Notebooks, Profiles and the like are).
        None if kind.ends_with("Job") => Some(not_yet("kubeflow.org", UNKNOWN_KUBEFLOW_JOB)),
        None => None,
    }
}

/// The kinds `dljob convert` converts, for messages.
pub(crate) fn convertible_kinds() -> String {
    SOURCES
        .iter()
        .filter(|s| s.convertible())
        .map(Source::display)
        .collect::<Vec<_>>()
        .join(", ")
}

impl Source {
    /// Whether `dljob convert` converts it.
    pub(crate) fn convertible(&self) -> bool {
        self.converter.is_some()
    }

    /// `PyTorchJob (kubeflow.org/v1)`.
    pub(crate) fn display(&self) -> String {
        if self.kind == UNKNOWN_KUBEFLOW_JOB {
            return format!("kubeflow.org {UNKNOWN_KUBEFLOW_JOB}");
        }
        format!("{} ({})", self.kind, self.api_version)
    }

    /// What the offline commands say of a document of this kind.
    pub(crate) fn advice(&self) -> String {
        if self.convertible() {
            format!(
                "this is a {}, which dljob does not read: `dljob convert -f FILE` makes it a dljob job (docs/migration.md)",
                self.display()
            )
        } else {
            format!(
                "this is a {}, which dljob does not read, and `dljob convert` does not convert yet: docs/migration.md says how to write it as dljob members",
                self.display()
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn operator_jobs_are_told_apart_from_everything_else() {
        let of = |v: &str, k: &str| recognise(&json!({"apiVersion": v, "kind": k}));
        assert!(of("kubeflow.org/v1", "PyTorchJob").unwrap().convertible());
        assert!(of("kubeflow.org/v2beta1", "MPIJob").unwrap().convertible());
        assert!(of("batch.volcano.sh/v1alpha1", "Job")
            .unwrap()
            .convertible());
        assert!(of("kubeflow.org/v1alpha1", "ChainerJob")
            .unwrap()
            .convertible());
        assert!(!of("kubeflow.org/v1beta2", "TFJob").unwrap().convertible());
        assert_eq!(
            of("kubeflow.org/v1", "FancyJob").unwrap().kind,
            UNKNOWN_KUBEFLOW_JOB
        );
        assert!(of("trainer.kubeflow.org/v1alpha1", "TrainJob")
            .unwrap()
            .convertible());
        assert_eq!(
            of("fioravanzo.org/v1alpha1", "MXJob").unwrap().kind,
            "MXJob"
        );
        assert!(!of("trainer.kubeflow.org/v1beta1", "TrainJob")
            .unwrap()
            .convertible());
        assert_eq!(of("batch/v1", "Job"), None);
        assert_eq!(of("kubeflow.org/v1", "Notebook"), None);
        assert_eq!(of("example.com/v1", "PyTorchJob"), None);
        assert_eq!(recognise(&json!({"kind": "PyTorchJob"})), None);
    }
}
