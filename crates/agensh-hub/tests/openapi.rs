//! The OpenAPI document (`GET /api/v1/openapi.json`) is true: it lists exactly the routes
//! the router serves, and every operation, called on a real hub with the document's own
//! examples, answers a documented status with a body of the documented schema.

mod common;

use std::collections::BTreeSet;

use common::org;
use reqwest::Method;
use serde_json::{json, Value};

/// Operations whose example is refused, on purpose, when the document is walked in its
/// order: (method, path, status, code). Everything else must succeed.
const REFUSED: &[(&str, &str, u16, &str)] = &[
    // The example PR was merged by the operation just before: a merged PR does not close.
    ("POST", "/api/v1/prs/{n}/close", 409, "pr_not_open"),
];

/// What `$ref` points at, inside `doc`.
fn resolve<'a>(doc: &'a Value, v: &'a Value) -> &'a Value {
    match v.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let pointer = r.strip_prefix('#').expect("a local $ref");
            let target = doc
                .pointer(pointer)
                .unwrap_or_else(|| panic!("$ref {r} points at nothing"));
            resolve(doc, target)
        }
        None => v,
    }
}

fn type_matches(t: &str, v: &Value) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "null" => v.is_null(),
        other => panic!("a type this checker does not know: {other}"),
    }
}

/// Checks `v` against `schema` — `$ref`, `type`, `enum`, `required`, `properties`,
/// `additionalProperties`, `items`, `oneOf`, `anyOf` — and says what is wrong, at which
/// place. Stricter than JSON Schema on purpose: an object schema with `properties` and
/// no `additionalProperties` takes no other property, so a field the hub sends and the
/// document does not describe fails here.
fn check(doc: &Value, schema: &Value, v: &Value, at: &str, errors: &mut Vec<String>) {
    let schema = resolve(doc, schema);
    if let Some(variants) = schema.get("oneOf").and_then(Value::as_array) {
        let matching = variants
            .iter()
            .filter(|s| {
                let mut e = Vec::new();
                check(doc, s, v, at, &mut e);
                e.is_empty()
            })
            .count();
        if matching != 1 {
            errors.push(format!("{at}: {matching} of the oneOf variants match {v}"));
        }
    }
    if let Some(variants) = schema.get("anyOf").and_then(Value::as_array) {
        let any = variants.iter().any(|s| {
            let mut e = Vec::new();
            check(doc, s, v, at, &mut e);
            e.is_empty()
        });
        if !any {
            errors.push(format!("{at}: no anyOf variant matches {v}"));
        }
    }
    match schema.get("type") {
        Some(Value::String(t)) if !type_matches(t, v) => {
            errors.push(format!("{at}: {v} is not of type {t}"));
            return;
        }
        Some(Value::Array(ts)) if !ts.iter().any(|t| type_matches(t.as_str().unwrap(), v)) => {
            errors.push(format!("{at}: {v} is not of the types {ts:?}"));
            return;
        }
        _ => {}
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
        if !allowed.contains(v) {
            errors.push(format!("{at}: {v} is not one of {allowed:?}"));
        }
    }
    if let Some(obj) = v.as_object() {
        for r in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let r = r.as_str().unwrap();
            if !obj.contains_key(r) {
                errors.push(format!("{at}: the required property {r} is missing"));
            }
        }
        let properties = schema.get("properties").and_then(Value::as_object);
        let additional = schema.get("additionalProperties");
        for (k, value) in obj {
            let place = format!("{at}.{k}");
            match (properties.and_then(|p| p.get(k)), additional) {
                (Some(s), _) => check(doc, s, value, &place, errors),
                (None, Some(Value::Bool(false))) => errors.push(format!("{place}: not allowed")),
                (None, Some(Value::Bool(true))) => {}
                (None, Some(s)) => check(doc, s, value, &place, errors),
                (None, None) if properties.is_some() => {
                    errors.push(format!("{place}: sent, but not in the document"))
                }
                (None, None) => {}
            }
        }
    }
    if let (Some(items), Some(values)) = (schema.get("items"), v.as_array()) {
        for (i, item) in values.iter().enumerate() {
            check(doc, items, item, &format!("{at}[{i}]"), errors);
        }
    }
}

/// Every (METHOD, path) the document lists, in its order.
fn documented(doc: &Value) -> Vec<(String, String)> {
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths is an object") {
        for method in item.as_object().expect("a path item is an object").keys() {
            ops.push((method.to_uppercase(), path.clone()));
        }
    }
    ops
}

