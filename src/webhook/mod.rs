//! The HTTPS admission webhook (`dljob serve`).
//!
//! - [`admission`]: AdmissionReview bytes ⇄ the pure core (no I/O);
//!   [`wire`]: the borrowed view of a review it reads, the bytes it answers.
//! - [`server`]: axum routes, body limits and timeouts, TLS, shutdown;
//!   [`conn`]: the bounds on client connections (count, deadlines).
//! - [`tls`], [`reload`]: certificate and config files, re-read on change.
//! - [`metrics`]: the Prometheus metrics.
//!
//! [`crate::serve`] wires the server to the command line, the cluster and
//! the reconciler.

pub mod admission;
pub(crate) mod budget;
pub(crate) mod conn;
pub(crate) mod frames;
pub mod metrics;
pub mod reload;
pub(crate) mod server;
pub mod tls;
pub mod wire;

pub use conn::Limits;
pub use server::{run, Inputs, Running, Settings, StartError};
pub use tls::TlsSource;
