//! Another site, for the browser tests: fixed pages served on a port of their own, with none
//! of sluice's headers (no Content-Security-Policy), as an attacker's pages would be. Opened
//! as `http://localhost:PORT/...` it is another site than the server at `127.0.0.1`; opened
//! as `http://127.0.0.1:PORT/...` from there, another origin again (a frame that may be
//! framed, to compare with sluice's pages).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Pages = Arc<Mutex<Vec<(String, String)>>>;

/// The pages, by path (the query is not looked at); others are 404. Stops when dropped.
pub struct Site {
    pub port: u16,
    pages: Pages,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Site {
    pub fn start(pages: &[(&str, &str)]) -> Site {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a port for the other site");
        let port = listener.local_addr().expect("its address").port();
        let pages: Pages = Arc::new(Mutex::new(
            pages
                .iter()
                .map(|(p, h)| ((*p).to_owned(), (*h).to_owned()))
                .collect(),
        ));
        let serving = pages.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(s) = stream {
                    let pages = serving.lock().map(|p| p.clone()).unwrap_or_default();
                    answer(s, &pages);
                }
            }
        });
        Site {
            port,
            pages,
            stop,
            thread: Some(thread),
        }
    }

    /// Serves `html` at `path` from now on (a page that names the site's own address).
    pub fn page(&self, path: &str, html: &str) {
        if let Ok(mut p) = self.pages.lock() {
            p.push((path.to_owned(), html.to_owned()));
        }
    }

    /// `http://HOST:PORT/PATH`.
    pub fn url(&self, host: &str, path: &str) -> String {
        format!("http://{host}:{}{path}", self.port)
    }
}

fn answer(mut stream: TcpStream, pages: &[(String, String)]) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head);
    let target = head.split(' ').nth(1).unwrap_or("/");
    let path = target.split('?').next().unwrap_or("/");
    let (status, body) = pages
        .iter()
        .find(|(p, _)| p == path)
        .map_or(("404 Not Found", ""), |(_, b)| ("200 OK", b.as_str()));
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

impl Drop for Site {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accepting thread.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
