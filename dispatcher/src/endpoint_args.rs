//! `--model-endpoint`, `--model` and `--model-key-env`: a launch pointed at a model endpoint
//! of the person's choosing (`dispatcher launch`, `dispatcher chats launch`).

use anyhow::{Context, Result};
use clap::Args;
use dispatcher::launch::ModelEndpoint;

#[derive(Args, Debug, Clone, Default)]
pub struct EndpointArgs {
    /// Send the CLI's model requests to this base URL (a local gateway, a scripted model)
    /// instead of its provider's: http(s)://host[:port][/path]. The CLI's adapter says how
    /// (`[model_endpoint]`, docs/clis.md "Model endpoints"); a CLI without one is refused.
    #[arg(long, value_name = "URL")]
    pub model_endpoint: Option<String>,
    /// The model asked of the endpoint (default: the adapter's `model_endpoint.model`).
    #[arg(long, value_name = "NAME", requires = "model_endpoint")]
    pub model: Option<String>,
    /// Read the key sent to the endpoint from this environment variable of the dispatcher
    /// (default: a dummy key, for endpoints that check none). Never on the command line.
    #[arg(long, value_name = "VAR", requires = "model_endpoint")]
    pub model_key_env: Option<String>,
}

impl EndpointArgs {
    /// The endpoint asked for, checked, with its key read.
    pub fn endpoint(&self) -> Result<Option<ModelEndpoint>> {
        let Some(url) = &self.model_endpoint else {
            return Ok(None);
        };
        let key = match &self.model_key_env {
            Some(var) => Some(
                std::env::var(var)
                    .with_context(|| format!("--model-key-env {var}: the variable is not set"))?,
            ),
            None => None,
        };
        ModelEndpoint::new(url, key, self.model.clone())
            .map(Some)
            .map_err(anyhow::Error::msg)
    }
}
