//! The controller's integration tests, one test binary (one link of the controller and
//! its dependencies instead of one per file): the REST API, the dashboard, the mediator,
//! the optimizer, restarts, the scale workload, mutual TLS and tunnel placement, each in
//! its own module.

mod common;

mod api;
mod dashboard;
mod mediator;
mod optimize;
mod restart;
mod scale;
mod tls;
mod tunnel_placement;
