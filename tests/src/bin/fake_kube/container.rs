//! One container as a host process: its command, environment, folders and log file.
//!
//! No mount namespaces: each volume mount's path is replaced, as a substring, by the host
//! folder of its volume in `command`, `args`, env values and `workingDir` (longest mount path
//! first, in one pass). `emptyDir` volumes are `WORK/NS/POD/volumes/VOL`; `hostPath` volumes
//! are their host path; `secret` volumes are a folder holding one file per key. An image given
//! with `--image NAME=ROOT` resolves argv[0] (an absolute path under ROOT, or a bare name in
//! ROOT's `/usr/local/bin`, `/usr/bin`, `/bin`) and every absolute argument that exists under
//! ROOT to ROOT+path; other images run the host's programs.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::task::JoinHandle;

use crate::Shared;

pub struct Prepared {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
}

/// `s` with each mount path replaced by its host folder (longest first, one pass).
pub fn substitute(s: &str, mounts: &[(String, String)]) -> String {
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    'scan: while i < s.len() {
        for (from, to) in mounts {
            if !from.is_empty() && s[i..].starts_with(from.as_str()) {
                out.push_str(to);
                i += from.len();
                continue 'scan;
            }
        }
        let ch = s[i..].chars().next().unwrap_or(' ');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The volume mounts of `c` as (mount path, host folder), longest mount path first; the
/// folders are made.
fn mounts(
    app: &Shared,
    pod: &Value,
    c: &Value,
    pod_dir: &Path,
) -> Result<Vec<(String, String)>, String> {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let mut found = vec![];
    for m in c["volumeMounts"].as_array().into_iter().flatten() {
        let (Some(name), Some(path)) = (m["name"].as_str(), m["mountPath"].as_str()) else {
            continue;
        };
        let vols = pod["spec"]["volumes"].as_array();
        let Some(vol) = vols.into_iter().flatten().find(|v| v["name"] == name) else {
            return Err(format!("volume {name:?} is not in the pod's spec.volumes"));
        };
        let host = if let Some(p) = vol["hostPath"]["path"].as_str() {
            PathBuf::from(p)
        } else {
            let dir = pod_dir.join("volumes").join(name);
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            if let Some(secret) = vol["secret"]["secretName"].as_str() {
                for (key, value) in secret_data(app, ns, secret)? {
                    std::fs::write(dir.join(&key), value).map_err(|e| format!("{key}: {e}"))?;
                }
            } else if !vol["emptyDir"].is_object() {
                eprintln!(
                    "fake-kube: volume {name:?}: only emptyDir, hostPath and secret are real; an empty folder stands in"
                );
            }
            dir
        };
        found.push((
            path.trim_end_matches('/').to_owned(),
            host.display().to_string(),
        ));
    }
    found.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
    Ok(found)
}

fn in_image(root: &Path, path: &str) -> Option<String> {
    let p = root.join(path.trim_start_matches('/'));
    p.exists().then(|| p.display().to_string())
}

/// The command line, environment and working folder of container `c` of `pod`.
pub fn prepare(app: &Shared, pod: &Value, c: &Value, pod_dir: &Path) -> Result<Prepared, String> {
    let mounts = mounts(app, pod, c, pod_dir)?;
    let sub = |s: &str| substitute(s, &mounts);
    let mut argv: Vec<String> = strings(&c["command"]).iter().map(|s| sub(s)).collect();
    argv.extend(strings(&c["args"]).iter().map(|s| sub(s)));
    if argv.is_empty() {
        return Err("no command and no args: the fake has no image entrypoints".into());
    }
    let image = c["image"].as_str().unwrap_or_default();
    if let Some((_, root)) = app.images.iter().find(|(n, _)| n == image) {
        if argv[0].starts_with('/') {
            if let Some(p) = in_image(root, &argv[0]) {
                argv[0] = p;
            }
        } else if !argv[0].contains('/') {
            let dirs = ["/usr/local/bin", "/usr/bin", "/bin"];
            let exe = dirs
                .iter()
                .find_map(|d| in_image(root, &format!("{d}/{}", argv[0])));
            if let Some(p) = exe {
                argv[0] = p;
            }
        }
        for a in argv.iter_mut().skip(1) {
            if a.starts_with('/')
                && let Some(p) = in_image(root, a)
            {
                *a = p;
            }
        }
    }
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
    let mut env = vec![
        ("PATH".to_owned(), path),
        ("HOME".to_owned(), pod_dir.display().to_string()),
    ];
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    for from in c["envFrom"].as_array().into_iter().flatten() {
        let prefix = from["prefix"].as_str().unwrap_or_default();
        if let Some(secret) = from["secretRef"]["name"].as_str() {
            match secret_data(app, ns, secret) {
                Ok(data) => env.extend(
                    data.into_iter()
                        .map(|(k, v)| (format!("{prefix}{k}"), sub(&String::from_utf8_lossy(&v)))),
                ),
                Err(e) if from["secretRef"]["optional"] != true => return Err(e),
                Err(_) => {}
            }
        }
    }
    for e in c["env"].as_array().into_iter().flatten() {
        let Some(name) = e["name"].as_str() else {
            continue;
        };
        let value = if let Some(v) = e["value"].as_str() {
            Some(v.to_owned())
        } else if let Some(path) = e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            Some(match path {
                "status.podIP" | "status.hostIP" => "127.0.0.1".to_owned(),
                p => match bracketed(p) {
                    // `metadata.annotations['KEY']`, as the Job controller's
                    // JOB_COMPLETION_INDEX is written.
                    Some((map, key)) => pod["metadata"][map][key]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    None => crate::store::field(pod, p),
                },
            })
        } else if let Some(key) = e["valueFrom"]["secretKeyRef"]["key"].as_str() {
            let r = &e["valueFrom"]["secretKeyRef"];
            let secret = r["name"].as_str().unwrap_or_default();
            let found = secret_data(app, ns, secret).and_then(|d| {
                d.into_iter()
                    .find(|(k, _)| k == key)
                    .map(|(_, v)| String::from_utf8_lossy(&v).into_owned())
                    .ok_or_else(|| format!("couldn't find key {key} in Secret {ns}/{secret}"))
            });
            match found {
                Ok(v) => Some(v),
                Err(_) if r["optional"] == true => None,
                Err(e) => return Err(e),
            }
        } else {
            Some(String::new())
        };
        if let Some(v) = value {
            env.retain(|(k, _)| k != name);
            env.push((name.to_owned(), sub(&v)));
        }
    }
    let cwd = match c["workingDir"].as_str() {
        Some(w) if !w.is_empty() => PathBuf::from(sub(w)),
        _ => pod_dir.join("cwd"),
    };
    std::fs::create_dir_all(&cwd).map_err(|e| format!("{}: {e}", cwd.display()))?;
    Ok(Prepared { argv, env, cwd })
}

