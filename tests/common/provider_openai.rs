//! The OpenAI Responses API for the scripted model
//! (tests/common/scripted_model.rs): `POST /v1/responses`, streamed, as
//! Codex CLI calls a `[model_providers.X]` with `wire_api = "responses"`.
//! A step's tool calls are `function_call` items, or `custom_tool_call`
//! items for a freeform tool (Codex's `apply_patch`), each with a
//! `call_id`; the CLI sends each result back as a `function_call_output`
//! or `custom_tool_call_output` item with that id. MCP tools come in a
//! `namespace` (called as a `function_call` naming it), declared or loaded
//! by Codex's client-side `tool_search` (a `tool_search_call` answered by a
//! `tool_search_output` holding the namespaces found).

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
        if tool["type"] == "tool_search" {
            seen.tools.push(TOOL_SEARCH.to_string());
        } else if tool["type"] != "namespace" {
            if let Some(name) = tool["name"].as_str() {
                seen.tools.push(name.to_string());
            }
        }
    }
    // An MCP server's tools, grouped (declared, or loaded by a search):
    // named to the script as `NAMESPACE__TOOL` (`mcp__writ__read_file`).
    for (space, inner) in namespaces(request) {
        seen.tools.push(format!("{space}__{inner}"));
    }
    // The results since the model's last output: the trailing outputs, up
    // to the calls they answer (Codex sends the whole history, calls and
    // outputs of earlier steps with no message between them).
    let mut results = Vec::new();
    let mut past_calls = false;
    for item in input.iter().rev() {
        let output = matches!(
            item["type"].as_str(),
            Some("function_call_output" | "custom_tool_call_output" | "tool_search_output")
        );
        if output && past_calls {
            break;
        }
        match item["type"].as_str() {
            Some("tool_search_output") => {
                let found: Vec<String> = namespaces_in(std::slice::from_ref(item))
                    .into_iter()
                    .map(|(space, inner)| format!("{space}__{inner}"))
                    .collect();
                results.push((
                    item["call_id"].as_str().unwrap_or_default().to_string(),
                    found.join("\n"),
                    false,
                ));
            }
            Some("function_call_output" | "custom_tool_call_output") => {
                let output = &item["output"];
                let is_error = output["success"] == false;
                results.push((
                    item["call_id"].as_str().unwrap_or_default().to_string(),
                    text_of(output),
                    is_error,
                ));
            }
            Some("function_call" | "custom_tool_call" | "tool_search_call") => {
                past_calls = true;
                continue;
            }
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

/// The name a script calls Codex's client-side tool search by (a
/// `tool_search` tool has no name of its own).
const TOOL_SEARCH: &str = "tool_search";

/// The (namespace, tool) pairs of the namespaces in `items` (tools, or the
/// outputs of tool searches).
fn namespaces_in(items: &[Value]) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for item in items {
        let spaces: Vec<&Value> = if item["type"] == "tool_search_output" {
            item["tools"].as_array().into_iter().flatten().collect()
        } else {
            vec![item]
        };
        for space in spaces.into_iter().filter(|t| t["type"] == "namespace") {
            let Some(name) = space["name"].as_str() else {
                continue;
            };
            for inner in space["tools"].as_array().into_iter().flatten() {
                if let Some(inner) = inner["name"].as_str() {
                    found.push((name.to_string(), inner.to_string()));
                }
            }
        }
    }
    found
}

/// The namespaced tools the request declares or a search loaded.
fn namespaces(request: &Value) -> Vec<(String, String)> {
    let mut items: Vec<Value> = request["tools"].as_array().cloned().unwrap_or_default();
    items.extend(
        request["input"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|i| i["type"] == "tool_search_output")
            .cloned(),
    );
    namespaces_in(&items)
}

/// For a script's `NAMESPACE__TOOL`, the namespace and the tool's own name
/// in it.
fn namespaced(request: &Value, name: &str) -> Option<(String, String)> {
    namespaces(request).into_iter().find(|(space, inner)| {
        name.strip_prefix(space.as_str())
            .and_then(|rest| rest.strip_prefix("__"))
            == Some(inner.as_str())
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
                } else if call.name == TOOL_SEARCH {
                    json!({"type": "tool_search_call", "id": format!("ts_{call_id}"),
                           "call_id": call_id, "status": "completed", "execution": "client",
                           "arguments": call.input})
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
