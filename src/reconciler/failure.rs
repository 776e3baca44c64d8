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
    /// Whether the API server refused a write because the job's namespace
    /// is being deleted (403, "unable to create new content in namespace …
    /// because it is being terminated"): nothing is wrong, the job goes
    /// with its namespace.
    pub(crate) fn namespace_terminating(&self) -> bool {
        matches!(self, Error::Kube(e) if namespace_terminating(e))
    }

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

/// [`Error::namespace_terminating`] of an API error.
pub(crate) fn namespace_terminating(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 403 && s.message.contains("because it is being terminated"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The API server's answer to a create in a namespace being deleted
    /// (apiserver's NamespaceLifecycle admission plugin), and a 403 that is
    /// RBAC's.
    #[test]
    fn a_terminating_namespace_is_told_from_a_refusal() {
        let status = |message: &str| {
            let s: kube::core::Status = serde_json::from_value(serde_json::json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": message, "reason": "Forbidden", "code": 403,
                "details": {"name": "mnist", "kind": "services",
                    "causes": [{"reason": "NamespaceTerminating", "message": "namespace ml is being terminated", "field": "metadata.namespace"}]}
            }))
            .unwrap();
            Error::Kube(kube::Error::Api(Box::new(s)))
        };
        assert!(status("services \"mnist\" is forbidden: unable to create new content in namespace ml because it is being terminated").namespace_terminating());
        assert!(!status("services is forbidden: User \"system:serviceaccount:dljob-system:dljob\" cannot create resource \"services\" in API group \"\" in the namespace \"ml\"").namespace_terminating());
    }
}
