//! dljob: distributed deep-learning training on plain Kubernetes workloads.
//!
//! The pure core — [`contract`], [`frameworks`], [`gang`], [`member`], [`mutate`],
//! [`validate`], [`tensorboard`] — turns one object plus the [`config::Config`] into a mutated
//! object with warnings, or violations that name the fix. It does no I/O;
//! the webhook server, the reconciler and the CLI only translate between the
//! wire and it.

pub mod args;
pub mod certs;
pub mod config;
pub mod contract;
pub mod crd;
mod edits;
pub mod frameworks;
mod gang;
pub mod inspect;
pub mod install;
mod label;
pub mod manifest;
pub mod member;
mod migrate;
pub mod mutate;
pub mod object;
pub mod offline;
mod operators;
pub mod preview;
pub mod reconciler;
pub mod serve;
pub mod telemetry;
pub mod tensorboard;
pub mod validate;
pub mod violation;
pub mod wait_names;
pub mod webhook;
