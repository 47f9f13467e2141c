//! REST API tests: every endpoint with good and bad input (wrong types, missing fields,
//! unknown ids, missing token), the OpenAPI document, metrics, and a full service
//! lifecycle (plan, deploy, status, migrate, destroy) on the simulated VNFM.

use crate::common::{authed, reader, service, start, tmp, TOKEN};
use nfx_control::api::openapi::{OPEN, ROUTES, STREAMS};
use nfx_control::client::{Client, Refused};
use nfx_control::ops::OpState;
use std::time::Duration;
use zeroize::Zeroizing;

fn err(a: &nfx_control::client::Answer) -> String {
    a.body["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error message in {a:?}"))
        .to_string()
}

/// `path` with ids filled in; a stream asked for one event so that the request ends.
fn concrete(path: &str) -> String {
    let p = path.replace("{id}", "nope");
    if STREAMS.contains(&path) {
        format!("{p}?max_events=1")
    } else {
        p
    }
}

#[test]
fn openapi_document_validates_and_covers_every_route() {
    let dir = tmp("openapi");
    let base = start(&dir, Duration::ZERO);
    let c = authed(&base);
    let a = c.get("/openapi.json").unwrap();
    assert_eq!(a.status, 200);
    let doc: openapiv3::OpenAPI = serde_json::from_value(a.body.clone()).unwrap();
    assert!(doc.openapi.starts_with("3.0"));
    assert!(doc
        .components
        .unwrap()
        .security_schemes
        .contains_key("bearer"));
    for (method, path, _, _) in ROUTES {
        let item = doc
            .paths
            .paths
            .get(*path)
            .unwrap_or_else(|| panic!("{path} undocumented"));
        let item = item.as_item().unwrap();
        let op = match *method {
            "get" => &item.get,
            "post" => &item.post,
            "put" => &item.put,
            "delete" => &item.delete,
            m => panic!("method {m}"),
        };
        let op = op
            .as_ref()
            .unwrap_or_else(|| panic!("{method} {path} undocumented"));
        let secured = op.security.as_ref().is_some_and(|s| {
            s.iter().any(|req| req.contains_key("bearer")) && op.responses.responses.len() > 1
        });
        assert_eq!(secured, !OPEN.contains(path), "{method} {path}: security");
        let concrete = concrete(path);
        let ans = c.send(&method.to_uppercase(), &concrete, None).unwrap();
        let msg = ans.body["error"].as_str().unwrap_or_default();
        assert!(
            !msg.contains("no such route"),
            "{method} {path} is not served: {msg}"
        );
    }
    let a = c.get("/api/v2/nothing").unwrap();
    assert_eq!(a.status, 404);
    assert!(err(&a).contains("no such route"));
}

#[test]
fn every_route_but_healthz_needs_a_token_and_the_read_token_only_reads() {
    let dir = tmp("auth");
    let base = start(&dir, Duration::ZERO);
    let send = |c: &Client, method: &str, path: &str| {
        let body = (method != "get" && method != "delete").then_some("{}");
        c.send(&method.to_uppercase(), &concrete(path), body)
            .unwrap()
    };
    for (method, path, _, _) in ROUTES {
        for c in [
            Client::new(&base, None),
            Client::new(&base, Some(Zeroizing::new("wrong".into()))),
            Client::new(&base, Some(Zeroizing::new(format!("{TOKEN}x")))),
        ] {
            let a = send(&c, method, path);
            if OPEN.contains(path) {
                assert_eq!(a.status, 200, "{method} {path}: {a:?}");
                continue;
            }
            assert_eq!(a.status, 401, "{method} {path}: {a:?}");
            assert!(err(&a).contains("bearer token"), "{a:?}");
        }
        let a = send(&reader(&base), method, path);
        if *method == "get" || matches!(*path, "/api/v1/plan" | "/api/v1/projection") {
            assert!(
                a.status != 401 && a.status != 403,
                "{method} {path} with the read token: {a:?}"
            );
        } else {
            assert_eq!(a.status, 403, "{method} {path} with the read token: {a:?}");
            assert!(err(&a).contains("read-only token"), "{a:?}");
        }
    }
    let r = reader(&base);
    for path in [
        "/api/v1/services",
        "/api/v1/events",
        "/openapi.json",
        "/metrics",
    ] {
        assert_eq!(r.get(path).unwrap().status, 200, "{path}");
    }
    assert!(authed(&base)
        .get("/api/v1/services")
        .unwrap()
        .body
        .as_array()
        .unwrap()
        .is_empty());
}

