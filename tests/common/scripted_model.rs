//! A scripted model: a loopback stand-in for a model provider's API that a
//! real coding CLI is pointed at. Each agent (a CLI session, or one subagent
//! of a session) replays its own [`Script`], which decides every step from
//! the tool results the CLI sent back, as a model would.
//!
//! Scripts speak in abstract steps ([`Step`]); a provider module turns a
//! provider's request into what the script sees ([`Seen`]) and a step into
//! the provider's response. Only the Anthropic Messages API (Claude Code) is
//! here today; OpenAI Responses/Chat and the Gemini API slot in beside it.
//!
//! Agents are told apart by a marker, `[script:NAME]`, in the first user
//! message of their conversation: the prompt a test starts a CLI with, or the
//! prompt a main script hands a subagent. A request without a known marker
//! (a title, a summary) gets a short text answer and moves no script on.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

/// One tool call a step makes.
#[derive(Clone, Debug)]
pub struct ToolCall {
    /// The tool's name as the CLI listed it (`Read`, `mcp__writ__edit_file`).
    pub name: String,
    /// Its arguments.
    pub input: Value,
}

/// What a script answers with next.
#[derive(Clone, Debug)]
pub enum Step {
    /// Call these tools, all in one assistant message (the CLI runs them and
    /// sends every result back in the next request).
    Call(Vec<ToolCall>),
    /// Say this and end the turn.
    End(String),
}

/// A tool's result as the model was sent it.
#[derive(Clone, Debug)]
pub struct ToolResult {
    /// The tool the script called.
    pub name: String,
    /// The arguments it called it with.
    pub input: Value,
    /// Every text the result carried, joined by newlines.
    pub text: String,
    /// Whether the CLI marked the result as an error.
    pub is_error: bool,
}

/// What the script sees of one request.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    /// The tools the model may call directly now (deferred ones are not in
    /// it: a script loads them with the CLI's tool search first).
    pub tools: Vec<String>,
    /// Tools named to the model as deferred (callable once loaded).
    pub deferred: Vec<String>,
    /// The results of the script's previous step, in call order.
    pub results: Vec<ToolResult>,
    /// Texts of user messages after the last results that are not results
    /// (a CLI's notices, e.g. a background subagent's completion).
    pub notices: Vec<String>,
}

/// One agent's decisions. `next` runs on a blocking thread: it may pause
/// (a model thinking) or wait for another agent.
pub trait Script: Send {
    /// The next step, given what the last request showed.
    fn next(&mut self, seen: &Seen) -> Step;
}

/// Everything one agent was sent and did, for a test's assertions.
#[derive(Clone, Debug, Default)]
pub struct Transcript {
    /// Every tool result the agent was sent, in order.
    pub results: Vec<ToolResult>,
    /// Every step it took.
    pub steps: Vec<String>,
    /// How many requests carried its marker.
    pub requests: usize,
}

struct Agent {
    script: Box<dyn Script>,
    transcript: Transcript,
}

#[derive(Default)]
struct Inner {
    agents: HashMap<String, Arc<Mutex<Agent>>>,
    /// tool_use id → the call, so a result names its tool.
    calls: HashMap<String, ToolCall>,
    next_id: u64,
    /// One line per request received (path, marker, model), for a failing
    /// test's message.
    log: Vec<String>,
    /// Other providers' APIs served beside the Anthropic Messages API.
    providers: Vec<Provider>,
}

/// Another provider's API, plugged in with [`ScriptedModel::serve`]: what
/// it answers itself (token counts) and how it reads a request and writes
/// a step.
#[derive(Clone, Copy)]
pub struct Provider {
    /// Whether a request path (without its query) is this provider's.
    pub serves: fn(&str) -> bool,
    /// An answer that needs no script (a token count), if the request is one.
    pub errand: fn(&str, &Value) -> Option<axum::response::Response>,
    /// Reads a request.
    pub decode: fn(&str, &Value) -> anthropic::Decoded,
    /// Writes `step` as the response to `request`; the ids name its calls.
    pub encode: fn(&str, &Value, &[String], &Step) -> axum::response::Response,
}

/// The server; dropped, it stops.
pub struct ScriptedModel {
    /// Base URL (`http://127.0.0.1:PORT`), what the CLI's base-URL setting takes.
    pub url: String,
    inner: Arc<Mutex<Inner>>,
    _runtime: tokio::runtime::Runtime,
}

impl ScriptedModel {
    /// Starts the server on a loopback port.
    pub fn start() -> ScriptedModel {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime for the scripted model");
        let inner = Arc::new(Mutex::new(Inner::default()));
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("a loopback port for the scripted model");
        let port = listener.local_addr().expect("its address").port();
        let state = inner.clone();
        let app = axum::Router::new().fallback(axum::routing::any(
            move |uri: axum::http::Uri, body: String| {
                let state = state.clone();
                async move { respond(state, uri, body).await }
            },
        ));
        runtime.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        ScriptedModel {
            url: format!("http://127.0.0.1:{port}"),
            inner,
            _runtime: runtime,
        }
    }

