//! The OpenAI Chat Completions API for the scripted model
//! (tests/common/scripted_model.rs): `POST /v1/chat/completions`, streamed
//! or not, as opencode calls a provider on `@ai-sdk/openai-compatible`. A
//! step's tool calls are `tool_calls` with ids; the CLI sends each result
//! back as a `tool` message with its `tool_call_id`.

use axum::response::IntoResponse as _;
use serde_json::{Value, json};

use super::scripted_model::{Provider, Seen, Step, anthropic::Decoded};

/// The provider, for [`super::scripted_model::ScriptedModel::serve`].
pub const CHAT: Provider = Provider {
    serves,
    errand: |_, _| None,
    decode,
    encode,
};

fn serves(path: &str) -> bool {
    path.ends_with("/chat/completions")
}

fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn decode(_path: &str, request: &Value) -> Decoded {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let first_user = messages
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| text_of(&m["content"]))
        .collect::<Vec<_>>()
        .join("\n");
    let mut seen = Seen::default();
    for tool in request["tools"].as_array().into_iter().flatten() {
        if let Some(name) = tool["function"]["name"].as_str() {
            seen.tools.push(name.to_string());
        }
    }
    let mut results = Vec::new();
    for message in messages.iter().rev() {
        if message["role"] != "tool" {
            break;
        }
        results.push((
            message["tool_call_id"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            text_of(&message["content"]),
            false,
        ));
    }
    results.reverse();
    Decoded {
        first_user,
        seen,
        results,
    }
}

fn encode(_path: &str, request: &Value, ids: &[String], step: &Step) -> axum::response::Response {
    let model = request["model"].as_str().unwrap_or("scripted");
    let (content, calls, finish) = match step {
        Step::End(text) => (json!(text), Vec::new(), "stop"),
        Step::Call(calls) => (
            Value::Null,
            calls
                .iter()
                .zip(ids)
                .enumerate()
                .map(|(index, (call, id))| {
                    json!({"index": index, "id": id, "type": "function",
                           "function": {"name": call.name, "arguments": call.input.to_string()}})
                })
                .collect::<Vec<_>>(),
            "tool_calls",
        ),
    };
    let usage = json!({"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20});
    if request["stream"] != true {
        let mut message = json!({"role": "assistant", "content": content});
        if !calls.is_empty() {
            message["tool_calls"] = json!(calls);
        }
        return axum::Json(json!({
            "id": "chatcmpl-scripted", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage
        }))
        .into_response();
    }
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 0,
               "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut delta = json!({"role": "assistant", "content": content});
    if !calls.is_empty() {
        delta["tool_calls"] = json!(calls);
    }
    let mut last = chunk(json!({}), json!(finish));
    last["usage"] = usage;
    let body = format!(
        "data: {}\n\ndata: {last}\n\ndata: [DONE]\n\n",
        chunk(delta, Value::Null)
    );
    axum::response::Response::builder()
        .header("content-type", "text/event-stream")
        .body(axum::body::Body::from(body))
        .unwrap_or_default()
}
