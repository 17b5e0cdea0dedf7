//! What every tool result carries (SPEC §14, "Results reach the model
//! whatever the client shows it").
//!
//! Some clients give the model only `structuredContent` when a result has
//! it (Claude Code 2.1.3xx), others only `content`. So every tool of both
//! sets declares an `outputSchema`, and every result, success or refusal,
//! carries the same complete text in both: `content` is one text block,
//! and `structuredContent` holds that text (`text` in writ's set, `content`
//! in the filesystem set, the reference server's name), the agent's handle
//! (`agent`) and the tool's typed fields (a refusal's `error`). The
//! sentence asking the model to pass its handle is part of that one text,
//! never a block of its own a program reading `content[0]` would take for
//! the answer. Both tool sets are finished here, and only here.

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool};
use serde_json::{Map, Value, json};

use super::ToolSet;
use super::identity::handle::AGENT_ARG;

/// The field of `structuredContent` that holds a result's text.
pub(crate) fn text_field(set: ToolSet) -> &'static str {
    match set {
        ToolSet::Writ => "text",
        // The reference filesystem server's name for it.
        ToolSet::Filesystem => "content",
    }
}

/// The field of `structuredContent` a refusal's kind and data go in.
pub(crate) const ERROR_FIELD: &str = "error";

/// How a result names the agent the call acted as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tell {
    /// In `structuredContent.agent` only.
    Quietly,
    /// There, and in a sentence asking the model to pass it: the call named
    /// no agent, so unless the model passes the handle its next call is
    /// someone else. Its reads and reservations carry over.
    AskToPass,
    /// The same for a handshake session's own agent, whose reservations
    /// end with the session: the sentence promises only what carries over.
    AskToPassReads,
}

/// The sentence that asks the model to pass its handle.
pub(crate) fn pass_it_on(handle: &str) -> String {
    format!(
        "Pass \"agent\": \"{handle}\" in the arguments of your next calls to these tools, so that \
         what you read and reserved here carries over to them."
    )
}

fn pass_reads_on(handle: &str) -> String {
    format!(
        "Pass \"agent\": \"{handle}\" in the arguments of your next calls to these tools, so that \
         what you read here carries over to them (what you reserve lasts until you release it or \
         this MCP session ends)."
    )
}

/// `result` as the model gets it: its one text (with the handle sentence
/// when `tell` asks for it) in `content` and in `structuredContent`, beside
/// the agent's handle and the tool's typed fields.
pub(crate) fn finish(
    mut result: CallToolResult,
    set: ToolSet,
    handle: Option<&str>,
    tell: Tell,
) -> CallToolResult {
    let sentence = match (handle, tell) {
        (Some(h), Tell::AskToPass) => Some(pass_it_on(h)),
        (Some(h), Tell::AskToPassReads) => Some(pass_reads_on(h)),
        _ => None,
    };
    let field = text_field(set);
    let mut fields = match result.structured_content.take() {
        Some(Value::Object(fields)) => fields,
        _ => Map::new(),
    };
    // Every text block of the tool's answer, as one text: tools answer
    // with one, but two would both reach the model and neither be lost.
    let texts: Vec<String> = result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|t| t.text.clone()))
        .collect();
    let others: Vec<ContentBlock> = result
        .content
        .drain(..)
        .filter(|block| block.as_text().is_none())
        .collect();
    let mut text = texts.join("\n\n");
    if let Some(sentence) = &sentence {
        if !text.is_empty() {
            text.push_str("\n\n");
        }
        text.push_str(sentence);
    }
    if others.is_empty() {
        // A text answer: one block, its copy in the structured result.
        fields.insert(field.into(), json!(text));
        result.content = vec![ContentBlock::text(text)];
    } else {
        // A media answer (read_media_file): the media is the answer, and
        // the structured result lists the same blocks; a text, if any,
        // comes after it in both.
        result.content = others;
        if !text.is_empty() {
            let block = ContentBlock::text(text);
            if let Some(Value::Array(listed)) = fields.get_mut(field) {
                listed.push(serde_json::to_value(&block).unwrap_or(Value::Null));
            }
            result.content.push(block);
        }
        if !fields.contains_key(field) {
            let listed: Vec<Value> = result
                .content
                .iter()
                .map(|b| serde_json::to_value(b).unwrap_or(Value::Null))
                .collect();
            fields.insert(field.into(), Value::Array(listed));
        }
    }
    if let Some(handle) = handle {
        fields.insert(AGENT_ARG.into(), json!(handle));
    }
    result.structured_content = Some(Value::Object(fields));
    result
}

/// A refusal's typed fields: its kind and the error's data (§13's error
/// data: `{"kind": "stale", "path", "writer", ...}`).
pub(crate) fn refusal_fields(data: Value) -> Value {
    json!({ ERROR_FIELD: data })
}

