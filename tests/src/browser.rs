//! A real headless browser for the web UI's tests: Debian's `chromium`, driven through its
//! `chromedriver` (WebDriver over HTTP on loopback) with fantoccini. Nothing is downloaded:
//! both binaries come from the system's packages (`.ci/run` installs them), or from
//! `SLUICE_CHROMIUM` and `SLUICE_CHROMEDRIVER`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};

use crate::TempDir;

fn binary(var: &str, default: &str) -> PathBuf {
    let path = std::env::var_os(var).map_or_else(|| PathBuf::from(default), PathBuf::from);
    assert!(
        path.exists(),
        "{} is not there: the web UI's tests need Debian's chromium and chromium-driver \
         (apt-get install chromium chromium-driver; .ci/run installs them), or {var} set",
        path.display()
    );
    path
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A headless chromium with its own profile; chromedriver is killed when dropped.
pub struct Browser {
    pub client: Client,
    driver: Child,
    _profile: TempDir,
}

impl Browser {
    pub async fn start() -> Browser {
        let chromium = binary("SLUICE_CHROMIUM", "/usr/bin/chromium");
        let chromedriver = binary("SLUICE_CHROMEDRIVER", "/usr/bin/chromedriver");
        let port = free_port();
        let driver = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let profile = TempDir::new("chromium-profile");
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({
                "binary": chromium,
                // Headless as root, with nothing reaching beyond loopback (deps.md).
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                    "--disable-dev-shm-usage", "--window-size=1280,900",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            }),
        );
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + crate::wait::deadline();
        let client = loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(c) => break c,
                Err(e) => {
                    assert!(
                        Instant::now() < deadline,
                        "chromedriver at {url} never started a browser: {e}"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        Browser {
            client,
            driver,
            _profile: profile,
        }
    }

    pub async fn goto(&self, url: &str) {
        self.client
            .goto(url)
            .await
            .unwrap_or_else(|e| panic!("the browser cannot open {url}: {e}"));
    }

    /// The page's visible text (read again while the page is being replaced).
    pub async fn text(&self) -> String {
        let deadline = Instant::now() + crate::wait::deadline();
        loop {
            let body = self.client.find(Locator::Css("body")).await;
            match body {
                Ok(b) => match b.text().await {
                    Ok(t) => return t,
                    Err(e) => assert!(Instant::now() < deadline, "the page's text: {e}"),
                },
                Err(e) => assert!(Instant::now() < deadline, "the page's body: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn url(&self) -> String {
        self.client
            .current_url()
            .await
            .expect("the browser's URL")
            .to_string()
    }

    /// How many elements `css` selects.
    pub async fn count(&self, css: &str) -> usize {
        self.client
            .find_all(Locator::Css(css))
            .await
            .map_or(0, |v| v.len())
    }

    /// Each element of `css`'s attribute `name`.
    pub async fn attrs(&self, css: &str, name: &str) -> Vec<String> {
        let mut out = Vec::new();
        for e in self
            .client
            .find_all(Locator::Css(css))
            .await
            .unwrap_or_default()
        {
            if let Ok(Some(v)) = e.attr(name).await {
                out.push(v);
            }
        }
        out
    }

    /// Signs in on `/login` with `token`, as a person would: types it, presses the button.
    pub async fn sign_in(&self, base: &str, token: &str) {
        self.goto(&format!("{base}/login")).await;
        let field = self
            .client
            .find(Locator::Css("#token"))
            .await
            .expect("the token field");
        field.send_keys(token).await.expect("typing the token");
        self.client
            .find(Locator::Css("main form button[type=submit]"))
            .await
            .expect("the sign-in button")
            .click()
            .await
            .expect("clicking it");
        // The click returns before the answer has arrived: wait until the form has gone.
        let deadline = Instant::now() + crate::wait::deadline();
        while self.url().await.contains("/login") && self.count("p.error").await == 0 {
            assert!(Instant::now() < deadline, "signing in never ended");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until `cond` holds of the page's text (the page refreshes or is reloaded).
    pub async fn wait_for_text(&self, what: &str, reload: bool, cond: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + crate::wait::deadline();
        loop {
            if cond(&self.text().await) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the page never showed {what}: {}",
                self.text().await
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
            if reload {
                let _ = self.client.refresh().await;
            }
        }
    }

    /// A screenshot of the page into `docs/screenshots/NAME.png`: the README links them.
    pub async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.expect("a screenshot");
        let dir = crate::root().join("docs").join("screenshots");
        std::fs::create_dir_all(&dir).expect("docs/screenshots");
        std::fs::write(dir.join(format!("{name}.png")), png).expect("the screenshot is written");
    }

    /// A request from the page itself (`fetch`, with its cookies): the answer's status.
    pub async fn post_from_page(&self, path: &str, body: &str) -> u16 {
        let v = self
            .client
            .execute_async(
                "const [path, body, done] = arguments; \
                 fetch(path, {method: 'POST', headers: {'content-type': 'application/x-www-form-urlencoded'}, body, redirect: 'manual'}) \
                   .then(r => done(r.status)).catch(e => done(-1));",
                vec![path.into(), body.into()],
            )
            .await
            .expect("the page's request");
        v.as_i64().unwrap_or(-1) as u16
    }

    /// Ends the browser's session (chromedriver goes when dropped).
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
