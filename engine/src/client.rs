//! The HTTP client of a `sluice server`, as the CLI's `--server` mode uses it: one request per
//! operation, the token in `Authorization: Bearer`, and refusals read back from the API's
//! error shape (`server::api::error`) with their status, message and rendered diagnostics.

use std::time::Duration;

use serde::Deserialize;

/// A server and the token to talk to it with.
#[derive(Clone, Debug)]
pub struct Client {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

/// What a request can end with besides an answer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server could not be reached or did not answer (exit 3).
    #[error("cannot reach the server {url}: {why}")]
    Unreachable { url: String, why: String },
    /// The server refused the request: its status and what it said.
    #[error("{}", .0.message)]
    Refused(Box<Refusal>),
}

/// A refusal, as the API's error body says it.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Refusal {
    #[serde(default)]
    pub status: u16,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub message: String,
    /// Lint's diagnostics, in their printed form.
    #[serde(default)]
    pub rendered: Vec<String>,
    #[serde(default)]
    pub in_the_way: Option<InTheWay>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct InTheWay {
    pub run: String,
    pub state: String,
}

#[derive(Deserialize)]
struct ErrorBody {
    error: Refusal,
}

impl Client {
    /// A client of the server at `base` (`http://127.0.0.1:8080`).
    pub fn new(base: &str, token: Option<String>) -> Result<Self, Error> {
        let base = base.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(Error::Unreachable {
                url: base,
                why: "give the server as http://HOST:PORT or https://HOST:PORT".into(),
            });
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| Error::Unreachable {
                url: base.clone(),
                why: e.to_string(),
            })?;
        Ok(Client { base, token, http })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// `path` (under the server, `/api/v1/runs`) with `query`; 2xx answers are returned,
    /// others read as a [`Refusal`].
    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&serde_json::Value>,
    ) -> Result<reqwest::Response, Error> {
        self.send_with(method, path, query, body, None).await
    }

    /// A submission (`POST path` with `body`), sent with an `Idempotency-Key` of its own
    /// and sent again, with the same key, while the server cannot be reached or answers
    /// 502, 503 or 504, for up to about half a minute: a submission whose answer was lost
    /// is answered with the run it recorded, never a second one.
    pub async fn submit(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<serde_json::Value, Error> {
        let key = idempotency_key();
        let mut wait = Duration::from_millis(250);
        let mut waited = Duration::ZERO;
        loop {
            let sent = self
                .send_with(reqwest::Method::POST, path, &[], Some(body), Some(&key))
                .await;
            let again = match &sent {
                Err(Error::Unreachable { .. }) => true,
                Err(Error::Refused(r)) => matches!(r.status, 502..=504),
                Ok(_) => false,
            };
            if !again || waited >= SUBMIT_RETRY {
                let response = sent?;
                let text = self.text_of(response).await?;
                return serde_json::from_str(&text).map_err(|e| Error::Unreachable {
                    url: self.base.clone(),
                    why: format!("its answer is not JSON: {e}"),
                });
            }
            if let Err(e) = &sent {
                tracing::warn!(
                    "{e}; sending the submission again in {} ms (the same Idempotency-Key: it is recorded once)",
                    wait.as_millis()
                );
            }
            tokio::time::sleep(wait).await;
            waited += wait;
            wait = (wait * 2).min(Duration::from_secs(4));
        }
    }

    async fn send_with(
        &self,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&serde_json::Value>,
        key: Option<&str>,
    ) -> Result<reqwest::Response, Error> {
        let url = format!("{}{path}", self.base);
        let mut request = self.http.request(method, &url).query(query);
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.to_string());
        }
        let response = request.send().await.map_err(|e| Error::Unreachable {
            url: self.base.clone(),
            why: root_cause(&e),
        })?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let text = response.text().await.unwrap_or_default();
        let mut refusal = serde_json::from_str::<ErrorBody>(&text)
            .map(|b| b.error)
            .unwrap_or_else(|_| Refusal {
                message: format!("the server answered {status}: {}", text.trim()),
                ..Refusal::default()
            });
        refusal.status = status.as_u16();
        if status.as_u16() == 401 && std::env::var_os("SLUICE_TOKEN").is_none() {
            refusal.message.push_str(" (set SLUICE_TOKEN)");
        }
        Err(Error::Refused(Box::new(refusal)))
    }

    /// A JSON answer's body.
    pub async fn json(
        &self,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&serde_json::Value>,
    ) -> Result<serde_json::Value, Error> {
        let response = self.send(method, path, query, body).await?;
        let text = self.text_of(response).await?;
        serde_json::from_str(&text).map_err(|e| Error::Unreachable {
            url: self.base.clone(),
            why: format!("its answer is not JSON: {e}"),
        })
    }

    /// A text answer's body.
    pub async fn text(
        &self,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<String, Error> {
        let response = self.send(method, path, query, None).await?;
        self.text_of(response).await
    }

    async fn text_of(&self, response: reqwest::Response) -> Result<String, Error> {
        response.text().await.map_err(|e| Error::Unreachable {
            url: self.base.clone(),
            why: root_cause(&e),
        })
    }

    /// The next piece of a streamed answer, `None` at its end.
    pub async fn chunk(&self, response: &mut reqwest::Response) -> Result<Option<Vec<u8>>, Error> {
        response
            .chunk()
            .await
            .map(|c| c.map(|b| b.to_vec()))
            .map_err(|e| Error::Unreachable {
                url: self.base.clone(),
                why: root_cause(&e),
            })
    }
}

/// How long a submission is sent again while the server does not answer.
const SUBMIT_RETRY: Duration = Duration::from_secs(30);

/// A new submission's `Idempotency-Key`: 128 random bits, as hex.
fn idempotency_key() -> String {
    use rand::RngExt;
    let mut rng = rand::rng();
    format!("{:032x}", rng.random::<u128>())
}

/// A path segment with everything but unreserved characters percent-encoded (run
/// references such as `train@latest` and step names such as `evaluate[1]`).
pub fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The innermost cause of an HTTP error (`Connection refused`), which says most.
fn root_cause(e: &reqwest::Error) -> String {
    let mut source: &dyn std::error::Error = e;
    while let Some(next) = source.source() {
        source = next;
    }
    if source.to_string() == e.to_string() {
        e.to_string()
    } else {
        format!("{e}: {source}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_keep_unreserved_characters_and_encode_the_rest() {
        assert_eq!(segment("a1b2c3"), "a1b2c3");
        assert_eq!(segment("train@latest"), "train%40latest");
        assert_eq!(segment("evaluate[1]"), "evaluate%5B1%5D");
        assert_eq!(segment("a/b c"), "a%2Fb%20c");
    }

    #[test]
    fn a_server_url_needs_its_scheme() {
        assert!(Client::new("127.0.0.1:8080", None).is_err());
        assert!(Client::new("http://127.0.0.1:8080/", None).is_ok());
    }
}
