//! The JSON report validates against `schema/report.schema.json`, checked with a
//! small validator for the keywords that schema uses (type, required,
//! properties, additionalProperties, items, enum, minimum, oneOf).

use crate::{config, run};
use bench::testserver::TestServer;
use serde_json::Value;

fn type_ok(v: &Value, t: &str) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => v.is_u64() || v.is_i64(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        other => panic!("schema uses unknown type {other}"),
    }
}

fn validate(v: &Value, s: &Value, path: &str, errors: &mut Vec<String>) {
    if let Some(t) = s.get("type") {
        let ok = match t {
            Value::String(t) => type_ok(v, t),
            Value::Array(ts) => ts.iter().any(|t| type_ok(v, t.as_str().unwrap())),
            _ => panic!("bad type keyword"),
        };
        if !ok {
            errors.push(format!("{path}: {v} is not {t}"));
            return;
        }
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array) {
        if !e.contains(v) {
            errors.push(format!("{path}: {v} not in {e:?}"));
        }
    }
    if let (Some(min), Some(n)) = (s.get("minimum").and_then(Value::as_f64), v.as_f64()) {
        if n < min {
            errors.push(format!("{path}: {n} < {min}"));
        }
    }
    if let Some(alts) = s.get("oneOf").and_then(Value::as_array) {
        let matching = alts
            .iter()
            .filter(|alt| {
                let mut e = Vec::new();
                validate(v, alt, path, &mut e);
                e.is_empty()
            })
            .count();
        if matching != 1 {
            errors.push(format!("{path}: matches {matching} of oneOf"));
        }
    }
    if let Some(obj) = v.as_object() {
        for r in s
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if !obj.contains_key(r.as_str().unwrap()) {
                errors.push(format!("{path}: missing {r}"));
            }
        }
        let props = s.get("properties").and_then(Value::as_object);
        if props.is_none() && s.get("additionalProperties").is_none() {
            return;
        }
        for (k, val) in obj {
            match props.and_then(|p| p.get(k)) {
                Some(ps) => validate(val, ps, &format!("{path}.{k}"), errors),
                None => match s.get("additionalProperties") {
                    Some(ap) if ap.is_object() => validate(val, ap, &format!("{path}.{k}"), errors),
                    // Undocumented fields are a schema bug: the schema must keep up.
                    _ => errors.push(format!("{path}.{k}: not in the schema")),
                },
            }
        }
    }
    if let (Some(items), Some(arr)) = (s.get("items"), v.as_array()) {
        for (i, item) in arr.iter().enumerate() {
            validate(item, items, &format!("{path}[{i}]"), errors);
        }
    }
}

fn schema() -> Value {
    let text = include_str!("../../schema/report.schema.json");
    serde_json::from_str(text).unwrap()
}

fn check(json: &str) {
    let v: Value = serde_json::from_str(json).unwrap();
    let mut errors = Vec::new();
    validate(&v, &schema(), "$", &mut errors);
    assert!(errors.is_empty(), "schema violations: {errors:#?}");
}

#[test]
fn closed_model_json_matches_schema() {
    let server = TestServer::start().unwrap();
    let mut c = config(&server.url("/status/418"));
    c.requests_total = Some(50);
    let r = run(&c);
    let json = r.json();
    check(&json);
    let v: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["requests"], 50);
    assert_eq!(v["errors"]["status"]["418"], 50);
    assert!(v["latency_ms"]["p99"].as_f64().unwrap() > 0.0);
    assert!(v["self_check"]["send_lag_ms"].is_null());
}

#[test]
fn open_model_json_matches_schema() {
    let server = TestServer::start().unwrap();
    let mut c = config(&server.url("/"));
    c.rate = Some(400.0);
    c.requests_total = Some(100);
    let json = run(&c).json();
    check(&json);
    let v: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["settings"]["model"], "open");
    assert!(v["self_check"]["send_lag_ms"]["p99"].is_number());
}

#[test]
fn validator_rejects_a_broken_report() {
    let server = TestServer::start().unwrap();
    let mut c = config(&server.url("/"));
    c.requests_total = Some(5);
    let mut v: Value = serde_json::from_str(&run(&c).json()).unwrap();
    v["requests"] = Value::String("five".into());
    v.as_object_mut().unwrap().remove("latency_ms");
    let mut errors = Vec::new();
    validate(&v, &schema(), "$", &mut errors);
    assert_eq!(errors.len(), 2, "{errors:?}");
}
