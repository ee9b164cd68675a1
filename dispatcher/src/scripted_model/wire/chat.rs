//! OpenAI Chat Completions (`POST …/v1/chat/completions`), as opencode and pi send it:
//! `tools[].function` with `parameters`, tool results as `role: "tool"` messages, answered
//! with `chat.completion.chunk` events, a usage chunk and `[DONE]`.

use serde_json::{Value, json};

use super::{Answer, Reply, Seen, items, json_reply, str_of, text_of};
use crate::scripted_model::tools::Declared;

pub fn read(body: &Value) -> Seen {
    let tools = items(&body["tools"])
        .map(|t| Declared {
            name: str_of(&t["function"]["name"]),
            schema: Some(t["function"]["parameters"].clone()),
        })
        .collect();
    let tool_results = items(&body["messages"])
        .filter(|m| m["role"] == "tool")
        .map(|m| text_of(&m["content"]))
        .collect();
    Seen::of_body(body, tools, tool_results)
}

pub fn reply(answer: &Answer, seen: &Seen, step: usize) -> Reply {
    let (message, finish) = match answer {
        Answer::Call(call) => (
            json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0,
                "id": format!("call_scripted_{step}"), "type": "function",
                "function": {"name": call.tool, "arguments": call.input.as_string()}}]}),
            "tool_calls",
        ),
        Answer::Text(text) => (json!({"role": "assistant", "content": text}), "stop"),
    };
    let id = format!("chatcmpl-scripted-{step}");
    let usage = json!({"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2});
    if !seen.stream {
        return json_reply(&json!({"id": id, "object": "chat.completion", "created": 0,
            "model": seen.model, "usage": usage,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}]}));
    }
    let chunk = |choices: Value, usage: Value| {
        json!({"id": id, "object": "chat.completion.chunk", "created": 0,
               "model": seen.model, "choices": choices, "usage": usage})
    };
    let mut body = String::new();
    for data in [
        chunk(
            json!([{"index": 0, "delta": message, "finish_reason": null}]),
            Value::Null,
        ),
        chunk(
            json!([{"index": 0, "delta": {}, "finish_reason": finish}]),
            Value::Null,
        ),
        chunk(json!([]), usage),
    ] {
        body.push_str(&format!("data: {data}\n\n"));
    }
    body.push_str("data: [DONE]\n\n");
    Reply {
        content_type: "text/event-stream",
        body: body.into_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scripted_model::turn::{TITLE_TEXT, answer};
    use crate::scripted_model::wire::{Wire, fixture};

    #[test]
    fn opencode_gets_a_title_then_runs_bash_then_writes() {
        let (path, body) = fixture::load("opencode-title");
        assert_eq!(Wire::for_path(&path), Some(Wire::Chat));
        let seen = read(&body);
        assert_eq!(answer(&body, &seen), Answer::Text(TITLE_TEXT.into()));

        let (_, mut body) = fixture::load("opencode-chat");
        let seen = read(&body);
        let Answer::Call(call) = answer(&body, &seen) else {
            panic!("expected a call")
        };
        assert_eq!(
            call.input.as_string(),
            r#"{"command":"echo hi > marker.txt"}"#
        );
        // opencode quotes a message with spaces: markers between the first and last lines.
        let messages = body["messages"].as_array_mut().unwrap();
        *messages.last_mut().unwrap() = json!({"role": "user",
            "content": "\"Run.\nAGENTWORKS-RUN: echo hi > m\nAGENTWORKS-WRITE: /w/f.txt hello\nEnd.\""});
        let seen = read(&body);
        let events = fixture::events(&reply(&answer(&body, &seen), &seen, 0).body);
        let call = &events[0]["choices"][0]["delta"]["tool_calls"][0];
        assert_eq!(call["function"]["name"], "bash");
        assert_eq!(events[1]["choices"][0]["finish_reason"], "tool_calls");

        let messages = body["messages"].as_array_mut().unwrap();
        messages.push(json!({"role": "assistant", "tool_calls": [call]}));
        messages.push(json!({"role": "tool", "tool_call_id": call["id"], "content": "ok"}));
        let seen = read(&body);
        let events = fixture::events(&reply(&answer(&body, &seen), &seen, 1).body);
        let call = &events[0]["choices"][0]["delta"]["tool_calls"][0]["function"];
        assert_eq!(call["name"], "write");
        let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(
            (args["filePath"].as_str(), args["content"].as_str()),
            (Some("/w/f.txt"), Some("hello"))
        );
    }

    #[test]
    fn pi_runs_its_bash_tool() {
        let (_, body) = fixture::load("pi-chat");
        let seen = read(&body);
        let Answer::Call(call) = answer(&body, &seen) else {
            panic!("expected a call")
        };
        assert_eq!(call.tool, "bash");
        assert_eq!(
            call.input.as_string(),
            r#"{"command":"echo hi > marker.txt"}"#
        );
    }
}
