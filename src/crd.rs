//! The DLJob status CRD. Placeholder until the reconciler lands.

use std::process::ExitCode;

/// `dljob crd`.
pub fn print() -> anyhow::Result<ExitCode> {
    anyhow::bail!("dljob crd is not built yet")
}
