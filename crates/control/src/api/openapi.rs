//! The OpenAPI 3.0 document served at `/openapi.json`, written by hand from the routes in
//! [`ROUTES`] (a test checks the two agree and that the document parses as OpenAPI).

use serde_json::{json, Value};

/// Routes that need no token: the liveness probe and the dashboard's static page, script
/// and style (code shipped in the binary, no data).
pub const OPEN: &[&str] = &["/healthz", "/", "/dashboard/app.js", "/dashboard/app.css"];

/// Routes that answer with a stream of server-sent events (`?max_events=N` ends it).
pub const STREAMS: &[&str] = &["/api/v1/dashboard/stream"];

/// Every route the server answers: (method, path, summary, request schema).
pub const ROUTES: &[(&str, &str, &str, Option<&str>)] = &[
    ("get", "/healthz", "Liveness probe.", None),
    (
        "get",
        "/",
        "The dashboard page (static, embedded; asks for the token and shows nothing without it).",
        None,
    ),
    ("get", "/dashboard/app.js", "The dashboard's script.", None),
    ("get", "/dashboard/app.css", "The dashboard's style.", None),
    (
        "get",
        "/api/v1/dashboard",
        "One dashboard snapshot: hosts, links, devices, chains, instances with live counters, energy, operations.",
        None,
    ),
    (
        "get",
        "/api/v1/dashboard/stream",
        "Server-sent events: `hello` (the token's role), then a `snapshot` every 500 ms (query `max_events` ends the stream).",
        None,
    ),
    ("get", "/openapi.json", "This document.", None),
    ("get", "/metrics", "Prometheus text metrics.", None),
    (
        "post",
        "/api/v1/plan",
        "Dry-run chaining and placement of a service (nothing is reserved).",
        Some("Service"),
    ),
    (
        "post",
        "/api/v1/projection",
        "The `nfx place` and `nfx chain` inputs projected from the live infrastructure and these services (nothing is reserved).",
        Some("ProjectionRequest"),
    ),
    (
        "get",
        "/api/v1/optimize",
        "Dry run: the exact re-placement of every deployed instance, its cost, proven gap and migrations (query `time_limit_s`, default 10).",
        None,
    ),
    (
        "post",
        "/api/v1/optimize",
        "Carry out the exact re-placement: one migrate operation per move, stopping at the first that does not complete.",
        Some("OptimizeRequest"),
    ),
    ("get", "/api/v1/services", "List services.", None),
    (
        "post",
        "/api/v1/services",
        "Deploy a service: chain, place, deploy, steer (asynchronous operation).",
        Some("Service"),
    ),
    (
        "get",
        "/api/v1/services/{id}",
        "One service with its hop-by-hop path.",
        None,
    ),
    (
        "delete",
        "/api/v1/services/{id}",
        "Destroy a service: steer away, then destroy its instances.",
        None,
    ),
    ("get", "/api/v1/instances", "List VNF instances.", None),
    (
        "get",
        "/api/v1/instances/{id}",
        "One instance, its placement and live state from its VNFM.",
        None,
    ),
    (
        "post",
        "/api/v1/instances/{id}/migrate",
        "Migrate an instance with its flow state.",
        Some("MigrateRequest"),
    ),
    ("get", "/api/v1/operations", "List operations.", None),
    (
        "get",
        "/api/v1/energy",
        "Energy (J) and power (W) per host and per service from the host agents' power agents, each with its source (rapl or model).",
        None,
    ),
    (
        "get",
        "/api/v1/operations/{id}",
        "One operation with its journaled steps.",
        None,
    ),
    (
        "get",
        "/api/v1/events",
        "The last events (query `limit`, 1..=10000, default 100).",
        None,
    ),
    (
        "get",
        "/agent/v1/instances",
        "Agent: ids of the instances it holds.",
        None,
    ),
    (
        "post",
        "/agent/v1/instances",
        "Agent: deploy_instance.",
        Some("InstanceSpec"),
    ),
    (
        "get",
        "/agent/v1/instances/{id}",
        "Agent: get_instance_state.",
        None,
    ),
    (
        "delete",
        "/agent/v1/instances/{id}",
        "Agent: destruct_instance.",
        None,
    ),
    (
        "put",
        "/agent/v1/instances/{id}/config",
        "Agent: configure_instance (body: the configuration).",
        Some("Config"),
    ),
    (
        "post",
        "/agent/v1/migrations",
        "Agent: migrate_instance(old, new, flows).",
        Some("AgentMigrate"),
    ),
];

fn schema(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// The media type of a route that does not answer JSON.
fn media_type(path: &str) -> Option<&'static str> {
    Some(match path {
        "/metrics" => "text/plain",
        "/" => "text/html",
        "/dashboard/app.js" => "text/javascript",
        "/dashboard/app.css" => "text/css",
        p if STREAMS.contains(&p) => "text/event-stream",
        _ => return None,
    })
}