/// A secret's keys and decoded values.
fn secret_data(app: &Shared, ns: &str, name: &str) -> Result<Vec<(String, Vec<u8>)>, String> {
    let store = app.lock();
    let secret = store
        .get("secrets", ns, name)
        .ok_or_else(|| format!("secret \"{name}\" not found"))?;
    let mut out = vec![];
    for (k, v) in secret["data"].as_object().into_iter().flatten() {
        out.push((k.clone(), base64_decode(v.as_str().unwrap_or_default())));
    }
    Ok(out)
}

/// A secret's `stringData` merged into its `data` (base64), as the API server does.
pub fn secret_string_data(secret: &mut Value) {
    let Some(plain) = secret["stringData"].as_object().cloned() else {
        return;
    };
    if !secret["data"].is_object() {
        secret["data"] = json!({});
    }
    for (k, v) in plain {
        secret["data"][k] = json!(base64_encode(v.as_str().unwrap_or_default().as_bytes()));
    }
    if let Some(o) = secret.as_object_mut() {
        o.remove("stringData");
    }
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

pub fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

pub fn base64_decode(text: &str) -> Vec<u8> {
    let mut out = vec![];
    let (mut acc, mut bits) = (0u32, 0);
    for c in text.bytes() {
        let Some(v) = B64.iter().position(|b| *b == c) else {
            continue;
        };
        acc = (acc << 6) | v as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}

pub struct Started {
    pub child: tokio::process::Child,
    pub pid: i32,
    pub copiers: Vec<JoinHandle<()>>,
}

/// Starts the program in a process group of its own, a clean environment, standard input
/// empty; standard output and error go, line by line with an RFC 3339 nanosecond
/// timestamp in front, to `log`.
pub async fn spawn(p: &Prepared, log: &Path) -> std::io::Result<Started> {
    let file = tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .await?;
    let mut cmd = tokio::process::Command::new(&p.argv[0]);
    cmd.args(&p.argv[1..])
        .env_clear()
        .envs(p.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&p.cwd)
        .process_group(0)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn()?;
    let pid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
    let file = Arc::new(tokio::sync::Mutex::new(file));
    let mut copiers = vec![];
    if let Some(out) = child.stdout.take() {
        copiers.push(tokio::spawn(copy_lines(out, file.clone())));
    }
    if let Some(err) = child.stderr.take() {
        copiers.push(tokio::spawn(copy_lines(err, file)));
    }
    Ok(Started {
        child,
        pid,
        copiers,
    })
}

async fn copy_lines(from: impl AsyncRead + Unpin, to: Arc<tokio::sync::Mutex<tokio::fs::File>>) {
    let mut r = BufReader::new(from);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match r.read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if !buf.ends_with(b"\n") {
            buf.push(b'\n');
        }
        let ts = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
        let mut line = format!("{ts} ").into_bytes();
        line.extend_from_slice(&buf);
        let mut f = to.lock().await;
        if f.write_all(&line).await.is_err() {
            return;
        }
        let _ = f.flush().await;
    }
}

/// `metadata.labels['KEY']` or `metadata.annotations['KEY']` as (`labels`, `KEY`).
fn bracketed(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix("metadata.")?;
    let (map, key) = rest.split_once("['")?;
    let key = key.strip_suffix("']")?;
    matches!(map, "labels" | "annotations").then_some((map, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_paths_are_replaced_longest_first_in_one_pass() {
        let m = vec![
            ("/sluice-pod/attempt".to_owned(), "/w/a".to_owned()),
            ("/sluice-pod".to_owned(), "/w/p".to_owned()),
        ];
        assert_eq!(
            substitute(
                r#"{"x":"/sluice-pod/attempt/inputs/x","y":"/sluice-pod/y"}"#,
                &m
            ),
            r#"{"x":"/w/a/inputs/x","y":"/w/p/y"}"#
        );
    }

    #[test]
    fn base64_round_trips() {
        for s in ["", "a", "ab", "abc", "hello world"] {
            assert_eq!(base64_decode(&base64_encode(s.as_bytes())), s.as_bytes());
        }
        assert_eq!(base64_encode(b"hi"), "aGk=");
    }
}