#[test]
fn bad_input_gets_400_with_the_field() {
    let dir = tmp("badinput");
    let base = start(&dir, Duration::ZERO);
    let c = authed(&base);
    let mut wrong_type = service("web", "edge", "cloud", 500.0);
    wrong_type["sla"]["max_latency_us"] = "fast".into();
    let a = c.post("/api/v1/services", &wrong_type).unwrap();
    assert_eq!(a.status, 400);
    assert!(err(&a).contains("invalid type"), "{}", err(&a));
    let mut missing = service("web", "edge", "cloud", 500.0);
    missing.as_object_mut().unwrap().remove("sla");
    let a = c.post("/api/v1/services", &missing).unwrap();
    assert_eq!(a.status, 400);
    assert!(err(&a).contains("missing field `sla`"), "{}", err(&a));
    let mut unknown = service("web", "edge", "cloud", 500.0);
    unknown["colour"] = "blue".into();
    let a = c.post("/api/v1/plan", &unknown).unwrap();
    assert_eq!(a.status, 400);
    assert!(err(&a).contains("colour"));
    let a = c.send("POST", "/api/v1/services", Some("")).unwrap();
    assert_eq!(a.status, 400);
    let a = c
        .send("POST", "/api/v1/services", Some("{not json"))
        .unwrap();
    assert_eq!(a.status, 400);
    let a = c
        .post("/api/v1/services", &service("web", "edge", "cloud", -5.0))
        .unwrap();
    assert_eq!(a.status, 400);
    assert!(err(&a).contains("sla.max_latency_us"));
    let a = c
        .post("/api/v1/services", &service("web", "moon", "cloud", 500.0))
        .unwrap();
    assert_eq!(a.status, 400);
    assert!(err(&a).contains("unknown host \"moon\""), "{}", err(&a));
    let a = c
        .post(
            "/api/v1/services",
            &service("bad id", "edge", "cloud", 500.0),
        )
        .unwrap();
    assert_eq!(a.status, 400);
    assert!(err(&a).starts_with("id:"));
    let a = c.get("/api/v1/events?limit=abc").unwrap();
    assert_eq!(a.status, 400);
    assert!(err(&a).contains("limit"));
    let a = c
        .post(
            "/api/v1/instances/x/migrate",
            &serde_json::json!({"device": 3}),
        )
        .unwrap();
    assert_eq!(a.status, 400);
    let a = c
        .post("/agent/v1/instances", &serde_json::json!({"id": "a"}))
        .unwrap();
    assert_eq!(a.status, 400);
    assert!(err(&a).contains("missing field"));
    let a = c
        .post(
            "/agent/v1/migrations",
            &serde_json::json!({"old": 1, "new": "b"}),
        )
        .unwrap();
    assert_eq!(a.status, 400);
}

#[test]
fn unknown_ids_get_404() {
    let dir = tmp("unknown");
    let base = start(&dir, Duration::ZERO);
    let c = authed(&base);
    for a in [
        c.get("/api/v1/services/nope").unwrap(),
        c.delete("/api/v1/services/nope").unwrap(),
        c.get("/api/v1/instances/nope").unwrap(),
        c.post("/api/v1/instances/nope/migrate", &serde_json::json!({}))
            .unwrap(),
        c.get("/api/v1/operations/nope").unwrap(),
        c.get("/agent/v1/instances/nope").unwrap(),
        c.delete("/agent/v1/instances/nope").unwrap(),
        c.send("PUT", "/agent/v1/instances/nope/config", Some("{}"))
            .unwrap(),
        c.post(
            "/agent/v1/migrations",
            &serde_json::json!({"old": "a", "new": "b"}),
        )
        .unwrap(),
    ] {
        assert_eq!(a.status, 404, "{a:?}");
        assert!(
            err(&a).contains("nope") || err(&a).contains("\"a\""),
            "{a:?}"
        );
    }
}

