//! HYPER §IV-A resource and performance model: per device and per instance latency,
//! throughput total/used and capacity total/used (cores, table entries or queue pairs).

use crate::infra::{Infrastructure, Tier};
use std::collections::HashMap;

/// Why a reservation or release was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ResourceError {
    /// No instance with this id.
    #[error("unknown instance {0:?}")]
    UnknownInstance(String),
    /// No device with this id.
    #[error("unknown device {0:?}")]
    UnknownDevice(String),
    /// An instance with this id already exists.
    #[error("instance {0:?} already exists")]
    DuplicateInstance(String),
    /// The device cannot run the function.
    #[error("device {device:?} does not support function {function:?}")]
    Unsupported {
        /// Device id.
        device: String,
        /// Function asked for.
        function: String,
    },
    /// Not enough free resource.
    #[error("{what}: need {need}, only {free} free")]
    Insufficient {
        /// Which pool ("throughput_gbps", "capacity").
        what: &'static str,
        /// Amount asked for.
        need: f64,
        /// Amount free.
        free: f64,
    },
    /// Releasing more than is in use.
    #[error("{what}: cannot release {amount}, only {used} in use")]
    OverRelease {
        /// Which pool.
        what: &'static str,
        /// Amount to release.
        amount: f64,
        /// Amount in use.
        used: f64,
    },
    /// A negative or non-finite amount.
    #[error("{what}: amount must be finite and >= 0, got {amount}")]
    InvalidAmount {
        /// Which pool.
        what: &'static str,
        /// Offending amount.
        amount: f64,
    },
}

/// A resource with a total and a used part.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pool {
    /// Name used in errors.
    pub what: &'static str,
    /// Total amount.
    pub total: f64,
    /// Amount in use.
    pub used: f64,
}

impl Pool {
    /// A pool with nothing used.
    pub fn new(what: &'static str, total: f64) -> Self {
        Pool {
            what,
            total,
            used: 0.0,
        }
    }

    /// Amount still free.
    pub fn free(&self) -> f64 {
        self.total - self.used
    }

    fn valid(&self, amount: f64) -> Result<(), ResourceError> {
        if !amount.is_finite() || amount < 0.0 {
            return Err(ResourceError::InvalidAmount {
                what: self.what,
                amount,
            });
        }
        Ok(())
    }

    /// Fails unless `amount` fits in the free part.
    pub fn check(&self, amount: f64) -> Result<(), ResourceError> {
        self.valid(amount)?;
        if amount > self.free() {
            return Err(ResourceError::Insufficient {
                what: self.what,
                need: amount,
                free: self.free(),
            });
        }
        Ok(())
    }

    /// Takes `amount` from the free part.
    pub fn reserve(&mut self, amount: f64) -> Result<(), ResourceError> {
        self.check(amount)?;
        self.used += amount;
        Ok(())
    }

    /// Gives `amount` back.
    pub fn release(&mut self, amount: f64) -> Result<(), ResourceError> {
        self.valid(amount)?;
        if amount > self.used {
            return Err(ResourceError::OverRelease {
                what: self.what,
                amount,
                used: self.used,
            });
        }
        self.used -= amount;
        Ok(())
    }
}

/// A device's performance and what its instances have taken from it.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceModel {
    /// Device id.
    pub id: String,
    /// Host id.
    pub host: String,
    /// Tier, which fixes the capacity unit.
    pub tier: Tier,
    /// Processing latency of an instance on it, µs.
    pub latency_us: f64,
    /// Cost of using it.
    pub cost: f64,
    /// Functions it can run.
    pub functions: Vec<String>,
    /// Throughput, Gbit/s.
    pub throughput_gbps: Pool,
    /// Cores, table entries or queue pairs.
    pub capacity: Pool,
}

/// A deployed VNF instance: its share of a device, and what SLAs have taken from that share.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceModel {
    /// Instance id.
    pub id: String,
    /// Function it runs.
    pub function: String,
    /// Device it runs on.
    pub device: String,
    /// Host of the device.
    pub host: String,
    /// Tier of the device.
    pub tier: Tier,
    /// Processing latency, µs.
    pub latency_us: f64,
    /// Throughput reserved on the device (total) and used by SLAs.
    pub throughput_gbps: Pool,
    /// Capacity reserved on the device (total) and used by SLAs.
    pub capacity: Pool,
}

/// Devices and instances with their resource accounting.
#[derive(Debug, Clone, Default)]
pub struct ResourceModel {
    devices: Vec<DeviceModel>,
    instances: Vec<InstanceModel>,
    device_index: HashMap<String, usize>,
    /// Position of each instance in `instances` (a controller holds thousands).
    instance_index: HashMap<String, usize>,
}

