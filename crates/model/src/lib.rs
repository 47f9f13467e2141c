//! nfx-model: the descriptors operators write (infrastructure and services, YAML), their
//! validation with file/field/message errors, and HYPER's resource and performance model,
//! which measured figures (accelerator calibration, dataplane benchmarks) can update.

pub mod calibration;
mod check;
pub mod error;
pub mod infra;
pub mod resource;
pub mod selector;
pub mod service;

pub use calibration::{
    AccelCalibration, AccelRecord, CalibrationFiles, DataplaneBench, DataplaneCase,
};
pub use error::{parse_json, parse_yaml, read_file, ModelError};
pub use infra::{
    Device, FrequencyPower, Host, Infrastructure, Link, Management, PowerModel, Tier, TlsFiles,
    ALGORITHMS,
};
pub use resource::{DeviceModel, InstanceModel, Pool, ResourceError, ResourceModel};
pub use selector::{Cidr, PortRange, Proto, Selector};
pub use service::{ChainFunction, Service, ServiceSet, Sla, TunnelSpec, TUNNEL_ALGS};
