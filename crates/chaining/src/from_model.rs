//! Bridge from the descriptors and resource model (`nfx-model`) to a chaining network, so
//! the orchestrator can chain services over what the mediator has deployed.

use crate::network::Network;
use crate::workload::{InstanceSpec, SlaSpec, MAX_LATENCY_US};
use nfx_model::service::Service;
use nfx_model::{Infrastructure, ModelError, ResourceModel};

/// A network whose nodes are `infra`'s hosts (transfer = shortest link latency; hosts with
/// no route get [`MAX_LATENCY_US`], which no bound accepts) and whose instances are
/// `model`'s, with their current throughput and capacity use.
pub fn network_from_model(
    file: &str,
    infra: &Infrastructure,
    model: &ResourceModel,
) -> Result<Network, ModelError> {
    let nodes: Vec<String> = infra.hosts.iter().map(|h| h.id.clone()).collect();
    let transfer: Vec<Vec<f64>> = infra
        .transfer_latency_us()
        .into_iter()
        .map(|row| row.into_iter().map(|v| v.min(MAX_LATENCY_US)).collect())
        .collect();
    let mut net = Network::new(file, &nodes, &transfer)?;
    for (i, inst) in model.instances().iter().enumerate() {
        let spec = InstanceSpec {
            id: inst.id.as_str().into(),
            function: inst.function.as_str().into(),
            node: inst.host.as_str().into(),
            kind: inst.tier.as_str().to_string(),
            processing_latency_us: inst.latency_us,
            throughput_total_gbps: inst.throughput_gbps.total,
            throughput_used_gbps: inst.throughput_gbps.used,
            capacity_total: inst.capacity.total,
            capacity_used: inst.capacity.used,
        };
        net.add_instance(file, &format!("instances[{i}]"), &spec)?;
    }
    Ok(net)
}

/// The chaining query for a service: its hosts, functions and SLA; each stage needs its
/// own function's `capacity_need` (`capacity_need` of the query is the largest, for
/// readers of the one-number form).
pub fn sla_for_service(s: &Service) -> SlaSpec {
    SlaSpec {
        id: s.id.as_str().into(),
        src_node: s.ingress.as_str().into(),
        dst_node: s.egress.as_str().into(),
        chain: s.chain.iter().map(|c| c.function.as_str().into()).collect(),
        latency_bound_us: s.sla.max_latency_us,
        throughput_gbps: s.sla.min_throughput_gbps,
        capacity_need: s.chain.iter().map(|c| c.capacity_need).fold(0.0, f64::max),
        stage_capacity: s.chain.iter().map(|c| c.capacity_need).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dp::{Chainer, Status};
    use nfx_model::ServiceSet;

    #[test]
    fn chains_a_service_over_deployed_instances() {
        let infra = Infrastructure::from_yaml(
            "i.yaml",
            "
hosts: [{ id: a, cores: 4 }, { id: b, cores: 4 }, { id: island, cores: 1 }]
devices:
  - { id: sw-a, host: a, tier: software, functions: [fw], latency_us: 40, throughput_gbps: 10, cpu_cores: 2 }
  - { id: tbl-b, host: b, tier: table, functions: [fw, nat], latency_us: 2, throughput_gbps: 40, table_entries: 100 }
links: [{ a: a, b: b, latency_us: 15 }]
",
        )
        .unwrap();
        let svc = ServiceSet::from_yaml(
            "s.yaml",
            "
services:
  - id: web
    tenant: t
    ingress: a
    egress: a
    chain: [{ function: fw, capacity_need: 8 }, { function: nat }]
    sla: { max_latency_us: 100, min_throughput_gbps: 1 }
",
            &infra,
        )
        .unwrap();
        let mut model = ResourceModel::from_infrastructure(&infra);
        model.deploy("fw-sw", "fw", "sw-a", 5.0, 2.0).unwrap();
        model.deploy("fw-hw", "fw", "tbl-b", 10.0, 16.0).unwrap();
        model.deploy("nat-hw", "nat", "tbl-b", 10.0, 16.0).unwrap();
        let net = network_from_model("i.yaml", &infra, &model).unwrap();
        let sla = sla_for_service(&svc.services[0]);
        assert_eq!(sla.capacity_need, 8.0);
        assert_eq!(sla.stage_capacity, [8.0, 1.0]);
        let q = net.query("s.yaml", "services[0]", &sla).unwrap();
        let mut c = Chainer::new();
        let o = c.solve(&net, &q);
        assert_eq!(o.status, Status::Ok);
        assert_eq!(o.latency_ns, Some(15_000 + 2_000 + 2_000 + 15_000));
        assert_eq!(net.inst_id(c.path()[0]), "fw-hw");
        assert_eq!(net.transfer_ns(0, 2), crate::network::to_ns(MAX_LATENCY_US));
    }
}