/// `s` made safe for a URL's path or query (the examples need only these).
fn encode(s: &str) -> String {
    s.replace('%', "%25")
        .replace(' ', "%20")
        .replace('#', "%23")
        .replace(':', "%3A")
        .replace('&', "%26")
        .replace('+', "%2B")
}

#[tokio::test]
async fn the_document_lists_every_route_and_each_answers_as_documented() {
    let org = org::example().await;

    // Served without a token, as JSON, and shaped as OpenAPI 3.
    let resp = reqwest::get(format!("{}/api/v1/openapi.json", org.hub().url))
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "application/json"
    );
    let doc: Value = resp.json().await.expect("the document is JSON");
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3."),
        "openapi: {}",
        doc["openapi"]
    );
    assert_eq!(doc["info"]["title"], "agensh hub");
    assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));
    assert!(doc["info"]["description"]
        .as_str()
        .unwrap()
        .contains("/mcp"));
    assert!(doc["components"]["schemas"].is_object());
    let bearer = &doc["components"]["securitySchemes"]["bearer"];
    assert_eq!(
        (&bearer["type"], &bearer["scheme"]),
        (&json!("http"), &json!("bearer"))
    );
    assert_eq!(doc["security"], json!([{"bearer": []}]));

    // Exactly the router's routes: the table `routes::api` is built from, and the two
    // root routes.
    let listed: BTreeSet<(String, String)> = documented(&doc).into_iter().collect();
    let mut routed: BTreeSet<(String, String)> = agensh_hub::routes::operations()
        .into_iter()
        .map(|(m, p)| (m.to_string(), format!("/api/v1{p}")))
        .collect();
    routed.insert(("GET".into(), "/healthz".into()));
    routed.insert(("GET".into(), "/metrics".into()));
    let missing: Vec<_> = routed.difference(&listed).collect();
    let unrouted: Vec<_> = listed.difference(&routed).collect();
    assert!(
        missing.is_empty(),
        "routed but not in the OpenAPI document (routes/openapi.rs): {missing:?}"
    );
    assert!(
        unrouted.is_empty(),
        "in the OpenAPI document but not routed (routes/mod.rs): {unrouted:?}"
    );

    // Every operation, with the document's own examples, in the document's order.
    let mut refused = Vec::new();
    let mut errors = Vec::new();
    let mut node_token: Option<String> = None;
    for (method, path) in documented(&doc) {
        let op = &doc["paths"][&path][method.to_lowercase()];
        let what = format!("{method} {path}");
        let public = op.get("security") == Some(&json!([]));
        let mut url_path = path.clone();
        let mut query = Vec::new();
        let mut headers = Vec::new();
        for p in op["parameters"].as_array().into_iter().flatten() {
            let p = resolve(&doc, p);
            let name = p["name"].as_str().unwrap();
            let required = p["required"] == json!(true);
            let Some(example) = p.get("example") else {
                assert!(
                    !required,
                    "{what}: the required parameter {name} has no example"
                );
                continue;
            };
            let mut e = Vec::new();
            check(
                &doc,
                &p["schema"],
                example,
                &format!("{what} parameter {name}"),
                &mut e,
            );
            errors.extend(e);
            let text = match example {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            match p["in"].as_str().unwrap() {
                "path" => url_path = url_path.replace(&format!("{{{name}}}"), &encode(&text)),
                "query" => query.push(format!("{name}={}", encode(&text))),
                "header" => headers.push((name.to_string(), text)),
                other => panic!("{what}: a parameter in {other}"),
            }
        }
        assert!(
            !url_path.contains('{'),
            "{what}: a path parameter without example"
        );
        if !query.is_empty() {
            url_path = format!("{url_path}?{}", query.join("&"));
        }
        let mut req = reqwest::Client::new().request(
            Method::from_bytes(method.as_bytes()).unwrap(),
            format!("{}{url_path}", org.hub().url),
        );
        if op["operationId"] == "registerNode" {
            // A node registers with its own token: the one `addNode`'s example issued.
            let token = node_token
                .as_deref()
                .expect("addNode comes before registerNode");
            req = req.bearer_auth(token);
        } else if !public {
            req = req.bearer_auth(&org.hub().admin_token);
        }
        for (name, value) in headers {
            req = req.header(name, value);
        }
        if let Some(body) = op.get("requestBody") {
            let media = &body["content"]["application/json"];
            let example = media
                .get("example")
                .unwrap_or_else(|| panic!("{what}: the request body has no example"));
            let mut e = Vec::new();
            check(
                &doc,
                &media["schema"],
                example,
                &format!("{what} request example"),
                &mut e,
            );
            errors.extend(e);
            req = req.json(example);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let content_type = resp
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let text = if op.get("x-agensh-stream") == Some(&json!(true)) && status == 200 {
            // A stream does not end: its first frame is enough.
            let mut resp = resp;
            let mut got = String::new();
            while !got.contains("event: frame") {
                let chunk = tokio::time::timeout(std::time::Duration::from_secs(10), resp.chunk())
                    .await
                    .unwrap_or_else(|_| panic!("{what}: no frame within 10 s: {got}"))
                    .unwrap()
                    .unwrap_or_else(|| panic!("{what}: the stream ended: {got}"));
                got.push_str(&String::from_utf8_lossy(&chunk));
            }
            got
        } else {
            resp.text().await.unwrap()
        };
        let Some(documented) = op["responses"].get(status.to_string()) else {
            panic!("{what} answered {status}, which it does not document: {text}");
        };
        let documented = resolve(&doc, documented);
        let media = documented["content"]
            .as_object()
            .and_then(|c| c.iter().next())
            .map(|(m, s)| (m.clone(), s["schema"].clone()));
        let (media, schema) = media.unwrap_or_else(|| panic!("{what} {status}: no content"));
        assert!(
            content_type.starts_with(&media),
            "{what} {status}: content-type {content_type}, documented {media}"
        );
        if media != "application/json" {
            assert!(status < 300, "{what}: {status} {text}");
            continue;
        }
        let body: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{what} {status}: not JSON ({e}): {text}"));
        if op["operationId"] == "addNode" && status == 201 {
            node_token = body["token"].as_str().map(str::to_string);
        }
        let mut e = Vec::new();
        check(&doc, &schema, &body, &format!("{what} {status}"), &mut e);
        errors.extend(e);
        if status >= 300 {
            let code = body["error"]["code"].as_str().unwrap_or("").to_string();
            assert!(
                code != "no_such_endpoint" && code != "method_not_allowed",
                "{what} is not routed: {text}"
            );
            refused.push((method.clone(), path.clone(), status, code));
        }
    }
    assert!(
        errors.is_empty(),
        "answers and examples off the document:\n{}",
        errors.join("\n")
    );
    let expected: Vec<_> = REFUSED
        .iter()
        .map(|(m, p, s, c)| (m.to_string(), p.to_string(), *s, c.to_string()))
        .collect();
    assert_eq!(refused, expected, "operations whose example was refused");
    org.shutdown().await;
}

#[tokio::test]
async fn the_route_table_names_each_operation_once() {
    let ops = agensh_hub::routes::operations();
    let unique: BTreeSet<_> = ops.iter().map(|(m, p)| (m.to_string(), *p)).collect();
    assert_eq!(
        unique.len(),
        ops.len(),
        "an operation is listed twice: {ops:?}"
    );
}

#[test]
fn the_checker_refuses_what_the_schema_does_not_allow() {
    let doc = json!({"components": {"schemas": {
        "Thing": {"type": "object", "required": ["id"], "properties": {
            "id": {"type": "integer"},
            "tag": {"type": ["string", "null"]},
            "state": {"oneOf": [
                {"type": "object", "required": ["state"], "properties": {"state": {"enum": ["a"]}}},
                {"type": "object", "required": ["state", "files"], "properties": {"state": {"enum": ["b"]}, "files": {"type": "array", "items": {"type": "string"}}}},
            ]},
            "map": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "integer"}}},
        }},
    }}});
    let thing = json!({"$ref": "#/components/schemas/Thing"});
    let errors = |v: Value| {
        let mut e = Vec::new();
        check(&doc, &thing, &v, "$", &mut e);
        e
    };
    assert!(errors(
        json!({"id": 1, "tag": null, "state": {"state": "b", "files": ["x"]}, "map": {"w01": [1]}})
    )
    .is_empty());
    assert_eq!(
        errors(json!({"tag": "x"})).len(),
        1,
        "a required property missing"
    );
    assert_eq!(errors(json!({"id": "1"})).len(), 1, "a wrong type");
    assert_eq!(
        errors(json!({"id": 1, "extra": 1})).len(),
        1,
        "an undocumented property"
    );
    assert_eq!(
        errors(json!({"id": 1, "state": {"state": "c"}})).len(),
        1,
        "no oneOf variant"
    );
    assert_eq!(
        errors(json!({"id": 1, "map": {"w01": ["x"]}})).len(),
        1,
        "additionalProperties"
    );
}
