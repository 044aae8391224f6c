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

/// The CSRF value of the signed-in page `path` (its forms' hidden `csrf` field).
fn csrf_of_page(server: &Server, cookie: &str, path: &str) -> String {
    let a = request_with(&server.addr, "GET", path, &[("Cookie", cookie)], None).expect("a page");
    assert_eq!(a.status, 200, "{path}: {}", a.text());
    let text = a.text();
    let at = text
        .find(r#"name="csrf" value=""#)
        .unwrap_or_else(|| panic!("{path} has a form with a CSRF value: {text}"));
    let rest = &text[at + r#"name="csrf" value=""#.len()..];
    rest[..rest.find('"').expect("the value ends")].to_owned()
}

/// The cookie a sign-in sets: `sluice_token=...`.
fn cookie_of(a: &Answer) -> String {
    a.header("set-cookie")
        .and_then(|c| c.split(';').next())
        .unwrap_or_else(|| panic!("a cookie: {:?}", a.headers))
        .to_owned()
}

/// The API's refusal of another site's request: 403 in the API's JSON shape.
fn refused_as_json(a: &Answer, what: &str) {
    assert_eq!(a.status, 403, "{what}: {}", a.text());
    let v = a.json();
    assert_eq!(v["error"]["status"], 403, "{what}: {v}");
    assert_eq!(v["error"]["kind"], "forbidden", "{what}: {v}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("another site"), "{what}: {message}");
}

#[test]
fn requests_of_other_sites_are_refused_before_anything_is_done() {
    let sb = Sandbox::new("web-origin");
    let (_, member) = token(&sb, "vision", "member", &[]);
    let (_, admin) = token(&sb, "*", "admin", &[]);
    let server = Server::start(&sb, &[]);
    let own = format!("http://{}", server.addr);
    let other_port = format!(
        "http://127.0.0.1:{}",
        server
            .addr
            .rsplit(':')
            .next()
            .unwrap_or("1")
            .parse::<u16>()
            .unwrap_or(1)
            ^ 1
    );

    // Signing in from another site (login CSRF: the victim signed in as the attacker's
    // team): 403, an HTML page saying why, and no cookie.
    for headers in [
        vec![("Origin", "http://evil.example")],
        vec![("Origin", "null")],
        vec![("Origin", other_port.as_str())],
        vec![("Origin", "http://127.0.0.1")],
        vec![("Sec-Fetch-Site", "cross-site")],
        vec![("Sec-Fetch-Site", "same-site")],
        vec![("Origin", own.as_str()), ("Sec-Fetch-Site", "cross-site")],
        vec![("Origin", own.as_str()), ("Origin", "http://evil.example")],
        vec![
            ("Origin", "http://evil.example"),
            ("Sec-Fetch-Site", "same-origin"),
        ],
    ] {
        let a = login(&server, &member, Some("/runs"), &headers);
        assert_eq!(a.status, 403, "{headers:?}: {}", a.text());
        assert_eq!(a.header("set-cookie"), None, "{headers:?}");
        assert!(
            a.header("content-type")
                .unwrap_or_default()
                .starts_with("text/html"),
            "{headers:?}: {:?}",
            a.headers
        );
        assert!(
            a.text().contains("another site"),
            "{headers:?}: {}",
            a.text()
        );
    }
    // From this site's own page, a browser's address bar, or a client that is no browser
    // (no Origin, no Sec-Fetch-Site): signed in.
    for headers in [
        vec![("Origin", own.as_str()), ("Sec-Fetch-Site", "same-origin")],
        vec![("Origin", own.as_str())],
        vec![("Sec-Fetch-Site", "none")],
        vec![],
    ] {
        let a = login(&server, &member, Some("/runs"), &headers);
        assert_eq!(a.status, 303, "{headers:?}: {}", a.text());
        assert_eq!(a.header("location"), Some("/runs"));
        assert!(a.header("set-cookie").is_some(), "{headers:?}");
    }

    // A change of the UI posted by another site with the session's cookie and CSRF value
    // (as if SameSite were not enforced): refused, the session kept.
    let cookie = cookie_of(&login(&server, &member, None, &[]));
    let csrf = csrf_of_page(&server, &cookie, "/runs");
    let body = form(&[("csrf", &csrf)]);
    let post = |extra: &[(&str, &str)]| {
        let mut headers = vec![
            ("Cookie", cookie.as_str()),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ];
        headers.extend_from_slice(extra);
        request_with(&server.addr, "POST", "/logout", &headers, Some(&body)).expect("POST /logout")
    };
    let a = post(&[("Origin", "http://evil.example")]);
    assert_eq!(a.status, 403, "{}", a.text());
    assert_eq!(a.header("set-cookie"), None, "the session is not cleared");
    assert!(a.text().contains("another site"), "{}", a.text());
    let a = post(&[("Origin", own.as_str()), ("Sec-Fetch-Site", "same-origin")]);
    assert_eq!(a.status, 303, "{}", a.text());

    // The API: a foreign Origin is refused in the API's shape, whatever the method, before
    // the token is looked at; the same request without it (the CLI, curl) is done.
    let bearer = format!("Bearer {admin}");
    let create = serde_json::json!({"team": "vision", "role": "viewer"}).to_string();
    let api = |method: &str, path: &str, body: Option<&[u8]>, extra: &[(&str, &str)]| {
        let mut headers = vec![
            ("Authorization", bearer.as_str()),
            ("Content-Type", "application/json"),
        ];
        headers.extend_from_slice(extra);
        request_with(&server.addr, method, path, &headers, body).expect("an API request")
    };
    let tokens = |server: &Server| -> usize {
        let a = server.call("GET", "/api/v1/tokens", Some(&admin), None);
        assert_eq!(a.status, 200, "{}", a.text());
        a.json().as_array().map_or(0, Vec::len)
    };
    let before = tokens(&server);
    for extra in [
        vec![("Origin", "http://evil.example")],
        vec![("Origin", "null")],
        vec![("Sec-Fetch-Site", "cross-site")],
    ] {
        let a = api("POST", "/api/v1/tokens", Some(create.as_bytes()), &extra);
        refused_as_json(&a, &format!("POST /api/v1/tokens {extra:?}"));
    }
    assert_eq!(tokens(&server), before, "no token was made");
    let a = api("POST", "/api/v1/tokens", Some(create.as_bytes()), &[]);
    assert_eq!(a.status, 201, "{}", a.text());
    let id = a.json()["id"].as_str().expect("an id").to_owned();
    let made = a.json()["token"].as_str().expect("a token").to_owned();
    let revoke = format!("/api/v1/tokens/{id}");
    let a = api(
        "DELETE",
        &revoke,
        None,
        &[("Origin", "http://evil.example")],
    );
    refused_as_json(&a, "DELETE a token");
    assert_eq!(
        server
            .call("GET", "/api/v1/whoami", Some(&made), None)
            .status,
        200,
        "the token still works"
    );
    for method in ["PUT", "PATCH"] {
        let a = api(method, &revoke, None, &[("Origin", "http://evil.example")]);
        refused_as_json(&a, method);
    }
    // Reading is never refused: a GET from another site reads nothing without a token.
    let a = api(
        "GET",
        "/api/v1/whoami",
        None,
        &[("Origin", "http://evil.example")],
    );
    assert_eq!(a.status, 200, "{}", a.text());
    let a = api("DELETE", &revoke, None, &[("Origin", own.as_str())]);
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(
        server
            .call("GET", "/api/v1/whoami", Some(&made), None)
            .status,
        401,
        "revoked"
    );
}

#[test]
fn allowed_origins_are_those_a_proxy_serves_the_ui_at() {
    let sb = Sandbox::new("web-allowed-origin");
    let (_, member) = token(&sb, "vision", "member", &[]);
    // A bad origin is refused before the server starts.
    for bad in [
        "sluice.example.com",
        "https://sluice.example.com/ui",
        "ftp://sluice.example.com",
        "https://user@sluice.example.com",
        "https://sluice.example.com:99999",
        "null",
    ] {
        let out = sb.run(&["server", "--listen", "127.0.0.1:0", "--allowed-origin", bad]);
        assert_eq!(out.code, Some(2), "--allowed-origin {bad}: {}", out.stderr);
        assert!(out.stderr.contains("--allowed-origin"), "{}", out.stderr);
    }
    let server = Server::start(
        &sb,
        &[
            "--allowed-origin",
            "https://Sluice.Example.com/",
            "--allowed-origin",
            "http://10.0.0.5:8080",
        ],
    );
    // The proxy rewrites Host to the server's own address; the browser names its origin.
    for origin in [
        "https://sluice.example.com",
        "https://sluice.example.com:443",
        "http://10.0.0.5:8080",
    ] {
        let a = login(
            &server,
            &member,
            None,
            &[("Origin", origin), ("Sec-Fetch-Site", "same-origin")],
        );
        assert_eq!(a.status, 303, "{origin}: {}", a.text());
        assert!(a.header("set-cookie").is_some());
    }
    for origin in [
        "http://sluice.example.com",
        "https://sluice.example.com:8443",
        "https://evil.example",
        "http://10.0.0.5",
    ] {
        let a = login(&server, &member, None, &[("Origin", origin)]);
        assert_eq!(a.status, 403, "{origin}: {}", a.text());
        assert_eq!(a.header("set-cookie"), None);
    }
    // An allowed origin is still another site's when the browser says so.
    let a = login(
        &server,
        &member,
        None,
        &[
            ("Origin", "https://sluice.example.com"),
            ("Sec-Fetch-Site", "cross-site"),
        ],
    );
    assert_eq!(a.status, 403, "{}", a.text());
}

const FAILS: &str = r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: validate}
spec:
  steps:
    - name: load
      run: echo loaded 0 rows
    - name: check
      needs: [load]
      run: echo "the input has 0 rows" >&2; exit 3
"#;

/// Every answer of the UI: a policy allowing scripts and styles of this site only (no inline
/// script, no `style=` attribute), no framing, no sniffing, no referrer to other sites.
fn hardened(a: &Answer, what: &str) {
    let csp = a.header("content-security-policy").unwrap_or_default();
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    ] {
        assert!(csp.contains(directive), "{what}: {directive} in {csp:?}");
    }
    assert!(!csp.contains("unsafe"), "{what}: {csp}");
    assert_eq!(a.header("x-frame-options"), Some("DENY"), "{what}");
    assert_eq!(
        a.header("x-content-type-options"),
        Some("nosniff"),
        "{what}"
    );
    assert_eq!(a.header("referrer-policy"), Some("same-origin"), "{what}");
    if a.header("content-type")
        .is_some_and(|t| t.starts_with("text/html"))
    {
        // What the policy would block must not be needed: no inline script or handler, no
        // style attribute.
        let body = a.text();
        for (at, _) in body.match_indices("<script") {
            assert!(
                body[at..].starts_with("<script src=\"/ui/"),
                "{what}: an inline script at {}",
                &body[at..(at + 80).min(body.len())]
            );
        }
        for attr in [
            " style=",
            " onclick=",
            " onsubmit=",
            " onload=",
            "javascript:",
        ] {
            assert!(!body.contains(attr), "{what}: {attr} in {body}");
        }
    }
}

#[test]
fn every_answer_carries_the_hardening_headers() {
    let sb = Sandbox::new("web-headers");
    let (_, member) = token(&sb, "vision", "member", &[]);
    let server = Server::start(&sb, &[]);
    sb.write("fails.yaml", FAILS);
    let out = server.cli(&sb, Some(&member), &["run", "fails.yaml", "--detach"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let id = out.stdout.trim().to_owned();
    sluice_e2e::wait_for("the run to fail", || {
        server
            .call("GET", &format!("/api/v1/runs/{id}"), Some(&member), None)
            .json()["state"]
            == "Failed"
    });
    let cookie = cookie_of(&login(&server, &member, None, &[]));
    let get = |path: &str, signed_in: bool| {
        let headers: Vec<(&str, &str)> = if signed_in {
            vec![("Cookie", cookie.as_str())]
        } else {
            vec![]
        };
        request_with(&server.addr, "GET", path, &headers, None)
            .unwrap_or_else(|e| panic!("GET {path}: {e}"))
    };
    let pages = [
        ("/runs".to_owned(), 200),
        ("/runs?state=Failed".to_owned(), 200),
        (format!("/runs/{id}"), 200),
        (format!("/runs/{id}/live"), 200),
        (format!("/runs/{id}/steps/check"), 200),
        (format!("/runs/{id}/steps/check/log.txt"), 200),
        ("/queue".to_owned(), 200),
        ("/schedules".to_owned(), 200),
        ("/usage".to_owned(), 200),
        ("/usage?days=30".to_owned(), 200),
        ("/runs/no-such-run".to_owned(), 404),
        (format!("/runs/{id}/steps/nope"), 404),
        ("/".to_owned(), 303),
    ];
    for (path, status) in &pages {
        let a = get(path, true);
        assert_eq!(a.status, *status, "{path}: {}", a.text());
        hardened(&a, path);
    }
    // The usage page's bars are SVG, not `style=` widths.
    assert!(get("/usage", true).text().contains(r#"<svg class="bar""#));
    // Signed out: the sign-in page, and the redirects to it.
    for (path, status) in [
        ("/login", 200),
        ("/login?next=/queue&why=x", 200),
        ("/runs", 303),
    ] {
        let a = get(path, false);
        assert_eq!(a.status, status, "{path}");
        hardened(&a, path);
    }
    // Refusals: a bad sign-in, a change without its CSRF value, another site's change.
    hardened(&login(&server, "nope", None, &[]), "a failed sign-in");
    hardened(
        &login(&server, &member, None, &[]),
        "the sign-in's redirect",
    );
    let a = request_with(
        &server.addr,
        "POST",
        "/logout",
        &[
            ("Cookie", &cookie),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        Some(b"csrf=wrong"),
    )
    .expect("POST /logout");
    assert_eq!(a.status, 403);
    hardened(&a, "a change without its CSRF value");
    let a = login(&server, &member, None, &[("Origin", "http://evil.example")]);
    assert_eq!(a.status, 403);
    hardened(&a, "another site's sign-in");

    // The stylesheet and the script, at the addresses the pages name: compiled in, their
    // type said, cached for a year (the address changes with their content).
    let page = get("/runs", true).text();
    for (prefix, kind) in [
        ("<link rel=\"stylesheet\" href=\"", "text/css"),
        ("<script src=\"", "text/javascript"),
    ] {
        let at = page
            .find(prefix)
            .unwrap_or_else(|| panic!("{prefix} in {page}"));
        let rest = &page[at + prefix.len()..];
        let url = &rest[..rest.find('"').expect("the address ends")];
        assert!(url.starts_with("/ui/app.") && url.contains("?v="), "{url}");
        let a = get(url, false);
        assert_eq!(a.status, 200, "{url}");
        assert!(
            a.header("content-type")
                .is_some_and(|t| t.starts_with(kind)),
            "{url}: {:?}",
            a.headers
        );
        let cache = a.header("cache-control").unwrap_or_default();
        assert!(
            cache.contains("max-age=31536000") && cache.contains("immutable"),
            "{url}: {cache}"
        );
        assert!(!a.body.is_empty());
        hardened(&a, url);
    }

    // The API's answers and the routes beside it: never sniffed as another type.
    for (path, status) in [
        ("/api/v1/runs", 200),
        ("/api/v1/whoami", 200),
        ("/api/v1/runs/no-such-run", 404),
        ("/api/v1/openapi.json", 200),
        ("/healthz", 200),
        ("/no-such-route", 404),
    ] {
        let a = server.call("GET", path, Some(&member), None);
        assert_eq!(a.status, status, "{path}: {}", a.text());
        assert_eq!(
            a.header("x-content-type-options"),
            Some("nosniff"),
            "{path}"
        );
    }
    let a = server.call(
        "POST",
        "/api/v1/runs/no-such-run/cancel",
        Some(&member),
        None,
    );
    assert_eq!(a.status, 404);
    assert_eq!(a.header("x-content-type-options"), Some("nosniff"));
}
