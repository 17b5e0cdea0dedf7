//! Tool arguments, checked by hand so that every mistake a model makes is a
//! sentence it can fix (a protocol error would be shown to it as an opaque
//! failure).

use serde_json::{Map, Value};

/// A tool call's arguments, with the tool's name for messages.
pub(crate) struct Args<'a> {
    tool: &'a str,
    map: Map<String, Value>,
}

/// A bad argument: the sentence the model reads.
pub(crate) type Bad = String;

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl<'a> Args<'a> {
    /// Takes the arguments of `tool`, refusing any name not in `known`
    /// (a misspelt parameter would otherwise be silently ignored).
    pub(crate) fn new(
        tool: &'a str,
        map: Option<Map<String, Value>>,
        known: &[&str],
    ) -> Result<Self, Bad> {
        let map = map.unwrap_or_default();
        let mut unknown: Vec<&str> = map
            .keys()
            .map(String::as_str)
            .filter(|k| !known.contains(k))
            .collect();
        if !unknown.is_empty() {
            unknown.sort_unstable();
            let expected = if known.is_empty() {
                "it takes no arguments".to_string()
            } else {
                format!("it takes {}", known.join(", "))
            };
            return Err(format!(
                "{tool} got unknown argument(s) {}; {expected}. Nothing was done.",
                unknown.join(", ")
            ));
        }
        Ok(Args { tool, map })
    }

    fn wrong(&self, name: &str, want: &str, got: &Value) -> Bad {
        format!(
            "{}: `{name}` must be {want}, got {}. Nothing was done.",
            self.tool,
            kind(got)
        )
    }

    fn missing(&self, name: &str, want: &str) -> Bad {
        format!("{} needs `{name}` ({want}). Nothing was done.", self.tool)
    }

    /// An argument as it came (`null` counts as absent).
    pub(crate) fn value(&self, name: &str) -> Option<&Value> {
        self.map.get(name).filter(|v| !v.is_null())
    }

    /// A required string.
    pub(crate) fn string(&self, name: &str) -> Result<String, Bad> {
        self.opt_string(name)?
            .ok_or_else(|| self.missing(name, "a string"))
    }

    /// An optional string (`null` counts as absent).
    pub(crate) fn opt_string(&self, name: &str) -> Result<Option<String>, Bad> {
        match self.map.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.wrong(name, "a string", other)),
        }
    }

    /// A required, non-empty path string.
    pub(crate) fn path(&self, name: &str) -> Result<String, Bad> {
        let path = self.string(name)?;
        if path.is_empty() {
            return Err(format!(
                "{}: `{name}` is empty; give a path relative to the workspace root. Nothing was done.",
                self.tool
            ));
        }
        Ok(path)
    }

    /// An optional whole number of at least `min`.
    pub(crate) fn opt_count(&self, name: &str, min: u64) -> Result<Option<u64>, Bad> {
        let want = format!("a whole number of at least {min}");
        match self.map.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => match n.as_u64() {
                Some(v) if v >= min => Ok(Some(v)),
                // A float that is a whole number (e.g. 10.0) is what some
                // clients send for an integer.
                None if n
                    .as_f64()
                    .is_some_and(|f| f.fract() == 0.0 && f >= min as f64) =>
                {
                    Ok(n.as_f64().map(|f| f as u64))
                }
                _ => Err(format!(
                    "{}: `{name}` must be {want}, got {n}. Nothing was done.",
                    self.tool
                )),
            },
            Some(other) => Err(self.wrong(name, &want, other)),
        }
    }

    /// An optional boolean.
    pub(crate) fn opt_bool(&self, name: &str) -> Result<Option<bool>, Bad> {
        match self.map.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.wrong(name, "true or false", other)),
        }
    }

    /// An optional list of non-empty strings (a single string is taken as a
    /// list of one).
    pub(crate) fn opt_paths(&self, name: &str) -> Result<Option<Vec<String>>, Bad> {
        let want = "an array of path strings";
        let list = match self.map.get(name) {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(items)) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    match item {
                        Value::String(s) => out.push(s.clone()),
                        other => {
                            return Err(format!(
                                "{}: every entry of `{name}` must be a string, got {}. Nothing was done.",
                                self.tool,
                                kind(other)
                            ));
                        }
                    }
                }
                out
            }
            Some(other) => return Err(self.wrong(name, want, other)),
        };
        if list.iter().any(String::is_empty) {
            return Err(format!(
                "{}: `{name}` contains an empty path. Nothing was done.",
                self.tool
            ));
        }
        Ok(Some(list))
    }

    /// A required, non-empty list of paths.
    pub(crate) fn paths(&self, name: &str) -> Result<Vec<String>, Bad> {
        match self.opt_paths(name)? {
            Some(list) if !list.is_empty() => Ok(list),
            Some(_) => Err(format!(
                "{}: `{name}` is empty; name at least one path. Nothing was done.",
                self.tool
            )),
            None => Err(self.missing(name, "an array of path strings")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(v: Value, known: &[&str]) -> Result<Args<'static>, Bad> {
        let Value::Object(map) = v else {
            panic!("test arguments must be an object")
        };
        Args::new("edit_file", Some(map), known)
    }

    #[test]
    fn unknown_argument_is_named() {
        let err = args(
            json!({"path": "a", "old_str": "x"}),
            &["path", "old_string"],
        )
        .err()
        .unwrap_or_default();
        assert!(err.contains("old_str"), "{err}");
        assert!(err.contains("old_string"), "{err}");
    }

    #[test]
    fn wrong_type_and_missing_are_sentences() {
        let a = args(json!({"path": 3}), &["path", "limit"]).unwrap_or_else(|e| panic!("{e}"));
        let err = a.path("path").err().unwrap_or_default();
        assert!(err.contains("must be a string, got a number"), "{err}");
        let err = a.string("limit").err().unwrap_or_default();
        assert!(err.contains("needs `limit`"), "{err}");
    }

    #[test]
    fn counts_accept_whole_floats_only() {
        let a = args(json!({"limit": 10.0, "offset": 1.5}), &["limit", "offset"])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(a.opt_count("limit", 1), Ok(Some(10)));
        assert!(a.opt_count("offset", 1).is_err());
    }
}
