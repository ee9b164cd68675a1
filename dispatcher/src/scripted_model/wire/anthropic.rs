//! Anthropic Messages (`POST …/v1/messages`), as Claude Code sends it: `tools[]` with
//! `input_schema`, tool results as `tool_result` blocks of user messages, `stream: true`
//! answered with `message_start` … `message_stop` events.

use serde_json::{Value, json};

use super::{Answer, Reply, Seen, items, json_reply, sse, str_of, text_of};
use crate::scripted_model::tools::Declared;

pub fn read(body: &Value) -> Seen {
    let tools = items(&body["tools"])
        .map(|t| Declared {
            name: str_of(&t["name"]),
            schema: Some(t["input_schema"].clone()),
        })
        .collect();
    let tool_results = items(&body["messages"])
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|block| block["type"] == "tool_result")
        .map(|block| text_of(&block["content"]))
        .collect();
    Seen::of_body(body, tools, tool_results)
}

pub fn reply(answer: &Answer, seen: &Seen, step: usize) -> Reply {
    let (block, stop_reason) = match answer {
        Answer::Call(call) => (
            json!({"type": "tool_use", "id": format!("toolu_scripted_{step}"),
                   "name": call.tool, "input": call.input.as_json()}),
            "tool_use",
        ),
        Answer::Text(text) => (json!({"type": "text", "text": text}), "end_turn"),
    };
    let usage = json!({"input_tokens": 1, "output_tokens": 1});
    let message = |content: Value, stop: Value| {
        json!({"id": format!("msg_scripted_{step}"), "type": "message", "role": "assistant",
               "model": seen.model, "content": content, "stop_reason": stop,
               "stop_sequence": null, "usage": usage})
    };
    if !seen.stream {
        return json_reply(&message(json!([block]), json!(stop_reason)));
    }
    // The block opens empty and its content follows as one delta, as the API streams it.
    let (start, delta) = match answer {
        Answer::Call(call) => (
            json!({"type": "tool_use", "id": block["id"], "name": call.tool, "input": {}}),
            json!({"type": "input_json_delta", "partial_json": call.input.as_json().to_string()}),
        ),
        Answer::Text(text) => (
            json!({"type": "text", "text": ""}),
            json!({"type": "text_delta", "text": text}),
        ),
    };
    sse([
        (
            Some("message_start"),
            json!({"type": "message_start", "message": message(json!([]), Value::Null)}),
        ),
        (
            Some("content_block_start"),
            json!({"type": "content_block_start", "index": 0, "content_block": start}),
        ),
        (
            Some("content_block_delta"),
            json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        ),
        (
            Some("content_block_stop"),
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            Some("message_delta"),
            json!({"type": "message_delta", "delta": {"stop_reason": stop_reason,
                   "stop_sequence": null}, "usage": {"output_tokens": 1}}),
        ),
        (Some("message_stop"), json!({"type": "message_stop"})),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scripted_model::turn::answer;
    use crate::scripted_model::wire::{Wire, fixture};

    #[test]
    fn claude_code_runs_bash_then_gets_its_result_then_finishes() {
        let (path, mut body) = fixture::load("claude-messages");
        assert_eq!(Wire::for_path(&path), Some(Wire::Anthropic));
        let seen = read(&body);
        assert!(seen.stream && seen.tool_results.is_empty());
        let Answer::Call(call) = answer(&body, &seen) else {
            panic!("expected a tool call")
        };
        assert_eq!(call.tool, "Bash");
        assert_eq!(call.input.as_json()["command"], "echo hi > marker.txt");

        let events = fixture::events(&reply(&Answer::Call(call), &seen, 0).body);
        assert_eq!(events[1]["content_block"]["name"], "Bash");
        let args: Value =
            serde_json::from_str(events[2]["delta"]["partial_json"].as_str().unwrap()).unwrap();
        assert_eq!(args["command"], "echo hi > marker.txt");
        assert_eq!(events[4]["delta"]["stop_reason"], "tool_use");

        // The next request carries the result: step 1, past the one action, a final text.
        let messages = body["messages"].as_array_mut().unwrap();
        messages.push(json!({"role": "assistant", "content": [{"type": "tool_use",
            "id": "toolu_scripted_0", "name": "Bash", "input": args}]}));
        messages.push(json!({"role": "user", "content": [{"type": "tool_result",
            "tool_use_id": "toolu_scripted_0", "content": [{"type": "text", "text": "ran"}]}]}));
        let seen = read(&body);
        assert_eq!(seen.tool_results, vec!["ran"]);
        let text = answer(&body, &seen);
        assert!(matches!(&text, Answer::Text(_)));
        let events = fixture::events(&reply(&text, &seen, 1).body);
        assert_eq!(events[4]["delta"]["stop_reason"], "end_turn");
    }
}