impl ResourceModel {
    /// A model with every device of `infra` free and no instances.
    pub fn from_infrastructure(infra: &Infrastructure) -> Self {
        let devices: Vec<DeviceModel> = infra
            .devices
            .iter()
            .map(|d| DeviceModel {
                id: d.id.clone(),
                host: d.host.clone(),
                tier: d.tier,
                latency_us: d.latency_us,
                cost: d.cost,
                functions: d.functions.clone(),
                throughput_gbps: Pool::new("throughput_gbps", d.throughput_gbps),
                capacity: Pool::new("capacity", d.capacity()),
            })
            .collect();
        let device_index = devices
            .iter()
            .enumerate()
            .map(|(i, d)| (d.id.clone(), i))
            .collect();
        ResourceModel {
            devices,
            instances: Vec::new(),
            device_index,
            instance_index: HashMap::new(),
        }
    }

    /// Forgets every instance and frees every device: the state `from_infrastructure`
    /// gives, without rebuilding the device table (a controller replays its rows on it).
    pub fn reset(&mut self) {
        self.instances.clear();
        self.instance_index.clear();
        for d in &mut self.devices {
            d.throughput_gbps.used = 0.0;
            d.capacity.used = 0.0;
        }
    }

    /// All devices.
    pub fn devices(&self) -> &[DeviceModel] {
        &self.devices
    }

    /// All instances, in deployment order.
    pub fn instances(&self) -> &[InstanceModel] {
        &self.instances
    }

    /// The device `id`.
    pub fn device(&self, id: &str) -> Option<&DeviceModel> {
        self.device_index.get(id).map(|&i| &self.devices[i])
    }

    /// The instance `id`.
    pub fn instance(&self, id: &str) -> Option<&InstanceModel> {
        self.instance_index.get(id).map(|&i| &self.instances[i])
    }

    /// Deploys instance `id` of `function` on `device`, reserving `throughput_gbps` and
    /// `capacity` of the device for it (both or neither).
    pub fn deploy(
        &mut self,
        id: &str,
        function: &str,
        device: &str,
        throughput_gbps: f64,
        capacity: f64,
    ) -> Result<&InstanceModel, ResourceError> {
        if self.instance(id).is_some() {
            return Err(ResourceError::DuplicateInstance(id.to_string()));
        }
        let di = *self
            .device_index
            .get(device)
            .ok_or_else(|| ResourceError::UnknownDevice(device.to_string()))?;
        let d = &mut self.devices[di];
        if !d.functions.iter().any(|f| f == function) {
            return Err(ResourceError::Unsupported {
                device: device.to_string(),
                function: function.to_string(),
            });
        }
        d.capacity.check(capacity)?;
        d.throughput_gbps.reserve(throughput_gbps)?;
        d.capacity.reserve(capacity)?;
        self.instance_index
            .insert(id.to_string(), self.instances.len());
        self.instances.push(InstanceModel {
            id: id.to_string(),
            function: function.to_string(),
            device: device.to_string(),
            host: d.host.clone(),
            tier: d.tier,
            latency_us: d.latency_us,
            throughput_gbps: Pool::new("throughput_gbps", throughput_gbps),
            capacity: Pool::new("capacity", capacity),
        });
        Ok(self.instances.last().expect("just pushed"))
    }

    /// Removes instance `id`, returning its share to the device.
    pub fn destroy(&mut self, id: &str) -> Result<InstanceModel, ResourceError> {
        let pos = self
            .instance_index
            .remove(id)
            .ok_or_else(|| ResourceError::UnknownInstance(id.to_string()))?;
        let inst = self.instances.remove(pos);
        for later in &self.instances[pos..] {
            if let Some(i) = self.instance_index.get_mut(&later.id) {
                *i -= 1;
            }
        }
        let d = &mut self.devices[self.device_index[&inst.device]];
        d.throughput_gbps.release(inst.throughput_gbps.total)?;
        d.capacity.release(inst.capacity.total)?;
        Ok(inst)
    }

    /// Reserves an SLA's needs on instance `id` (both or neither).
    pub fn reserve(
        &mut self,
        id: &str,
        throughput_gbps: f64,
        capacity: f64,
    ) -> Result<(), ResourceError> {
        let inst = self.instance_mut(id)?;
        inst.capacity.check(capacity)?;
        inst.throughput_gbps.reserve(throughput_gbps)?;
        inst.capacity.reserve(capacity)
    }

    /// Releases an SLA's needs from instance `id` (both or neither).
    pub fn release(
        &mut self,
        id: &str,
        throughput_gbps: f64,
        capacity: f64,
    ) -> Result<(), ResourceError> {
        let inst = self.instance_mut(id)?;
        let mut c = inst.capacity;
        c.release(capacity)?;
        inst.throughput_gbps.release(throughput_gbps)?;
        inst.capacity = c;
        Ok(())
    }

