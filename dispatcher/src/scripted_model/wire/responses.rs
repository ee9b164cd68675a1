//! OpenAI Responses (`POST …/v1/responses`), as Codex sends it: `tools[]` of `function`
//! tools (`parameters`) and `custom` ones (freeform text: `apply_patch`), tool results as
//! `function_call_output` / `custom_tool_call_output` input items, answered with
//! `response.created`, `response.output_item.done`, `response.completed` events.

use serde_json::{Value, json};

use super::{Answer, Reply, Seen, items, json_reply, sse, str_of, text_of};
use crate::scripted_model::tools::{CallInput, Declared};

pub fn read(body: &Value) -> Seen {
    let tools = items(&body["tools"])
        .filter_map(|t| match t["type"].as_str()? {
            "function" => Some(Declared {
                name: str_of(&t["name"]),
                schema: Some(t["parameters"].clone()),
            }),
            "custom" => Some(Declared {
                name: str_of(&t["name"]),
                schema: None,
            }),
            _ => None,
        })
        .collect();
    let tool_results = items(&body["input"])
        .filter(|item| {
            item["type"] == "function_call_output" || item["type"] == "custom_tool_call_output"
        })
        .map(|item| text_of(&item["output"]))
        .collect();
    Seen::of_body(body, tools, tool_results)
}

pub fn reply(answer: &Answer, seen: &Seen, step: usize) -> Reply {
    let call_id = format!("call_scripted_{step}");
    let item = match answer {
        Answer::Call(call) => match &call.input {
            CallInput::Json(args) => json!({"type": "function_call", "id": format!("fc_{step}"),
                "call_id": call_id, "name": call.tool, "arguments": args.to_string(),
                "status": "completed"}),
            CallInput::Text(input) => json!({"type": "custom_tool_call",
                "id": format!("ctc_{step}"), "call_id": call_id, "name": call.tool,
                "input": input, "status": "completed"}),
        },
        Answer::Text(text) => json!({"type": "message", "id": format!("msg_{step}"),
            "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}),
    };
    let id = format!("resp_scripted_{step}");
    let response = |output: Value, status: &str| {
        json!({"id": id, "object": "response", "model": seen.model, "status": status,
               "output": output, "usage": {"input_tokens": 1, "output_tokens": 1,
               "total_tokens": 2, "input_tokens_details": {"cached_tokens": 0},
               "output_tokens_details": {"reasoning_tokens": 0}}})
    };
    if !seen.stream {
        return json_reply(&response(json!([item]), "completed"));
    }
    sse([
        (
            Some("response.created"),
            json!({"type": "response.created", "response": response(json!([]), "in_progress")}),
        ),
        (
            Some("response.output_item.done"),
            json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        ),
        (
            Some("response.completed"),
            json!({"type": "response.completed", "response": response(json!([item]), "completed")}),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scripted_model::turn::answer;
    use crate::scripted_model::wire::{Wire, fixture};

    #[test]
    fn codex_runs_exec_command_then_writes_with_apply_patch() {
        let (path, mut body) = fixture::load("codex-responses");
        assert_eq!(Wire::for_path(&path), Some(Wire::Responses));
        let prompt = "AGENTWORKS-RUN: echo hi > marker.txt\nAGENTWORKS-WRITE: /w/f.txt hello";
        let input = body["input"].as_array_mut().unwrap();
        *input.last_mut().unwrap() = json!({"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": prompt}]});
        let seen = read(&body);
        assert!(seen.stream && seen.tools.iter().any(|t| t.name == "apply_patch"));
        let call = answer(&body, &seen);
        let events = fixture::events(&reply(&call, &seen, 0).body);
        let item = &events[1]["item"];
        assert_eq!(
            (item["type"].as_str(), item["name"].as_str()),
            (Some("function_call"), Some("exec_command"))
        );
        let args: Value = serde_json::from_str(item["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(args["cmd"], "echo hi > marker.txt");
        assert_eq!(events[2]["type"], "response.completed");

        let input = body["input"].as_array_mut().unwrap();
        input.push(item.clone());
        input.push(
            json!({"type": "function_call_output", "call_id": item["call_id"],
            "output": "Process exited with code 0"}),
        );
        let seen = read(&body);
        assert_eq!(seen.tool_results, vec!["Process exited with code 0"]);
        let events = fixture::events(&reply(&answer(&body, &seen), &seen, 1).body);
        let item = &events[1]["item"];
        assert_eq!(
            (item["type"].as_str(), item["name"].as_str()),
            (Some("custom_tool_call"), Some("apply_patch"))
        );
        assert!(
            item["input"]
                .as_str()
                .unwrap()
                .contains("*** Add File: /w/f.txt\n+hello")
        );
    }
}
