use std::path::PathBuf;

use super::*;
use crate::policy::ResolveOptions;

const PRODUCT: &str = r#"
version = 1
base = "open"
[[protected]]
path = "~/Library/Application Support/AgentWorks"
[[protected]]
path = "~/Documents/AgentWorks"
[[grant]]
path = "~/Library/Application Support/AgentWorks/state/cli-runtimes/v1/chat-1"
access = "rw"
[[grant]]
path = "~/Documents/AgentWorks/wf-main"
access = "rw"
[[grant]]
path = "~/Documents/AgentWorks/wf-ref"
access = "ro"
[[refuse]]
path = "~/Documents/AgentWorks/wf-main/planning"
[[refuse]]
path = "~/Documents/AgentWorks/wf-main/workflow.db"
"#;

fn mac(text: &str) -> Policy {
    let opts = ResolveOptions::new(Target::Macos, PathBuf::from("/Users/ada"), false).unwrap();
    Policy::from_toml(text, "p.toml", &opts).unwrap()
}

#[test]
fn embedded_template_parses() {
    let _ = Templates::embedded();
}

#[test]
fn smoke() {
    let p = mac(PRODUCT);
    println!("{}", render(&p).unwrap());
}