    /// Registers an agent: requests whose first user message carries
    /// `[script:NAME]` are answered by `script`.
    pub fn add(&self, name: &str, script: impl Script + 'static) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.agents.insert(
            name.to_string(),
            Arc::new(Mutex::new(Agent {
                script: Box::new(script),
                transcript: Transcript::default(),
            })),
        );
    }

    /// Serves `provider`'s API too.
    #[allow(dead_code)] // by the suites of the CLIs other than Claude Code
    pub fn serve(&self, provider: Provider) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.providers.push(provider);
    }

    /// The marker a prompt carries to be answered by the agent `name`.
    pub fn marker(name: &str) -> String {
        format!("[script:{name}]")
    }

    /// What the agent `name` was sent and did so far.
    pub fn transcript(&self, name: &str) -> Transcript {
        let agent = {
            let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            inner.agents.get(name).cloned()
        };
        agent
            .map(|a| {
                a.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .transcript
                    .clone()
            })
            .unwrap_or_default()
    }

    /// One line per request received so far.
    pub fn log(&self) -> Vec<String> {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .log
            .clone()
    }
}

async fn respond(
    state: Arc<Mutex<Inner>>,
    uri: axum::http::Uri,
    body: String,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let path = uri.path().to_string();
    let request: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    if path.ends_with("/count_tokens") {
        return axum::Json(json!({"input_tokens": 100})).into_response();
    }
    let provider = if path.ends_with("/v1/messages") {
        None
    } else {
        let providers = state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .providers
            .clone();
        match providers.into_iter().find(|p| (p.serves)(&path)) {
            Some(p) => Some(p),
            None => {
                log(&state, format!("{path}: not served"));
                return axum::http::StatusCode::NOT_FOUND.into_response();
            }
        }
    };
    if let Some(answer) = provider.and_then(|p| (p.errand)(&path, &request)) {
        return answer;
    }
    let encode = |ids: &[String], step: &Step| match provider {
        Some(p) => (p.encode)(&path, &request, ids, step),
        None => anthropic::encode(&request, ids, step),
    };
    let decoded = match provider {
        Some(p) => (p.decode)(&path, &request),
        None => anthropic::decode(&request),
    };
    let agent = {
        let mut inner = state.lock().unwrap_or_else(|e| e.into_inner());
        let found = inner
            .agents
            .iter()
            .find(|(name, _)| decoded.first_user.contains(&ScriptedModel::marker(name)))
            .map(|(name, agent)| (name.clone(), agent.clone()));
        let line = format!(
            "{path} agent={:?} tools={} results={}",
            found.as_ref().map(|f| &f.0),
            decoded.seen.tools.len(),
            decoded.results.len()
        );
        inner.log.push(line);
        found
    };
    // A request with no tools is the CLI's own errand (a title, a summary),
    // not a step of the agent's loop.
    let Some((_, agent)) = agent.filter(|_| !decoded.seen.tools.is_empty()) else {
        return encode(&[], &Step::End("ok".to_string()));
    };
    let mut seen = decoded.seen;
    {
        let inner = state.lock().unwrap_or_else(|e| e.into_inner());
        seen.results = decoded
            .results
            .iter()
            .map(|(id, text, is_error)| {
                let call = inner.calls.get(id);
                ToolResult {
                    name: call.map(|c| c.name.clone()).unwrap_or_default(),
                    input: call.map(|c| c.input.clone()).unwrap_or(Value::Null),
                    text: as_read(text),
                    is_error: *is_error,
                }
            })
            .collect();
    }
    let step = tokio::task::spawn_blocking(move || {
        let mut agent = agent.lock().unwrap_or_else(|e| e.into_inner());
        agent.transcript.requests += 1;
        agent
            .transcript
            .results
            .extend(seen.results.iter().cloned());
        let step = agent.script.next(&seen);
        agent.transcript.steps.push(format!("{step:?}"));
        step
    })
    .await
    .unwrap_or_else(|e| Step::End(format!("the script panicked: {e}")));
    let ids: Vec<String> = {
        let mut inner = state.lock().unwrap_or_else(|e| e.into_inner());
        match &step {
            Step::Call(calls) => calls
                .iter()
                .map(|call| {
                    inner.next_id += 1;
                    let id = format!("toolu_scripted_{:08}", inner.next_id);
                    inner.calls.insert(id.clone(), call.clone());
                    id
                })
                .collect(),
            Step::End(_) => Vec::new(),
        }
    };
    encode(&ids, &step)
}

fn log(state: &Arc<Mutex<Inner>>, line: String) {
    state
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .log
        .push(line);
}

/// Pauses like a model thinking (not a synchronisation: nothing waits on it).
pub fn think(pause: Duration) {
    if !pause.is_zero() {
        std::thread::sleep(pause);
    }
}

/// The Anthropic Messages API (`POST /v1/messages`, streamed as Claude Code
/// asks for it).
pub mod anthropic {
    use super::{Seen, Step};
    use serde_json::{Value, json};

    /// What a request says, in the provider-neutral form.
    pub struct Decoded {
        /// All text of the conversation's first user message.
        pub first_user: String,
        /// Tools and notices (results are filled in by the server, which
        /// knows which call each id answers).
        pub seen: Seen,
        /// The last user message's tool results: (tool_use_id, text, is_error).
        pub results: Vec<(String, String, bool)>,
    }

