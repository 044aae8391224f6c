#!/usr/bin/env python3
"""Fuzzes what a submission carries: mutated pipeline and sweep files posted to a server.

schemathesis (bench/fuzz_api.sh) fills `source` with strings made from the schema, which are
almost never YAML that gets past the parser. This takes the files of examples/pipelines and
examples/sweeps and mutates them as a person editing them might break them (lines dropped,
doubled, swapped or re-indented, YAML punctuation inserted or deleted, scalars replaced by
edge values, files cut short or spliced together), adds malformed `params` now and then, and
posts each to `POST /api/v1/runs` of a fresh server on loopback. It checks:

- nothing answers 5xx, no connection is dropped, the server never panics and is alive at the
  end (the issue's "never a 500, never a panic");
- a 400 is the API's error shape, and every diagnostic in it has a line and a column (but
  a parameter's, which names the `-p NAME=VALUE` it is about);
- every LINT_EVERY-th case without params: the errors the API answers are the errors
  `sluice lint --output json` gives for the same file under the same name (the issue's "the
  same diagnostics lint gives"), and a file lint accepts is not refused with diagnostics.
  Where the API gives a strict subset of lint's errors (the submission, like `sluice run`,
  stops at the loader's errors; lint goes on to the graph's), the case is counted and kept,
  not failed; any other difference fails.

Runs the API accepted are cancelled at once (their steps are the examples' commands, run in
the server's empty home). Exits non-zero on any failure; failing cases are kept in
bench/out/fuzz_submit/ to reproduce. Prints a markdown table.

Run from the repository's root (builds the release binaries first unless NO_BUILD=1):
    python3 bench/fuzz_submit.py [--cases 3000] [--seed 15] [--lint-every 10]
Python's standard library only.
"""

import argparse
import glob
import http.client
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time

EDGE_SCALARS = [
    "", "~", "null", "-1", "0", "1e309", "-1e309", ".nan", ".inf", "99999999999999999999999",
    "0x7fffffffffffffff", "18446744073709551616", "[]", "{}", "[[]]", "'{{'", '"}}"',
    "{{params.nope}}", "{{steps.nope.outputs.x}}", "{{item}}", "{{", "}}", "{{params.}}",
    "\"\\u0000\"", "\"\\ud800\"", "'é∂😀'", "*nope", "&a x", "!!binary aGk=", "!tag x",
    "true", "yes", "1:2:3", "2026-13-45", "100000000Gi", "-5s", "0s", "1e-400",
    "x" * 300, "|", ">", "- -", "? x", "%YAML 1.1",
]
PUNCT = list(":{}[]-&*!|>'\"#%@`,? \t\n\\") + ["{{", "}}", "- ", ": ", "\n  ", "\x00", "\r"]


