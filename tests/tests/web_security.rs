//! The web UI's and the API's defences at the HTTP level, each as a real request to a real
//! server (issue 32): where signing in may send the browser (`next`), requests of other sites
//! (`Origin`, `Sec-Fetch-Site`), and the headers every answer carries. What needs a browser
//! (framing, the confirmations) is in `web_ui.rs`.

use sluice_e2e::Sandbox;
use sluice_e2e::http::{Answer, request_with};
use sluice_e2e::server::{Server, token};

/// A form's body (`application/x-www-form-urlencoded`): every byte but the unreserved ones
/// percent-encoded, as a browser encodes a field.
fn form(pairs: &[(&str, &str)]) -> Vec<u8> {
    let mut out = String::new();
    for (i, (name, value)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        for (j, part) in [name, value].iter().enumerate() {
            if j > 0 {
                out.push('=');
            }
            for b in part.bytes() {
                if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                    out.push(b as char);
                } else {
                    out.push_str(&format!("%{b:02X}"));
                }
            }
        }
    }
    out.into_bytes()
}

/// `POST /login` with `token`, `next` and the extra headers of a browser.
fn login(server: &Server, token: &str, next: Option<&str>, extra: &[(&str, &str)]) -> Answer {
    let mut pairs = vec![("token", token)];
    if let Some(n) = next {
        pairs.push(("next", n));
    }
    let body = form(&pairs);
    let mut headers = vec![("Content-Type", "application/x-www-form-urlencoded")];
    headers.extend_from_slice(extra);
    request_with(&server.addr, "POST", "/login", &headers, Some(&body))
        .unwrap_or_else(|e| panic!("POST /login: {e}"))
}

/// Whether `location` is a path of this site as every browser reads it: one `/`, then no
/// `/` or `\` (`//host`, `/\host` name another host), no control character or space anywhere
/// (browsers strip TAB, CR and LF from URLs, which turns `/\t/host` into `//host`).
fn stays_here(location: &str) -> bool {
    let b = location.as_bytes();
    b.first() == Some(&b'/')
        && !matches!(b.get(1), Some(b'/' | b'\\'))
        && b.iter().all(|c| c.is_ascii_graphic() && *c != b'\\')
}

#[test]
fn signing_in_goes_back_only_to_a_path_of_this_site() {
    let sb = Sandbox::new("web-next");
    let (_, member) = token(&sb, "vision", "member", &[]);
    let server = Server::start(&sb, &[]);

    // A path of this site is gone back to, query included.
    let a = login(&server, &member, Some("/runs/abc?state=Failed"), &[]);
    assert_eq!(a.status, 303, "{}", a.text());
    assert_eq!(a.header("location"), Some("/runs/abc?state=Failed"));
    assert!(a.header("set-cookie").is_some());

    for next in [
        "/\t/evil.example/phish",
        "/\r/evil.example",
        "/\n/evil.example",
        "/\r\nSet-Cookie: x=1",
        "\t//evil.example",
        "/\\evil.example",
        "\\\\evil.example",
        "//evil.example",
        "/\\/evil.example",
        "/ /evil.example",
        "/runs\u{0}",
        "/runs/\u{3000}",
        "https://evil.example/phish",
        "javascript:alert(1)",
        "evil.example",
        "",
    ] {
        let a = login(&server, &member, Some(next), &[]);
        assert_eq!(a.status, 303, "next={next:?}: {}", a.text());
        let location = a.header("location").unwrap_or_default();
        assert!(stays_here(location), "next={next:?} went to {location:?}");
        assert_eq!(location, "/runs", "next={next:?}");
        assert!(a.header("set-cookie").is_some(), "next={next:?}");
    }
    // No `next`: the runs.
    let a = login(&server, &member, None, &[]);
    assert_eq!((a.status, a.header("location")), (303, Some("/runs")));

    // A token that does not work sets no cookie, whatever `next` says.
    for next in ["/\r/x", "/runs"] {
        let a = login(&server, "not-a-token", Some(next), &[]);
        assert_eq!(a.status, 401, "{}", a.text());
        assert_eq!(a.header("set-cookie"), None);
    }

    // The sign-in page keeps only a safe `next` in its form.
    let page = request_with(
        &server.addr,
        "GET",
        "/login?next=%2F%09%2Fevil.example%2Fphish",
        &[],
        None,
    )
    .expect("GET /login");
    assert_eq!(page.status, 200);
    assert!(
        page.text()
            .contains(r#"<input type="hidden" name="next" value="/runs">"#),
        "{}",
        page.text()
    );
}