/// What `error` holds, in every tool's output schema.
fn error_schema() -> Value {
    json!({
        "type": "object",
        "description": "Present when the tool refused (isError): the refusal's kind \
                        (busy, stale, not_read, policy, no_match, bad_arguments, ...) and its \
                        data, as writ's control API gives them.",
        "properties": {"kind": {"type": "string"}},
        "required": ["kind"]
    })
}

fn agent_schema() -> Value {
    json!({"type": "string", "description": "Your agent handle: pass it as `agent` on your next calls."})
}

/// The output schema of one of writ's tools: its text, its agent, a
/// refusal's `error`, and the tool's own typed fields (absent on a
/// refusal, so never required).
pub(crate) fn writ_schema(typed: Value) -> Arc<JsonObject> {
    let mut properties = Map::new();
    properties.insert(
        "text".into(),
        json!({"type": "string", "description": "The whole result, as the model reads it."}),
    );
    properties.insert(AGENT_ARG.into(), agent_schema());
    properties.insert(ERROR_FIELD.into(), error_schema());
    if let Value::Object(typed) = typed {
        properties.extend(typed);
    }
    let mut schema = JsonObject::new();
    schema.insert("type".into(), json!("object"));
    schema.insert("properties".into(), Value::Object(properties));
    schema.insert("required".into(), json!(["text"]));
    schema.insert("additionalProperties".into(), json!(false));
    Arc::new(schema)
}

/// Every tool of `set` with an output schema that validates each of its
/// results: the tool's own (the filesystem set's are the reference
/// server's), with `agent` and `error` added; a tool that declares none
/// gets the set's plain one (its text, agent and error).
pub(crate) fn with_output_schemas(mut tools: Vec<Tool>, set: ToolSet) -> Vec<Tool> {
    for tool in &mut tools {
        let mut output = match &tool.output_schema {
            Some(schema) => (**schema).clone(),
            None => match set {
                ToolSet::Writ => (*writ_schema(json!({}))).clone(),
                ToolSet::Filesystem => {
                    let mut schema = JsonObject::new();
                    schema.insert("type".into(), json!("object"));
                    schema.insert("properties".into(), json!({"content": {"type": "string"}}));
                    schema.insert("required".into(), json!(["content"]));
                    schema
                }
            },
        };
        if let Some(Value::Object(properties)) = output.get_mut("properties") {
            properties.insert(AGENT_ARG.into(), agent_schema());
            properties.insert(ERROR_FIELD.into(), error_schema());
        }
        tool.output_schema = Some(Arc::new(output));
    }
    tools
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(result: &CallToolResult) -> Vec<String> {
        result
            .content
            .iter()
            .filter_map(|b| b.as_text().map(|t| t.text.clone()))
            .collect()
    }

    #[test]
    fn one_text_in_both_places_with_the_sentence_inside_it() {
        let asked = finish(
            CallToolResult::success(vec![ContentBlock::text("read")]),
            ToolSet::Writ,
            Some("h"),
            Tell::AskToPass,
        );
        let one = texts(&asked);
        assert_eq!(one.len(), 1);
        assert!(
            one[0].starts_with("read\n\nPass \"agent\": \"h\""),
            "{one:?}"
        );
        let structured = asked.structured_content.unwrap_or_default();
        assert_eq!(structured["text"], json!(one[0]));
        assert_eq!(structured["agent"], "h");

        let quiet = finish(
            CallToolResult::error(vec![ContentBlock::text("refused")]),
            ToolSet::Filesystem,
            Some("h"),
            Tell::Quietly,
        );
        assert_eq!(texts(&quiet), ["refused"]);
        assert_eq!(
            quiet.structured_content,
            Some(json!({"content": "refused", "agent": "h"}))
        );
    }

    #[test]
    fn typed_fields_stay_beside_the_text() {
        let mut result = CallToolResult::success(vec![ContentBlock::text("x")]);
        result.structured_content = Some(json!({"path": "a", "content": "old"}));
        let done = finish(result, ToolSet::Filesystem, None, Tell::Quietly);
        assert_eq!(
            done.structured_content,
            Some(json!({"path": "a", "content": "x"}))
        );
    }

    #[test]
    fn a_media_answer_keeps_its_media_first_and_lists_the_sentence_after_it() {
        let image = ContentBlock::image("AAAA", "image/png");
        let mut result = CallToolResult::success(vec![image.clone()]);
        let listed = serde_json::to_value(&image).unwrap_or_default();
        result.structured_content = Some(json!({"content": [listed]}));
        let done = finish(result, ToolSet::Filesystem, Some("h"), Tell::AskToPass);
        assert_eq!(done.content.len(), 2);
        assert!(done.content[0].as_text().is_none());
        let text = texts(&done)[0].clone();
        let structured = done.structured_content.unwrap_or_default();
        assert_eq!(structured["content"].as_array().map(Vec::len), Some(2));
        assert_eq!(structured["content"][1]["text"], json!(text));
    }
}