fn response_schema(method: &str, path: &str) -> Option<(&'static str, Value)> {
    Some(match (method, path) {
        (_, p) if media_type(p).is_some() => return None,
        ("post", "/api/v1/services")
        | ("delete", "/api/v1/services/{id}")
        | ("post", "/api/v1/instances/{id}/migrate") => ("202", schema("Operation")),
        ("get", "/api/v1/operations/{id}") => ("200", schema("Operation")),
        ("get", "/api/v1/operations") => (
            "200",
            json!({"type": "array", "items": schema("Operation")}),
        ),
        ("get", "/api/v1/services") => (
            "200",
            json!({"type": "array", "items": schema("ServiceRow")}),
        ),
        ("get", "/api/v1/instances") => (
            "200",
            json!({"type": "array", "items": schema("InstanceRow")}),
        ),
        ("get", "/api/v1/optimize") => ("200", schema("OptimizePlan")),
        ("post", "/api/v1/optimize") => ("200", schema("OptimizeRun")),
        ("get", "/api/v1/events") => ("200", json!({"type": "array", "items": schema("Event")})),
        ("post", "/agent/v1/instances") => ("201", schema("InstanceState")),
        ("get", "/agent/v1/instances/{id}") | ("put", "/agent/v1/instances/{id}/config") => {
            ("200", schema("InstanceState"))
        }
        ("get", "/agent/v1/instances") => {
            ("200", json!({"type": "array", "items": {"type": "string"}}))
        }
        ("post", "/agent/v1/migrations") => ("200", schema("MigrateReport")),
        ("delete", "/agent/v1/instances/{id}") => ("204", Value::Null),
        _ => ("200", json!({"type": "object"})),
    })
}

