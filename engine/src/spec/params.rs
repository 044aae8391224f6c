//! Typed pipeline parameters: their declaration, and values given with `-p NAME=VALUE`.

use std::collections::BTreeMap;

use super::decode::{self, Cx};
use super::diagnostic::{Diagnostic, nearest};
use super::model::{Param, ParamType, ParamValue, Pipeline};
use super::yaml::{Node, Typed};

const PARAM_FIELDS: &[&str] = &["type", "default", "values", "description"];

/// The valid parameters, and the names of all declared ones (a parameter whose declaration
/// has an error is still declared: templates using it are not errors of their own).
pub fn decode(cx: &mut Cx<'_>, node: &Node) -> (Vec<Param>, Vec<String>) {
    let Some(entries) = node.as_map() else {
        cx.expected(
            node,
            "params",
            "a mapping of parameter names to {type, default}",
        );
        return (Vec::new(), Vec::new());
    };
    let declared = entries.iter().map(|e| e.key.clone()).collect();
    let mut out = Vec::with_capacity(entries.len());
    for e in entries {
        let name = &e.key;
        if !decode::is_identifier(name) {
            cx.d.error(e.key_pos, format!("'{name}' is not a valid parameter name"))
                .help("use letters, digits and '_', not starting with a digit");
            continue;
        }
        let field = format!("params.{name}");
        let Some(fields) = cx.fields(&e.value, &field, PARAM_FIELDS) else {
            if e.value.as_scalar().is_some() {
                cx.d.push_help_last(format!(
                    "write {name}: {{type: string, default: {}}}",
                    e.value.describe()
                ));
            }
            continue;
        };
        let ty_node = fields.iter().find(|f| f.key == "type").map(|f| &f.value);
        let Some(ty_node) = ty_node else {
            cx.d.error(e.value.pos, format!("{field}: a parameter needs a 'type'"))
                .help(format!("add type: one of {}", ParamType::NAMES.join(", ")));
            continue;
        };
        let Some(ty_name) = cx.string(ty_node, &format!("{field}.type")) else {
            continue;
        };
        let Some(ty) = ParamType::from_name(&ty_name) else {
            let d = cx.d.error(
                ty_node.pos,
                format!("{field}.type: unknown type '{ty_name}'"),
            );
            d.suggest(&ty_name, ParamType::NAMES);
            if d.help.is_empty() {
                d.help(format!("types are {}", ParamType::NAMES.join(", ")));
            }
            continue;
        };
        let mut param = Param {
            name: name.clone(),
            pos: e.key_pos,
            ty,
            default: None,
            values: None,
        };
        if let Some(v) = fields.iter().find(|f| f.key == "values") {
            match v.value.as_seq() {
                Some(items) if !items.is_empty() => {
                    param.values = items
                        .iter()
                        .map(|i| value_of(cx, i, ty, &format!("{field}.values")))
                        .collect();
                }
                _ => cx.expected(
                    &v.value,
                    &format!("{field}.values"),
                    "a non-empty list of allowed values",
                ),
            }
        }
        if let Some(d) = fields.iter().find(|f| f.key == "default")
            && let Some(value) = value_of(cx, &d.value, ty, &format!("{field}.default"))
        {
            if let Some(values) = &param.values
                && !values.contains(&value)
            {
                cx.d.error(
                    d.value.pos,
                    format!(
                        "{field}.default: {} is not one of the allowed values",
                        value.to_json()
                    ),
                )
                .help(format!("allowed: {}", list_values(values)));
            }
            param.default = Some(value);
        }
        if let Some(d) = fields.iter().find(|f| f.key == "description") {
            cx.string(&d.value, &format!("{field}.description"));
        }
        out.push(param);
    }
    (out, declared)
}

