//! Gemini (`POST …/models/M:streamGenerateContent?alt=sse` and `…:generateContent`), as
//! Gemini CLI sends it: `tools[].functionDeclarations[]`, tool results as `functionResponse`
//! parts, a model router's question as a `generationConfig.responseJsonSchema`; answered
//! with one candidate (one `data:` event when streamed).

use serde_json::{Value, json};

use super::{Answer, Reply, Seen, items, json_reply, sse, text_of};
use crate::scripted_model::tools::Declared;

pub fn read(path: &str, body: &Value) -> Seen {
    let tools = items(&body["tools"])
        .filter_map(|t| t["functionDeclarations"].as_array())
        .flatten()
        .map(|d| Declared {
            name: d["name"].as_str().unwrap_or_default().to_string(),
            schema: Some(
                d.get("parametersJsonSchema")
                    .or_else(|| d.get("parameters"))
                    .cloned()
                    .unwrap_or(json!({})),
            ),
        })
        .collect();
    let tool_results = items(&body["contents"])
        .filter_map(|c| c["parts"].as_array())
        .flatten()
        .filter_map(|part| part.get("functionResponse"))
        .map(|r| text_of(&r["response"]))
        .collect();
    let config = &body["generationConfig"];
    let answer_schema = config
        .get("responseJsonSchema")
        .or_else(|| config.get("responseSchema"))
        .cloned();
    // The model is in the path: `…/models/M:generateContent`.
    let model = path
        .rsplit('/')
        .next()
        .and_then(|last| last.split(':').next())
        .unwrap_or_default()
        .to_string();
    Seen {
        tools,
        tool_results,
        answer_schema,
        stream: path.ends_with(":streamGenerateContent"),
        model,
    }
}

pub fn reply(answer: &Answer, seen: &Seen) -> Reply {
    let part = match answer {
        Answer::Call(call) => {
            json!({"functionCall": {"name": call.tool, "args": call.input.as_json()}})
        }
        Answer::Text(text) => json!({ "text": text }),
    };
    let chunk = json!({
        "candidates": [{"content": {"role": "model", "parts": [part]},
                        "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 1,
                          "totalTokenCount": 2},
        "modelVersion": seen.model,
    });
    if seen.stream {
        sse([(None, chunk)])
    } else {
        json_reply(&chunk)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scripted_model::turn::answer;
    use crate::scripted_model::wire::{Wire, fixture};

    #[test]
    fn the_router_gets_an_answer_that_follows_its_schema() {
        let (path, body) = fixture::load("gemini-router");
        assert_eq!(Wire::for_path(&path), Some(Wire::Gemini));
        let seen = read(&path, &body);
        assert!(!seen.stream && seen.tools.is_empty());
        let reply = reply(&answer(&body, &seen), &seen);
        let v: Value = serde_json::from_slice(&reply.body).unwrap();
        let text = v["candidates"][0]["content"]["parts"][0]["text"]
            .as_str()
            .unwrap();
        let routed: Value = serde_json::from_str(text).unwrap();
        assert_eq!(routed["complexity_score"], 1);
    }

    #[test]
    fn gemini_cli_runs_its_shell_tool_then_finishes() {
        let (path, mut body) = fixture::load("gemini-stream");
        assert_eq!(Wire::for_path(&path), Some(Wire::Gemini));
        let seen = read(&path, &body);
        assert!(seen.stream);
        let events = fixture::events(&reply(&answer(&body, &seen), &seen).body);
        let call = &events[0]["candidates"][0]["content"]["parts"][0]["functionCall"];
        assert_eq!(call["name"], "run_shell_command");
        assert_eq!(call["args"]["command"], "echo hi > marker.txt");

        let contents = body["contents"].as_array_mut().unwrap();
        contents.push(json!({"role": "model", "parts": [{"functionCall": call}]}));
        contents.push(json!({"role": "user", "parts": [{"functionResponse": {
            "name": "run_shell_command", "response": {"output": "Output: (empty)"}}}]}));
        let seen = read(&path, &body);
        assert_eq!(seen.tool_results, vec!["Output: (empty)"]);
        assert!(matches!(answer(&body, &seen), Answer::Text(_)));
    }
}
