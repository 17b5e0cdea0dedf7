//! The OpenAI Responses API for the scripted model
//! (tests/common/scripted_model.rs): `POST /v1/responses`, streamed, as
//! Codex CLI calls a `[model_providers.X]` with `wire_api = "responses"`.
//! A step's tool calls are `function_call` items, or `custom_tool_call`
//! items for a freeform tool (Codex's `apply_patch`), each with a
//! `call_id`; the CLI sends each result back as a `function_call_output`
//! or `custom_tool_call_output` item with that id.

use axum::response::IntoResponse as _;
use serde_json::{Value, json};

use super::scripted_model::{Provider, Seen, Step, anthropic::Decoded};

/// The provider, for [`super::scripted_model::ScriptedModel::serve`].
pub const RESPONSES: Provider = Provider {
    serves,
    errand,
    decode,
    encode,
};

fn serves(path: &str) -> bool {
    path.ends_with("/responses") || path.ends_with("/models")
}

fn errand(path: &str, _request: &Value) -> Option<axum::response::Response> {
    path.ends_with("/models")
        .then(|| axum::Json(json!({"object": "list", "data": [], "models": []})).into_response())
}

fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str().or_else(|| p.as_str()))
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Object(o) => o
            .get("content")
            .map(text_of)
            .unwrap_or_else(|| content.to_string()),
        _ => String::new(),
    }
}

fn decode(_path: &str, request: &Value) -> Decoded {
    let input = request["input"].as_array().cloned().unwrap_or_default();
    // Codex opens with messages of its own (instructions, the environment);
    // the prompt's marker is in one of the user messages.
    let first_user = input
        .iter()
        .filter(|i| i["role"] == "user")
        .map(|i| text_of(&i["content"]))
        .collect::<Vec<_>>()
        .join("\n");
    let mut seen = Seen::default();
    for tool in request["tools"].as_array().into_iter().flatten() {
        let Some(name) = tool["name"].as_str() else {
            continue;
        };
        if tool["type"] == "namespace" {
            // An MCP server's tools, grouped: named to the script as
            // `NAMESPACE__TOOL` (`mcp__writ__read_file`).
            for inner in tool["tools"].as_array().into_iter().flatten() {
                if let Some(inner) = inner["name"].as_str() {
                    seen.tools.push(format!("{name}__{inner}"));
                }
            }
        } else {
            seen.tools.push(name.to_string());
        }
    }
    // The results since the model's last output: the trailing outputs.
    let mut results = Vec::new();
    for item in input.iter().rev() {
        match item["type"].as_str() {
            Some("function_call_output" | "custom_tool_call_output") => {
                let output = &item["output"];
                let is_error = output["success"] == false;
                results.push((
                    item["call_id"].as_str().unwrap_or_default().to_string(),
                    text_of(output),
                    is_error,
                ));
            }
            Some("function_call" | "custom_tool_call") => continue,
            _ => break,
        }
    }
    results.reverse();
    Decoded {
        first_user,
        seen,
        results,
    }
}

/// For a script's `NAMESPACE__TOOL`, the namespace the request declares
/// and the tool's own name in it.
fn namespaced(request: &Value, name: &str) -> Option<(String, String)> {
    request["tools"]
        .as_array()?
        .iter()
        .filter(|t| t["type"] == "namespace")
        .find_map(|t| {
            let space = t["name"].as_str()?;
            let inner = name.strip_prefix(space)?.strip_prefix("__")?;
            Some((space.to_string(), inner.to_string()))
        })
}

/// Whether the request declares `name` as a freeform (custom) tool.
fn freeform(request: &Value, name: &str) -> bool {
    request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|t| t["name"] == name && t["type"] == "custom")
}

fn encode(_path: &str, request: &Value, ids: &[String], step: &Step) -> axum::response::Response {
    let id = format!(
        "resp_scripted_{}",
        ids.first().map_or("text", |s| s.as_str())
    );
    let items: Vec<Value> = match step {
        Step::End(text) => vec![json!({
            "type": "message", "role": "assistant", "id": format!("msg_{id}"),
            "content": [{"type": "output_text", "text": text, "annotations": []}]
        })],
        Step::Call(calls) => calls
            .iter()
            .zip(ids)
            .map(|(call, call_id)| {
                if freeform(request, &call.name) {
                    // A freeform tool takes its input as text.
                    let input = call.input["input"]
                        .as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| call.input.to_string());
                    json!({"type": "custom_tool_call", "id": format!("ctc_{call_id}"),
                           "call_id": call_id, "name": call.name, "input": input})
                } else if let Some((space, inner)) = namespaced(request, &call.name) {
                    json!({"type": "function_call", "id": format!("fc_{call_id}"),
                           "call_id": call_id, "namespace": space, "name": inner,
                           "arguments": call.input.to_string()})
                } else {
                    json!({"type": "function_call", "id": format!("fc_{call_id}"),
                           "call_id": call_id, "name": call.name,
                           "arguments": call.input.to_string()})
                }
            })
            .collect(),
    };
    let mut events = vec![json!({"type": "response.created",
        "response": {"id": id, "object": "response", "status": "in_progress", "output": []}})];
    for (index, item) in items.iter().enumerate() {
        events.push(
            json!({"type": "response.output_item.added", "output_index": index, "item": item}),
        );
        events.push(
            json!({"type": "response.output_item.done", "output_index": index, "item": item}),
        );
    }
    events.push(json!({"type": "response.completed", "response": {
        "id": id, "object": "response", "status": "completed", "output": items,
        "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens": 10, "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": 20}}}));
    let body: String = events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
        .collect();
    axum::response::Response::builder()
        .header("content-type", "text/event-stream")
        .body(axum::body::Body::from(body))
        .unwrap_or_default()
}