fn list_values(values: &[ParamValue]) -> String {
    values
        .iter()
        .map(|v| v.to_json().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A YAML value of a parameter's type.
fn value_of(cx: &mut Cx<'_>, node: &Node, ty: ParamType, field: &str) -> Option<ParamValue> {
    let typed = node.as_scalar().map(|s| s.typed());
    let value = match (ty, typed) {
        (ParamType::Int, Some(Typed::Int(i))) => ParamValue::Int(i),
        (ParamType::Float, Some(Typed::Int(i))) => ParamValue::Float(i as f64),
        (ParamType::Float, Some(Typed::Float(f))) if f.is_finite() => ParamValue::Float(f),
        (ParamType::Float, Some(Typed::Str(s))) if s.parse::<f64>().is_ok_and(f64::is_finite) => {
            // YAML 1.1 tools write `1e-5` as a string; it is plainly a number here.
            ParamValue::Float(s.parse().ok()?)
        }
        (ParamType::Bool, Some(Typed::Bool(b))) => ParamValue::Bool(b),
        (ParamType::String, Some(t)) if t != Typed::Null => {
            ParamValue::String(node.as_scalar().map(|s| s.text.clone()).unwrap_or_default())
        }
        (ParamType::List, None) if node.as_seq().is_some() => match node.to_json() {
            serde_json::Value::Array(items) => ParamValue::List(items),
            _ => return None,
        },
        _ => {
            cx.expected(node, field, ty.expected());
            return None;
        }
    };
    Some(value)
}

/// Parses a command-line value for a parameter of type `ty`.
pub fn parse_text(ty: ParamType, text: &str) -> Result<ParamValue, String> {
    let found = || format!("expected {}, found {text:?}", ty.expected());
    match ty {
        ParamType::Int => text
            .trim()
            .parse()
            .map(ParamValue::Int)
            .map_err(|_| found()),
        ParamType::Float => match text.trim().parse::<f64>() {
            Ok(f) if f.is_finite() => Ok(ParamValue::Float(f)),
            _ => Err(found()),
        },
        ParamType::Bool => match text.trim() {
            "true" => Ok(ParamValue::Bool(true)),
            "false" => Ok(ParamValue::Bool(false)),
            _ => Err(found()),
        },
        ParamType::String => Ok(ParamValue::String(text.to_owned())),
        ParamType::List => match serde_json::from_str::<serde_json::Value>(text) {
            Ok(serde_json::Value::Array(items)) => Ok(ParamValue::List(items)),
            _ => Err(format!(
                "expected a JSON list such as '[\"a\", \"b\"]', found {text:?}"
            )),
        },
    }
}

/// Splits `NAME=VALUE` as given to `-p`.
pub fn split_assignment(arg: &str) -> Result<(&str, &str), String> {
    arg.split_once('=')
        .filter(|(n, _)| !n.is_empty())
        .ok_or_else(|| format!("expected NAME=VALUE, found {arg:?}"))
}

/// The values of every parameter of `pipeline`: defaults, overridden by `-p` assignments.
/// Missing required parameters are reported only when `require_all` is set (a run needs
/// them; `lint --plan` shows them as unset).
pub fn resolve(
    pipeline: &Pipeline,
    assignments: &[String],
    require_all: bool,
) -> Result<BTreeMap<String, ParamValue>, Vec<Diagnostic>> {
    let mut values = BTreeMap::new();
    let mut errors = Vec::new();
    let origin = |arg: &str| format!("-p {arg}");
    for arg in assignments {
        let (name, text) = match split_assignment(arg) {
            Ok(pair) => pair,
            Err(e) => {
                errors.push(Diagnostic::error(&origin(arg), None, e));
                continue;
            }
        };
        let Some(param) = pipeline.param(name) else {
            let mut d = Diagnostic::error(
                &origin(arg),
                None,
                format!(
                    "pipeline '{}' has no parameter '{name}'",
                    pipeline.metadata.name
                ),
            );
            if let Some(best) = nearest(name, pipeline.params.iter().map(|p| p.name.as_str())) {
                d = d.with_help(format!("did you mean '{best}'?"));
            } else if !pipeline.params.is_empty() {
                let names: Vec<&str> = pipeline.params.iter().map(|p| p.name.as_str()).collect();
                d = d.with_help(format!("its parameters are {}", names.join(", ")));
            }
            errors.push(d);
            continue;
        };
        match parse_text(param.ty, text) {
            Ok(v) => {
                if let Some(allowed) = &param.values
                    && !allowed.contains(&v)
                {
                    errors.push(
                        Diagnostic::error(
                            &origin(arg),
                            None,
                            format!(
                                "parameter '{name}': {text:?} is not one of the allowed values"
                            ),
                        )
                        .with_help(format!("allowed: {}", list_values(allowed))),
                    );
                    continue;
                }
                values.insert(name.to_owned(), v);
            }
            Err(e) => errors.push(Diagnostic::error(
                &origin(arg),
                None,
                format!("parameter '{name}': {e}"),
            )),
        }
    }
    for p in &pipeline.params {
        if values.contains_key(&p.name) {
            continue;
        }
        match &p.default {
            Some(d) => {
                values.insert(p.name.clone(), d.clone());
            }
            None if require_all => errors.push(
                Diagnostic::error(
                    &pipeline.path,
                    Some(p.pos),
                    format!("parameter '{}' is required", p.name),
                )
                .with_help(format!(
                    "pass -p {}=VALUE ({})",
                    p.name,
                    p.ty.expected()
                )),
            ),
            None => {}
        }
    }
    if errors.is_empty() {
        Ok(values)
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_command_line_values_by_type() {
        assert_eq!(parse_text(ParamType::Int, "3"), Ok(ParamValue::Int(3)));
        assert!(parse_text(ParamType::Int, "3.5").is_err());
        assert_eq!(
            parse_text(ParamType::Float, "1e-5"),
            Ok(ParamValue::Float(1e-5))
        );
        assert!(parse_text(ParamType::Float, "nan").is_err());
        assert_eq!(
            parse_text(ParamType::Bool, "true"),
            Ok(ParamValue::Bool(true))
        );
        assert!(parse_text(ParamType::Bool, "yes").is_err());
        assert_eq!(
            parse_text(ParamType::List, r#"["a", 1]"#),
            Ok(ParamValue::List(vec!["a".into(), 1.into()]))
        );
        assert!(parse_text(ParamType::List, "a,b").is_err());
        assert_eq!(split_assignment("a=b=c"), Ok(("a", "b=c")));
        assert!(split_assignment("=x").is_err());
    }
}