def log(*a):
    print("fuzz_submit:", *a, file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def mutate(rng, text, corpus):
    """One to four edits of `text`."""
    for _ in range(rng.randint(1, 4)):
        lines = text.split("\n")
        op = rng.randrange(10)
        i = rng.randrange(len(lines))
        if op == 0 and len(lines) > 1:
            del lines[i]
        elif op == 1:
            lines.insert(i, lines[rng.randrange(len(lines))])
        elif op == 2:
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == 3:
            delta = rng.choice([-4, -2, -1, 1, 2, 4])
            lines[i] = " " * max(0, delta) + lines[i][max(0, -delta):]
        elif op == 4 and ":" in lines[i]:
            key, _, _ = lines[i].partition(":")
            lines[i] = key + ": " + rng.choice(EDGE_SCALARS)
        elif op == 5:
            pos = rng.randint(0, len(text))
            text = text[:pos] + rng.choice(PUNCT) + text[pos:]
            continue
        elif op == 6 and text:
            pos = rng.randrange(len(text))
            text = text[:pos] + text[pos + rng.randint(1, 3):]
            continue
        elif op == 7:
            text = text[:rng.randint(0, len(text))]
            continue
        elif op == 8:
            other = rng.choice(corpus).split("\n")
            cut = rng.randint(0, len(lines))
            lines = lines[:cut] + other[rng.randint(0, len(other)):]
        else:
            # A word of the file replaced by another of the corpus: names, references.
            words = text.replace("\n", " ").split(" ")
            donor = rng.choice(corpus).replace("\n", " ").split(" ")
            a, b = rng.choice(words), rng.choice(donor)
            if a.strip():
                text = text.replace(a, b, 1)
            continue
        text = "\n".join(lines)
    return text


def params_for(rng):
    picks = ["lr=0.1", "lr=abc", "lr=", "=1", "noequals", "epochs=-1", "epochs=1e400",
             "layers=[1,", "layers=[1, 2]", "split=nope", "verbose=maybe", "nope=1",
             "lr=float:0:1", "x=int:5:1", "x=float:0:nan", "opt=categorical:", "é=é",
             "lr=0.1\nepochs=2", "lr={{params.lr}}", "a" * 200 + "=1"]
    return rng.sample(picks, rng.randint(1, 3))


def errors_of(diagnostics):
    """The errors of a list of diagnostics (lint's `--output json` or the API's), comparable."""
    return sorted(json.dumps(d, sort_keys=True) for d in diagnostics if d.get("severity") == "error")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("--lint-every", type=int, default=10)
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target"))
    if not os.environ.get("NO_BUILD"):
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "sluice-engine",
                        "-p", "sluice-runtime"], cwd=root, check=True)
    sluice = os.environ.get("SLUICE", os.path.join(target, "release", "sluice"))
    corpus = []
    for pattern in ("examples/pipelines/*.yaml", "examples/sweeps/*.yaml"):
        for f in sorted(glob.glob(os.path.join(root, pattern))):
            with open(f) as fh:
                corpus.append(fh.read())
    kept = os.path.join(root, "bench", "out", "fuzz_submit")
    shutil.rmtree(kept, ignore_errors=True)
    work = tempfile.mkdtemp(prefix="sluice-fuzz-submit.")
    home = os.path.join(work, "home")
    cases_dir = os.path.join(work, "cases")
    os.makedirs(cases_dir)
    env = dict(os.environ, SLUICE_HOME=home)
    env.pop("SLUICE_SERVER", None)
    token = subprocess.run([sluice, "token", "create", "--team", "vision", "--role", "member"],
                           env=env, capture_output=True, text=True, check=True).stdout.strip()
    port = free_port()
    server_log = open(os.path.join(work, "server.log"), "w")
    server = subprocess.Popen([sluice, "server", "--listen", "127.0.0.1:%d" % port,
                               "--rate", "100000"], env=env, stdout=subprocess.DEVNULL,
                              stderr=server_log)
    deadline = time.time() + 30
    conn = None
    while time.time() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", "/readyz")
            r = conn.getresponse()
            r.read()
            if r.status == 200:
                break
        except OSError:
            time.sleep(0.05)
    headers = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}

    def call(method, path, body=None):
        nonlocal conn
        data = None if body is None else json.dumps(body).encode()
        try:
            conn.request(method, path, body=data, headers=headers)
            r = conn.getresponse()
            return r.status, r.read()
        except (OSError, http.client.HTTPException) as e:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            return None, repr(e).encode()

    def keep(name, text, body, status, problem):
        os.makedirs(kept, exist_ok=True)
        with open(os.path.join(kept, name), "w") as fh:
            fh.write(text)
        with open(os.path.join(kept, name + ".json"), "w") as fh:
            json.dump({"request": body, "status": status, "problem": problem}, fh, indent=1)

    rng = random.Random(a.seed)
    counts, failures, compared, mismatches, fewer = {}, [], 0, [], []
    started = time.time()
    for n in range(a.cases):
        text = mutate(rng, rng.choice(corpus), corpus)
        name = "case-%d.yaml" % n
        body = {"source": text, "path": name}
        with_params = rng.random() < 0.2
        if with_params:
            body["params"] = params_for(rng)
        if rng.random() < 0.05:
            body["name"] = rng.choice(["params", "nope", "", "x" * 100])
        status, answer = call("POST", "/api/v1/runs", body)
        counts[status] = counts.get(status, 0) + 1
        problem = None
        diagnostics = []
        if status is None or status >= 500:
            problem = "status %s: %s" % (status, answer[:300])
        elif status == 201:
            run = json.loads(answer)["id"]
            st, ans = call("POST", "/api/v1/runs/%s/cancel" % run)
            if st not in (202, 409):
                problem = "cancel of an accepted run: %s %s" % (st, ans[:300])
        else:
            try:
                err = json.loads(answer)["error"]
                diagnostics = err.get("diagnostics", [])
                if err["status"] != status:
                    problem = "body says %s, status %s" % (err["status"], status)
                for d in diagnostics:
                    # Only a parameter's (`-p NAME=VALUE`) has no line: it is no file's.
                    if ("line" not in d or "column" not in d) and not d["path"].startswith("-p "):
                        problem = "a diagnostic without a position: %s" % d
            except (ValueError, KeyError, TypeError) as e:
                problem = "not the API's error shape (%r): %s" % (e, answer[:300])
        if (problem is None and not with_params and "name" not in body
                and n % a.lint_every == 0 and status in (201, 400)):
            compared += 1
            with open(os.path.join(cases_dir, name), "w") as fh:
                fh.write(text)
            lint = subprocess.run([sluice, "lint", "--output", "json", name], cwd=cases_dir,
                                  env=env, capture_output=True, text=True)
            lint_errors = errors_of(json.loads(lint.stdout)["diagnostics"])
            api_errors = errors_of(diagnostics)
            if status == 400 and not diagnostics:
                pass  # refused for what lint does not judge (a sweep's budget, a queue)
            elif api_errors == lint_errors:
                pass
            elif api_errors and set(api_errors) < set(lint_errors):
                # The submission stops at the loader's errors, as `sluice run` does; lint
                # goes on to the graph's (needs, templates' upstream steps). Said, not failed.
                fewer.append(name)
                keep(name, text, body, status, "the API gives fewer errors than lint:\n"
                     "lint:\n%s\napi:\n%s" % ("\n".join(lint_errors), "\n".join(api_errors)))
            else:
                mismatches.append(name)
                problem = "lint and the API disagree:\nlint:\n%s\napi:\n%s" % (
                    "\n".join(lint_errors), "\n".join(api_errors))
        if problem:
            failures.append(name)
            keep(name, text, body, status, problem)
            log("%s: %s" % (name, problem))
        if (n + 1) % 500 == 0:
            log("%d cases, %.0f s" % (n + 1, time.time() - started))
    took = time.time() - started
    alive = server.poll() is None
    server.terminate()
    try:
        server.wait(30)
    except subprocess.TimeoutExpired:
        server.kill()
    server_log.close()
    with open(os.path.join(work, "server.log")) as fh:
        panics = [line for line in fh if "panicked" in line]
    shutil.rmtree(work, ignore_errors=True)
    print("| cases | seconds | 201 | 400 | 403 | 409 | other 4xx | 5xx or dropped | lint compared | API errors = lint's | API errors fewer than lint's | other differences | panics | server alive |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    other = sum(v for k, v in counts.items() if k and 400 <= k < 500 and k not in (400, 403, 409))
    bad = sum(v for k, v in counts.items() if k is None or k >= 500)
    print("| %d | %.0f | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %s |" % (
        a.cases, took, counts.get(201, 0), counts.get(400, 0), counts.get(403, 0),
        counts.get(409, 0), other, bad, compared, compared - len(fewer) - len(mismatches),
        len(fewer), len(mismatches), len(panics),
        "yes" if alive else "no"))
    for p in panics[:5]:
        log("panic:", p.strip())
    if failures or fewer:
        log("%d failing cases (and %d with fewer errors than lint) kept in %s" % (
            len(failures), len(fewer), kept))
    sys.exit(1 if failures or panics or not alive else 0)


if __name__ == "__main__":
    main()