/// The document.
pub fn document() -> Value {
    let mut paths = serde_json::Map::new();
    for &(method, path, summary, body) in ROUTES {
        let mut op = json!({"summary": summary, "responses": {}});
        let mutating = matches!(method, "post" | "put" | "delete")
            && !matches!(path, "/api/v1/plan" | "/api/v1/projection");
        match response_schema(method, path) {
            None => {
                let media = media_type(path).unwrap_or("text/plain");
                op["responses"]["200"] = json!({"description": "Text", "content": {media: {"schema": {"type": "string"}}}});
            }
            Some((code, Value::Null)) => {
                op["responses"][code] = json!({"description": "Done"});
            }
            Some((code, s)) => {
                op["responses"][code] = json!({"description": "Success", "content": {"application/json": {"schema": s}}});
            }
        }
        let err = json!({"description": "Error", "content": {"application/json": {"schema": schema("Error")}}});
        if path.contains("{id}") {
            op["parameters"] = json!([{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}]);
            op["responses"]["404"] = err.clone();
        }
        if STREAMS.contains(&path) {
            op["parameters"] = json!([{"name": "max_events", "in": "query", "required": false,
                "schema": {"type": "integer", "minimum": 1}}]);
            op["responses"]["400"] = err.clone();
        }
        if path == "/api/v1/optimize" && method == "get" {
            op["parameters"] = json!([{"name": "time_limit_s", "in": "query", "required": false,
                "schema": {"type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 600}}]);
            op["responses"]["400"] = err.clone();
        }
        if path == "/api/v1/events" {
            op["parameters"] = json!([{"name": "limit", "in": "query", "required": false,
                "schema": {"type": "integer", "minimum": 1, "maximum": 10000}}]);
            op["responses"]["400"] = err.clone();
        }
        if let Some(b) = body {
            op["requestBody"] = json!({"required": !matches!(b, "MigrateRequest" | "OptimizeRequest"),
                "content": {"application/json": {"schema": schema(b)}}});
            op["responses"]["400"] = err.clone();
        }
        if !OPEN.contains(&path) {
            op["security"] = json!([{"bearer": []}]);
            op["responses"]["401"] = err.clone();
        } else {
            op["security"] = json!([]);
        }
        if mutating {
            op["responses"]["403"] = err.clone();
            op["responses"]["409"] = err.clone();
        }
        let entry = paths.entry(path.to_string()).or_insert_with(|| json!({}));
        entry[method] = op;
    }
    let num = json!({"type": "number"});
    let string = json!({"type": "string"});
    json!({
        "openapi": "3.0.3",
        "info": {"title": "nfx controller and host agent", "version": env!("CARGO_PKG_VERSION"),
                 "description": "HYPER-style NFV management: services are chained and placed by the mediator; long requests return SOL003-like operation records. Every operation but /healthz and the dashboard's static page needs `Authorization: Bearer <token>`: the admin token anywhere, the read-only token (if configured) on GET and the dry-run plan only (403 elsewhere)."},
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": {"type": "object", "required": ["error"], "properties": {"error": string}},
                "Sla": {"type": "object", "required": ["max_latency_us", "min_throughput_gbps"], "additionalProperties": false,
                        "properties": {"max_latency_us": num, "min_throughput_gbps": num}},
                "ChainFunction": {"type": "object", "required": ["function"], "additionalProperties": false,
                        "properties": {"function": string, "config": {}, "capacity_need": num,
                                       "tier": {"type": "string", "enum": ["software", "table", "accelerator"]}}},
                "Service": {"type": "object", "required": ["id", "tenant", "ingress", "egress", "chain", "sla"], "additionalProperties": false,
                        "properties": {"id": string, "tenant": string, "ingress": string, "egress": string,
                                       "chain": {"type": "array", "items": schema("ChainFunction")}, "sla": schema("Sla")}},
                "ServiceRow": {"type": "object", "properties": {"service": schema("Service"),
                        "status": {"type": "string", "enum": ["deploying", "active", "destroying", "failed"]}, "operation": string}},
                "MigrateRequest": {"type": "object", "additionalProperties": false, "properties": {"device": string}},
                "ProjectionRequest": {"type": "object", "required": ["services"], "additionalProperties": false,
                        "properties": {"services": {"type": "array", "items": schema("Service")}}},
                "OptimizeRequest": {"type": "object", "additionalProperties": false, "properties": {"time_limit_s": num}},
                "Migration": {"type": "object", "properties": {"instance": string, "function": string, "host": string, "from": string, "to": string}},
                "OptimizePlan": {"type": "object", "properties": {"cost_now": num, "cost_optimal": num, "bound": num, "gap": num,
                        "proven_optimal": {"type": "boolean"}, "saved": num, "seconds": num, "movable": {"type": "integer"}, "pinned": {"type": "integer"},
                        "migrations": {"type": "array", "items": schema("Migration")}, "blocked": {"type": "array", "items": schema("Migration")}}},
                "OptimizeRun": {"type": "object", "properties": {"plan": schema("OptimizePlan"),
                        "operations": {"type": "array", "items": schema("Operation")}, "error": {"type": "string", "nullable": true}}},
                "Step": {"type": "object", "required": ["step", "status"], "properties": {
                        "step": {"type": "string", "enum": ["deploy", "configure", "steer", "unsteer", "migrate", "destruct"]},
                        "status": {"type": "string", "enum": ["pending", "started", "done", "undone"]}}},
                "Operation": {"type": "object", "required": ["id", "kind", "target", "state", "steps"], "properties": {
                        "id": string, "kind": {"type": "string", "enum": ["deploy", "destroy", "migrate"]}, "target": string,
                        "state": {"type": "string", "enum": ["STARTING", "PROCESSING", "COMPLETED", "FAILED_TEMP", "ROLLING_BACK", "ROLLED_BACK", "FAILED"]},
                        "steps": {"type": "array", "items": schema("Step")}, "error": {"type": "string", "nullable": true},
                        "recovered": {"type": "boolean"}, "created_ms": {"type": "integer"}, "updated_ms": {"type": "integer"}}},
                "InstanceSpec": {"type": "object", "required": ["id", "function", "device"], "additionalProperties": false, "properties": {
                        "id": string, "function": string, "device": string, "config": {}, "throughput_gbps": num, "capacity": num}},
                "InstanceRow": {"type": "object", "properties": {"spec": schema("InstanceSpec"), "host": string,
                        "tier": {"type": "string", "enum": ["software", "table", "accelerator"]}, "latency_us": num,
                        "status": {"type": "string", "enum": ["planned", "running", "destroying"]},
                        "users": {"type": "array", "items": string}}},
                "InstanceState": {"type": "object", "properties": {"id": string, "function": string, "device": string,
                        "status": string, "config_version": {"type": "integer"}, "flows": {"type": "integer"},
                        "packets": {"type": "integer"}, "cpu_pct": num, "detail": {}}},
                "MigrateReport": {"type": "object", "properties": {"flows": {"type": "integer"}, "bytes": {"type": "integer"}, "held_ms": {"type": "number"}}},
                "AgentMigrate": {"type": "object", "required": ["old", "new"], "additionalProperties": false, "properties": {
                        "old": string, "new": string, "flows": {"type": "array", "items": string}}},
                "Config": {"description": "The function's configuration, any JSON."},
                "Event": {"type": "object", "properties": {"seq": {"type": "integer"}, "ts_ms": {"type": "integer"}, "kind": string, "detail": {}}}
            }
        }
    })
}