#[test]
fn service_lifecycle_plan_deploy_migrate_destroy() {
    let dir = tmp("lifecycle");
    let base = start(&dir, Duration::ZERO);
    let c = authed(&base);
    let svc = service("web", "edge", "cloud", 500.0);

    let plan = c.post("/api/v1/plan", &svc).unwrap();
    assert_eq!(plan.status, 200, "{plan:?}");
    assert_eq!(plan.body["placements"].as_array().unwrap().len(), 2);
    for p in plan.body["placements"].as_array().unwrap() {
        assert_eq!(p["tier"], "software", "{p}");
    }
    assert!(c
        .get("/api/v1/instances")
        .unwrap()
        .body
        .as_array()
        .unwrap()
        .is_empty());

    let op = c.post("/api/v1/services", &svc).unwrap();
    assert_eq!(op.status, 202, "{op:?}");
    let id = op.body["id"].as_str().unwrap().to_string();
    let done =
        serde_json::to_value(c.wait_operation(&id, Duration::from_secs(20)).unwrap()).unwrap();
    assert_eq!(done["state"], "COMPLETED", "{done}");
    assert!(done["steps"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["status"] == "done"));

    let again = c.post("/api/v1/services", &svc).unwrap();
    assert_eq!(again.status, 409);
    assert!(err(&again).contains("already exists"));

    let s = c.get("/api/v1/services/web").unwrap();
    assert_eq!(s.body["status"], "active");
    let hops = s.body["path"]["hops"].as_array().unwrap().clone();
    assert_eq!(hops.len(), 2);
    assert_eq!(hops[0]["function"], "firewall");
    let fw = hops[0]["instance"].as_str().unwrap().to_string();
    let inst = c.get(&format!("/api/v1/instances/{fw}")).unwrap();
    assert_eq!(inst.status, 200);
    assert_eq!(inst.body["state"]["status"], "running");
    assert_eq!(inst.body["state"]["config_version"], 2);
    assert_eq!(inst.body["vnfm"], "simulated");
    assert!(inst.body["placement"]["reason"]
        .as_str()
        .unwrap()
        .contains("software"));
    let agent_ids = c.get("/agent/v1/instances").unwrap().body;
    assert_eq!(agent_ids.as_array().unwrap().len(), 2);

    let mv = c
        .post(
            &format!("/api/v1/instances/{fw}/migrate"),
            &serde_json::json!({"device": "nope"}),
        )
        .unwrap();
    assert_eq!(mv.status, 404);
    let mv = c
        .post(
            &format!("/api/v1/instances/{fw}/migrate"),
            &serde_json::json!({}),
        )
        .unwrap();
    assert_eq!(mv.status, 202, "{mv:?}");
    let labels: Vec<String> = mv.body["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        labels,
        ["deploy", "configure", "migrate", "steer", "destruct"]
    );
    let done = serde_json::to_value(
        c.wait_operation(mv.body["id"].as_str().unwrap(), Duration::from_secs(20))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(done["state"], "COMPLETED", "{done}");
    let s = c.get("/api/v1/services/web").unwrap();
    let new_fw = s.body["path"]["hops"][0]["instance"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(new_fw, fw);
    assert_eq!(
        c.get(&format!("/api/v1/instances/{fw}")).unwrap().status,
        404
    );
    assert_eq!(
        c.get(&format!("/api/v1/instances/{new_fw}"))
            .unwrap()
            .status,
        200
    );

    let fast = c
        .post("/api/v1/services", &service("fast", "edge", "edge", 20.0))
        .unwrap();
    assert_eq!(fast.status, 202, "{fast:?}");
    c.wait_operation(fast.body["id"].as_str().unwrap(), Duration::from_secs(20))
        .unwrap();
    let fs = c.get("/api/v1/services/fast").unwrap();
    for h in fs.body["path"]["hops"].as_array().unwrap() {
        assert_eq!(h["device"], "tt-edge", "{h}");
    }
    let none = c
        .post("/api/v1/services", &service("imp", "edge", "cloud", 5.0))
        .unwrap();
    assert_eq!(none.status, 409);
    assert!(
        err(&none).contains("no chain meets the SLA"),
        "{}",
        err(&none)
    );

    let d = c.delete("/api/v1/services/web").unwrap();
    assert_eq!(d.status, 202);
    let done = serde_json::to_value(
        c.wait_operation(d.body["id"].as_str().unwrap(), Duration::from_secs(20))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(done["state"], "COMPLETED");
    assert_eq!(done["steps"][0]["step"], "unsteer");
    assert_eq!(c.get("/api/v1/services/web").unwrap().status, 404);
    let left = c.get("/api/v1/instances").unwrap().body;
    assert_eq!(
        left.as_array().unwrap().len(),
        2,
        "only the `fast` service's instances stay"
    );
    let ev = c.get("/api/v1/events?limit=500").unwrap().body;
    assert!(ev
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["kind"] == "operation.completed"));

    let m = c.get("/metrics").unwrap();
    let text = m.body.as_str().unwrap();
    assert!(
        text.contains("nfx_operations{state=\"COMPLETED\"} 4"),
        "{text}"
    );
    assert!(
        text.contains("nfx_instances{status=\"running\"} 2"),
        "{text}"
    );
    assert!(
        text.contains(
            "nfx_api_requests_total{method=\"POST\",route=\"/api/v1/services\",status=\"202\"} 2"
        ),
        "{text}"
    );
    assert!(text.contains("nfx_api_request_duration_seconds_count"));
}

#[test]
fn the_typed_client_reads_the_controllers_types_and_refusals_keep_the_status() {
    let dir = tmp("typed");
    let base = start(&dir, Duration::ZERO);
    let c = authed(&base);
    let svc: nfx_model::Service =
        serde_json::from_value(service("web", "edge", "cloud", 500.0)).unwrap();
    let plan = c.plan(&svc).unwrap();
    assert_eq!(plan.placements.len(), 2, "{plan:?}");
    let op = c.deploy(&svc).unwrap();
    let done = c.wait_operation(&op.id, Duration::from_secs(20)).unwrap();
    assert_eq!(done.state, OpState::Completed, "{done:?}");
    let web = c.service("web").unwrap();
    assert_eq!(web.row.status, "active");
    let hops = web.path.expect("a deployed service has a path").hops;
    assert_eq!(hops.len(), 2);
    let fw = c.instance(&hops[0].instance).unwrap();
    assert_eq!(fw.vnfm, "simulated");
    assert_eq!(fw.state.expect("live state").status, "running");
    assert!(fw.state_error.is_none());
    assert_eq!(c.instances().unwrap().len(), 2);
    assert!(c.operations().unwrap().iter().any(|o| o.id == op.id));
    assert!(c
        .events(100)
        .unwrap()
        .iter()
        .any(|e| e.kind == "operation.completed"));

    let refused = |e: anyhow::Error| e.downcast::<Refused>().expect("a refusal");
    let again = refused(c.deploy(&svc).unwrap_err());
    assert_eq!(again.status, 409);
    assert!(again.message.contains("already exists"), "{again}");
    let nope = refused(c.destroy("nope").unwrap_err());
    assert_eq!(nope.status, 404);
    assert!(nope.message.contains("nope"), "{nope}");
    let ro = refused(reader(&base).destroy("web").unwrap_err());
    assert_eq!(ro.status, 403, "{ro}");
    let anon = refused(Client::new(&base, None).services().unwrap_err());
    assert_eq!(anon.status, 401, "{anon}");

    let gone = c.destroy("web").unwrap();
    let done = c.wait_completed(&gone.id, Duration::from_secs(20)).unwrap();
    assert_eq!((done.id, done.state), (gone.id, OpState::Completed));
    assert!(c.services().unwrap().is_empty());
    let unknown = c
        .wait_completed("op-nope", Duration::from_secs(1))
        .unwrap_err();
    assert!(format!("{unknown:#}").contains("op-nope"), "{unknown:#}");
}

#[test]
fn a_wrong_method_gets_405_with_a_json_error() {
    let dir = tmp("method");
    let base = start(&dir, Duration::ZERO);
    let c = authed(&base);
    for a in [
        c.post("/api/v1/instances", &serde_json::json!({})).unwrap(),
        c.delete("/api/v1/operations").unwrap(),
        c.send("PUT", "/api/v1/services", Some("{}")).unwrap(),
    ] {
        assert_eq!(a.status, 405, "{a:?}");
        assert!(err(&a).contains("not allowed"), "{a:?}");
    }
}
