//! Why a reconcile failed (a name of its own: `error` is std's).

/// Why a reconcile failed; the controller retries it with a backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("DLJob {job} cannot be reconciled: {reason}")]
    BadSpec { job: String, reason: String },
    #[error("Kubernetes API")]
    Kube(#[from] kube::Error),
    #[error("generating the SSH key")]
    Ssh(#[from] ssh_key::Error),
    /// A bare pod's name is held by a pod not of the job.
    #[error("{0}")]
    NameTaken(String),
}

impl Error {
    /// The `error` label of `dljob_reconcile_errors_total`.
    pub(crate) fn metric_label(&self) -> &'static str {
        match self {
            Error::BadSpec { .. } => "bad_spec",
            Error::Kube(_) => "kube",
            Error::Ssh(_) => "ssh",
            Error::NameTaken(_) => "name_taken",
        }
    }
}
