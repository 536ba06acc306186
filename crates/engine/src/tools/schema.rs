//! Validation of tool arguments against the (small) JSON schemas the tools
//! declare: object with typed properties, `required`, `enum`, numeric
//! bounds, `maxLength`, no unknown properties. Enough for our own tools;
//! MCP tools bring their own schemas and are checked the same way.

use serde_json::Value;

/// Check `args` against `schema`; the error is one sentence naming the field.
pub fn validate(schema: &Value, args: &Value) -> Result<(), String> {
    let Some(obj) = args.as_object() else {
        return Err(format!(
            "arguments must be a JSON object, got {}",
            kind(args)
        ));
    };
    let props = schema.get("properties").and_then(Value::as_object);
    for required in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(name) = required.as_str()
            && obj.get(name).is_none_or(Value::is_null)
        {
            return Err(format!("`{name}` is required"));
        }
    }
    for (name, value) in obj {
        let Some(prop) = props.and_then(|p| p.get(name)) else {
            if schema.get("additionalProperties") == Some(&Value::Bool(false)) {
                let known: Vec<&str> = props
                    .map(|p| p.keys().map(String::as_str).collect())
                    .unwrap_or_default();
                return Err(format!(
                    "unknown argument `{name}`; this tool takes {}",
                    known.join(", ")
                ));
            }
            continue;
        };
        if value.is_null() {
            continue; // optional, given as null
        }
        check(name, prop, value)?;
    }
    Ok(())
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn check(name: &str, prop: &Value, value: &Value) -> Result<(), String> {
    let ty = prop.get("type").and_then(Value::as_str).unwrap_or("");
    let ok = match ty {
        "string" => value.is_string(),
        "integer" => value.as_i64().is_some() || value.as_u64().is_some(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        _ => true,
    };
    if !ok {
        return Err(format!(
            "`{name}` must be {ty_article} {ty}, got {}",
            kind(value),
            ty_article = if ty.starts_with(['a', 'e', 'i', 'o']) {
                "an"
            } else {
                "a"
            }
        ));
    }
    if let Some(options) = prop.get("enum").and_then(Value::as_array)
        && !options.contains(value)
    {
        let shown: Vec<String> = options
            .iter()
            .map(|o| {
                o.as_str()
                    .map(String::from)
                    .unwrap_or_else(|| o.to_string())
            })
            .collect();
        return Err(format!(
            "`{name}` must be one of {}, got {value}",
            shown.join(", ")
        ));
    }

    if let Some(n) = value.as_f64() {
        if let Some(min) = prop
            .get("minimum")
            .and_then(Value::as_f64)
            .filter(|m| n < *m)
        {
            return Err(format!("`{name}` must be at least {min}, got {n}"));
        }
        if let Some(max) = prop
            .get("maximum")
            .and_then(Value::as_f64)
            .filter(|m| n > *m)
        {
            return Err(format!("`{name}` must be at most {max}, got {n}"));
        }
    }
    if let Some(s) = value.as_str() {
        if let Some(max) = prop
            .get("maxLength")
            .and_then(Value::as_u64)
            .filter(|m| s.chars().count() as u64 > *m)
        {
            return Err(format!("`{name}` is longer than {max} characters"));
        }
        if prop
            .get("minLength")
            .and_then(Value::as_u64)
            .is_some_and(|m| (s.trim().chars().count() as u64) < m)
        {
            return Err(format!("`{name}` must not be empty"));
        }
    }
    if let (Some(items), Some(list)) = (prop.get("items"), value.as_array()) {
        for (i, item) in list.iter().enumerate() {
            check(&format!("{name}[{i}]"), items, item)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "ticket_id": { "type": "string", "minLength": 1 },
                "priority": { "type": "string", "enum": ["P0", "P1", "P2", "P3"] },
                "level": { "type": "integer", "minimum": 1, "maximum": 2 },
                "tags": { "type": "array", "items": { "type": "string" } },
            },
            "required": ["ticket_id"],
            "additionalProperties": false,
        })
    }

    #[test]
    fn valid_arguments_pass() {
        assert!(
            validate(
                &schema(),
                &json!({"ticket_id": "T-1", "priority": "P1", "level": 2, "tags": ["a"]})
            )
            .is_ok()
        );
        assert!(validate(&schema(), &json!({"ticket_id": "T-1", "level": null})).is_ok());
    }

    #[test]
    fn each_violation_is_one_sentence_naming_the_field() {
        let cases = [
            (json!([1]), "arguments must be a JSON object, got a list"),
            (json!({}), "`ticket_id` is required"),
            (
                json!({"ticket_id": 7}),
                "`ticket_id` must be a string, got a number",
            ),
            (json!({"ticket_id": " "}), "`ticket_id` must not be empty"),
            (
                json!({"ticket_id": "T", "priority": "urgent"}),
                "`priority` must be one of P0, P1, P2, P3, got \"urgent\"",
            ),
            (
                json!({"ticket_id": "T", "level": 3}),
                "`level` must be at most 2, got 3",
            ),
            (
                json!({"ticket_id": "T", "level": 1.5}),
                "`level` must be an integer, got a number",
            ),
            (
                json!({"ticket_id": "T", "tags": [1]}),
                "`tags[0]` must be a string",
            ),
            (
                json!({"ticket_id": "T", "colour": "red"}),
                "unknown argument `colour`; this tool takes",
            ),
        ];
        for (args, expected) in cases {
            let err = validate(&schema(), &args).unwrap_err();
            assert!(err.starts_with(expected), "{args}: {err}");
        }
    }
}