    fn texts(content: &Value) -> String {
        match content {
            Value::String(s) => s.clone(),
            Value::Array(blocks) => blocks
                .iter()
                .filter_map(|b| match b["type"].as_str() {
                    Some("text") => b["text"].as_str().map(str::to_string),
                    Some("tool_result") => Some(texts(&b["content"])),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        }
    }

    /// Reads a Messages request.
    pub fn decode(request: &Value) -> Decoded {
        let messages = request["messages"].as_array().cloned().unwrap_or_default();
        let first_user = messages
            .iter()
            .find(|m| m["role"] == "user")
            .map(|m| texts(&m["content"]))
            .unwrap_or_default();
        let mut seen = Seen::default();
        for tool in request["tools"].as_array().into_iter().flatten() {
            let Some(name) = tool["name"].as_str() else {
                continue;
            };
            if tool["defer_loading"] == true {
                seen.deferred.push(name.to_string());
            } else {
                seen.tools.push(name.to_string());
            }
        }
        // Deferred tools are also named in a system text the CLI adds to
        // the conversation; `mcp__` names there are callable once loaded.
        for message in &messages {
            let text = texts(&message["content"]);
            if text.contains("deferred tools") {
                for word in text.split_whitespace() {
                    if word.starts_with("mcp__") && !seen.deferred.iter().any(|d| d == word) {
                        seen.deferred.push(word.to_string());
                    }
                }
            }
        }
        let mut results = Vec::new();
        if let Some(last) = messages.iter().rev().find(|m| m["role"] == "user") {
            if let Value::Array(blocks) = &last["content"] {
                for block in blocks {
                    if block["type"] == "tool_result" {
                        results.push((
                            block["tool_use_id"]
                                .as_str()
                                .unwrap_or_default()
                                .to_string(),
                            texts(&block["content"]),
                            block["is_error"] == true,
                        ));
                    } else if block["type"] == "text" {
                        if let Some(t) = block["text"].as_str() {
                            seen.notices.push(t.to_string());
                        }
                    }
                }
            }
        }
        Decoded {
            first_user,
            seen,
            results,
        }
    }

    /// A streamed response (SSE) carrying `step`; `ids` name its tool calls.
    pub fn encode(request: &Value, ids: &[String], step: &Step) -> axum::response::Response {
        let model = request["model"].as_str().unwrap_or("scripted");
        let mut events: Vec<(&str, Value)> = vec![(
            "message_start",
            json!({"type": "message_start", "message": {
                "id": format!("msg_scripted_{}", ids.first().map_or("text", |s| s.as_str())),
                "type": "message", "role": "assistant", "model": model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 10, "output_tokens": 1}}}),
        )];
        let stop_reason = match step {
            Step::End(text) => {
                events.push((
                    "content_block_start",
                    json!({"type": "content_block_start", "index": 0,
                           "content_block": {"type": "text", "text": ""}}),
                ));
                events.push((
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": 0,
                           "delta": {"type": "text_delta", "text": text}}),
                ));
                events.push((
                    "content_block_stop",
                    json!({"type": "content_block_stop", "index": 0}),
                ));
                "end_turn"
            }
            Step::Call(calls) => {
                for (index, (call, id)) in calls.iter().zip(ids).enumerate() {
                    events.push((
                        "content_block_start",
                        json!({"type": "content_block_start", "index": index,
                               "content_block": {"type": "tool_use", "id": id,
                                                 "name": call.name, "input": {}}}),
                    ));
                    events.push((
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": index,
                               "delta": {"type": "input_json_delta",
                                         "partial_json": call.input.to_string()}}),
                    ));
                    events.push((
                        "content_block_stop",
                        json!({"type": "content_block_stop", "index": index}),
                    ));
                }
                "tool_use"
            }
        };
        events.push((
            "message_delta",
            json!({"type": "message_delta",
                   "delta": {"stop_reason": stop_reason, "stop_sequence": null},
                   "usage": {"output_tokens": 10}}),
        ));
        events.push(("message_stop", json!({"type": "message_stop"})));
        let body: String = events
            .iter()
            .map(|(event, data)| format!("event: {event}\ndata: {data}\n\n"))
            .collect();
        axum::response::Response::builder()
            .header("content-type", "text/event-stream")
            .header("cache-control", "no-cache")
            .body(axum::body::Body::from(body))
            .unwrap_or_default()
    }
}

/// What a model reads in a tool result: a CLI that shows its model only a
/// result's `structuredContent` (Claude Code 2.1.3xx, Codex) sends it as
/// JSON, and a model reads the text inside it (`text` in writ's tool set,
/// `content` in the filesystem set, SPEC §14): so does a script.
/// Anything else is read as it came.
pub fn as_read(text: &str) -> String {
    let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(text.trim()) else {
        return text.to_string();
    };
    match fields.get("text").or_else(|| fields.get("content")) {
        Some(Value::String(inner)) => inner.clone(),
        _ => text.to_string(),
    }
}
