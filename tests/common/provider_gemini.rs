//! The Gemini API for the scripted model (tests/common/scripted_model.rs):
//! `POST /v1beta/models/MODEL:generateContent` and
//! `:streamGenerateContent?alt=sse`, as Gemini CLI calls it with
//! `GOOGLE_GEMINI_BASE_URL`. A step's tool calls are `functionCall` parts
//! carrying an id; Gemini CLI sends each result back as a `functionResponse`
//! part with that id, its `response` being `{"output": …}` or
//! `{"error": …}`.

use serde_json::{Value, json};

use super::scripted_model::{Provider, Seen, Step, anthropic::Decoded};

/// The provider, for [`super::scripted_model::ScriptedModel::serve`].
pub const GEMINI: Provider = Provider {
    serves,
    errand,
    decode,
    encode,
};

fn serves(path: &str) -> bool {
    path.starts_with("/v1beta/models/") || path.starts_with("/v1/models/")
}

fn errand(path: &str, _request: &Value) -> Option<axum::response::Response> {
    path.ends_with(":countTokens")
        .then(|| axum::Json(json!({"totalTokens": 100})).into_response())
}

use axum::response::IntoResponse as _;

/// The text a `functionResponse` carried, and whether it was an error.
fn response_text(response: &Value) -> (String, bool) {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if let Some(error) = response.get("error") {
        (text(error), true)
    } else if let Some(output) = response.get("output") {
        (text(output), false)
    } else {
        (response.to_string(), false)
    }
}

fn decode(_path: &str, request: &Value) -> Decoded {
    let contents = request["contents"].as_array().cloned().unwrap_or_default();
    // Gemini CLI opens a conversation with a user turn of its own (the
    // environment's context): the prompt's marker is in a later one.
    let first_user = contents
        .iter()
        .filter(|c| c["role"] == "user")
        .flat_map(|c| c["parts"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| p["text"].as_str().map(str::to_string))
        .collect::<Vec<_>>()
        .join("\n");
    let mut seen = Seen::default();
    for tool in request["tools"].as_array().into_iter().flatten() {
        for f in tool["functionDeclarations"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if let Some(name) = f["name"].as_str() {
                seen.tools.push(name.to_string());
            }
        }
    }
    let mut results = Vec::new();
    if let Some(last) = contents.last().filter(|c| c["role"] == "user") {
        for part in last["parts"].as_array().into_iter().flatten() {
            if let Some(r) = part.get("functionResponse") {
                let (text, is_error) = response_text(&r["response"]);
                results.push((
                    r["id"].as_str().unwrap_or_default().to_string(),
                    text,
                    is_error,
                ));
            } else if let Some(t) = part["text"].as_str() {
                seen.notices.push(t.to_string());
            }
        }
    }
    Decoded {
        first_user,
        seen,
        results,
    }
}

fn encode(path: &str, request: &Value, ids: &[String], step: &Step) -> axum::response::Response {
    let parts: Vec<Value> = match step {
        // The CLI's own JSON errands (is the model or the user next, which
        // model to route to) get an answer they can parse.
        Step::End(_) if request["generationConfig"]["responseMimeType"] == "application/json" => {
            vec![json!({"text": json!({
                "reasoning": "scripted", "next_speaker": "user", "model_choice": "flash",
                "complexity_reasoning": "scripted", "complexity_score": 10
            }).to_string()})]
        }
        Step::End(text) => vec![json!({"text": text})],
        Step::Call(calls) => calls
            .iter()
            .zip(ids)
            .map(|(call, id)| {
                json!({"functionCall": {"name": call.name, "args": call.input, "id": id}})
            })
            .collect(),
    };
    let body = json!({
        "candidates": [{
            "content": {"role": "model", "parts": parts},
            "finishReason": "STOP",
            "index": 0
        }],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 10, "totalTokenCount": 20},
        "modelVersion": "scripted"
    });
    if path.ends_with(":streamGenerateContent") {
        axum::response::Response::builder()
            .header("content-type", "text/event-stream")
            .body(axum::body::Body::from(format!("data: {body}\n\n")))
            .unwrap_or_default()
    } else {
        axum::Json(body).into_response()
    }
}