    fn instance_mut(&mut self, id: &str) -> Result<&mut InstanceModel, ResourceError> {
        let i = *self
            .instance_index
            .get(id)
            .ok_or_else(|| ResourceError::UnknownInstance(id.to_string()))?;
        Ok(&mut self.instances[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> ResourceModel {
        let infra = Infrastructure::from_yaml(
            "i.yaml",
            "
hosts: [{ id: h, cores: 4 }]
devices:
  - { id: sw, host: h, tier: software, functions: [nat], latency_us: 30, throughput_gbps: 10, cpu_cores: 4 }
  - { id: tbl, host: h, tier: table, functions: [firewall], latency_us: 2, throughput_gbps: 100, table_entries: 1000 }
",
        )
        .unwrap();
        ResourceModel::from_infrastructure(&infra)
    }

    #[test]
    fn pool_reserve_and_release() {
        let mut p = Pool::new("x", 10.0);
        p.reserve(4.0).unwrap();
        assert_eq!(p.free(), 6.0);
        assert!(matches!(
            p.reserve(7.0),
            Err(ResourceError::Insufficient { need, free, .. }) if need == 7.0 && free == 6.0
        ));
        assert!(matches!(
            p.release(5.0),
            Err(ResourceError::OverRelease { .. })
        ));
        assert!(matches!(
            p.reserve(-1.0),
            Err(ResourceError::InvalidAmount { .. })
        ));
        p.release(4.0).unwrap();
        assert_eq!(p.used, 0.0);
    }

    #[test]
    fn deploy_takes_from_device() {
        let mut m = model();
        let i = m.deploy("fw1", "firewall", "tbl", 40.0, 16.0).unwrap();
        assert_eq!(i.tier, Tier::Table);
        assert_eq!(i.latency_us, 2.0);
        assert_eq!(i.capacity.total, 16.0);
        let d = m.device("tbl").unwrap();
        assert_eq!(d.throughput_gbps.used, 40.0);
        assert_eq!(d.capacity.free(), 984.0);
    }

    #[test]
    fn deploy_refusals_leave_no_trace() {
        let mut m = model();
        assert!(matches!(
            m.deploy("a", "firewall", "sw", 1.0, 1.0),
            Err(ResourceError::Unsupported { .. })
        ));
        assert!(matches!(
            m.deploy("a", "nat", "gpu", 1.0, 1.0),
            Err(ResourceError::UnknownDevice(_))
        ));
        assert!(m.deploy("a", "nat", "sw", 1.0, 5.0).is_err());
        assert_eq!(m.device("sw").unwrap().throughput_gbps.used, 0.0);
        m.deploy("a", "nat", "sw", 1.0, 1.0).unwrap();
        assert!(matches!(
            m.deploy("a", "nat", "sw", 1.0, 1.0),
            Err(ResourceError::DuplicateInstance(_))
        ));
    }

    #[test]
    fn reset_equals_a_fresh_model_and_index_follows_removals() {
        let mut m = model();
        m.deploy("a", "nat", "sw", 1.0, 1.0).unwrap();
        m.deploy("b", "firewall", "tbl", 2.0, 3.0).unwrap();
        m.deploy("c", "nat", "sw", 1.5, 1.0).unwrap();
        m.reserve("c", 0.5, 0.5).unwrap();
        m.destroy("a").unwrap();
        assert_eq!(m.instance("c").unwrap().throughput_gbps.used, 0.5);
        m.reserve("b", 1.0, 1.0).unwrap();
        assert_eq!(m.instance("b").unwrap().capacity.used, 1.0);
        let ids: Vec<&str> = m.instances().iter().map(|i| i.id.as_str()).collect();
        assert_eq!(ids, ["b", "c"]);
        m.reset();
        let fresh = model();
        assert_eq!(m.devices(), fresh.devices());
        assert!(m.instances().is_empty() && m.instance("b").is_none());
        m.deploy("b", "firewall", "tbl", 2.0, 3.0).unwrap();
        assert_eq!(m.instance("b").unwrap().capacity.total, 3.0);
    }

    #[test]
    fn sla_reservations_and_destroy() {
        let mut m = model();
        m.deploy("n1", "nat", "sw", 5.0, 2.0).unwrap();
        m.reserve("n1", 3.0, 1.0).unwrap();
        assert!(m.reserve("n1", 3.0, 0.5).is_err());
        assert!(m.reserve("n1", 1.0, 1.5).is_err());
        assert_eq!(m.instance("n1").unwrap().throughput_gbps.used, 3.0);
        assert!(m.release("n1", 1.0, 2.0).is_err());
        assert_eq!(m.instance("n1").unwrap().throughput_gbps.used, 3.0);
        m.release("n1", 3.0, 1.0).unwrap();
        assert!(matches!(
            m.reserve("zz", 1.0, 1.0),
            Err(ResourceError::UnknownInstance(_))
        ));
        let gone = m.destroy("n1").unwrap();
        assert_eq!(gone.id, "n1");
        assert_eq!(m.device("sw").unwrap().capacity.used, 0.0);
        assert!(m.destroy("n1").is_err());
    }
}
