#!/usr/bin/env python3
"""Renders and lints charts/sluice with real Helm code (Helm v4 as a library, PyPI's
helm-python-sdk; no helm binary) and checks what an operator relies on:

- defaults: one server on SQLite with its home on a PersistentVolumeClaim, a Recreate
  rollout (the old server lets go of the file before the new one opens it);
- two replicas on PostgreSQL: the URL from the named Secret, no claim (each server's home
  an emptyDir), a rolling update;
- SQLite never runs two servers, whatever replicaCount says;
- PostgreSQL without its Secret is refused, saying which value to set;
- probes on /healthz and /readyz, a non-root read-only security context, the Cluster file
  mounted from a ConfigMap and given to `--cluster`, the object store's settings;
- every value in values.yaml has a comment that describes it;
- `helm lint --strict` reports no error or warning.

    python3 tests/chart/check.py        # with helm_python importable (.ci/run makes a venv)
"""

import os
import re
import sys

import yaml

import helm_python as helm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHART = os.path.join(ROOT, "charts", "sluice")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def render(values):
    out = helm.Chart.load(CHART).render(name="sluice", namespace="ml", values=values)
    docs = []
    for path, text in out.items():
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                docs.append(doc)
    return docs


def one(docs, kind):
    found = [d for d in docs if d["kind"] == kind]
    check(len(found) == 1, "exactly one %s, got %d" % (kind, len(found)))
    return found[0] if found else {}


def server(docs):
    dep = one(docs, "Deployment")
    return dep, dep["spec"]["template"]["spec"]["containers"][0]


def env(container):
    return {e["name"]: e for e in container.get("env", [])}


# Defaults: one server on SQLite.
docs = render({})
dep, c = server(docs)
check(dep["spec"]["replicas"] == 1, "defaults: one server on SQLite")
check(dep["spec"].get("strategy", {}).get("type") == "Recreate", "defaults: Recreate rollout")
pvc = one(docs, "PersistentVolumeClaim")
home = [v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "home"][0]
check(home.get("persistentVolumeClaim", {}).get("claimName") == pvc["metadata"]["name"],
      "defaults: the home on the chart's claim")
check("SLUICE_STATE" not in env(c), "defaults: no PostgreSQL URL")
check(c["args"][:3] == ["server", "--listen", "0.0.0.0:8080"], "listens on 0.0.0.0:8080: %s" % c["args"])
check("--cluster" not in c["args"], "no Cluster file unless given")
check(c["livenessProbe"]["httpGet"]["path"] == "/healthz", "liveness on /healthz")
check(c["readinessProbe"]["httpGet"]["path"] == "/readyz", "readiness on /readyz")
sc, psc = c["securityContext"], dep["spec"]["template"]["spec"]["securityContext"]
check(psc.get("runAsNonRoot") is True and psc.get("runAsUser", 0) != 0, "not root")
check(sc.get("readOnlyRootFilesystem") is True, "read-only root filesystem")
check(sc.get("allowPrivilegeEscalation") is False, "no privilege escalation")
check(sc.get("capabilities", {}).get("drop") == ["ALL"], "no capabilities")
mounts = {m["mountPath"] for m in c["volumeMounts"]}
check({"/var/lib/sluice", "/tmp"} <= mounts, "the home and /tmp writable: %s" % mounts)
check(c["resources"].get("requests"), "resources requested")
for kind in ("Service", "ServiceAccount", "Role", "RoleBinding", "ClusterRole",
             "ClusterRoleBinding", "PodDisruptionBudget"):
    one(docs, kind)
check(not [d for d in docs if d["kind"] == "ServiceMonitor"], "no ServiceMonitor unless asked")
check(one(docs, "Service")["spec"]["ports"][0]["port"] == 8080, "the Service on 8080")

# SQLite never runs two servers.
dep, _ = server(render({"replicaCount": 3}))
check(dep["spec"]["replicas"] == 1, "SQLite: one server whatever replicaCount says")

# Two replicas on PostgreSQL, S3, a Cluster file, a ServiceMonitor.
cluster = "apiVersion: sluice.dev/v1\nkind: Cluster\nmetadata: {name: gpus}\nspec: {}\n"
docs = render({
    "state": {"postgres": {"enabled": True, "existingSecret": "sluice-pg"}},
    "objects": {"url": "s3://models/sluice", "existingSecret": "sluice-s3"},
    "cluster": cluster,
    "serviceMonitor": {"enabled": True},
})
dep, c = server(docs)
check(dep["spec"]["replicas"] == 2, "PostgreSQL: two servers")
check(dep["spec"].get("strategy", {}).get("type") != "Recreate", "PostgreSQL: rolling update")
ref = env(c).get("SLUICE_STATE", {}).get("valueFrom", {}).get("secretKeyRef", {})
check(ref == {"name": "sluice-pg", "key": "url"}, "PostgreSQL URL from its Secret: %s" % ref)
check(env(c).get("SLUICE_OBJECTS", {}).get("value") == "s3://models/sluice", "the object store URL")
check({"secretRef": {"name": "sluice-s3"}} in c.get("envFrom", []), "object store credentials")
check(not [d for d in docs if d["kind"] == "PersistentVolumeClaim"], "PostgreSQL: no claim")
home = [v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "home"][0]
check("emptyDir" in home, "PostgreSQL: each server's home an emptyDir")
args = c["args"]
check("--cluster" in args and args[args.index("--cluster") + 1] == "/etc/sluice/cluster.yaml",
      "the Cluster file given to --cluster: %s" % args)
cm = one(docs, "ConfigMap")
check(yaml.safe_load(cm["data"]["cluster.yaml"]) == yaml.safe_load(cluster),
      "the Cluster file in its ConfigMap as given")
one(docs, "ServiceMonitor")

# PostgreSQL without its Secret: refused, naming the value.
try:
    render({"state": {"postgres": {"enabled": True}}})
    check(False, "PostgreSQL without existingSecret renders")
except helm.HelmError as e:
    check("state.postgres.existingSecret" in str(e), "the refusal names the value: %s" % e)

# Every value is described: a comment above it or above a block that holds it (a block of
# Kubernetes fields, such as `resources`, is described as a whole); a block whose own values
# are each described need not be.
lines = open(os.path.join(CHART, "values.yaml")).read().splitlines()
stack = []  # (indent, described) of the blocks the line is in
for i, line in enumerate(lines):
    m = re.match(r"^(\s*)([A-Za-z][A-Za-z0-9]*):(.*)$", line)
    if not m:
        continue
    indent = len(m.group(1))
    while stack and stack[-1][0] >= indent:
        stack.pop()
    described = i > 0 and lines[i - 1].strip().startswith("#")
    block = m.group(3).strip() == ""
    check(described or block or any(d for _, d in stack),
          "values.yaml:%d: %s has no comment" % (i + 1, m.group(2)))
    if block:
        stack.append((indent, described))

# Lint, strictly.
lint = helm.lint(CHART, strict=True)
check(not lint.get("errors"), "lint errors: %s" % lint.get("errors"))
bad = [m for m in lint.get("messages", []) if m.get("severity", 0) >= 2]
check(not bad, "lint warnings: %s" % bad)

if failures:
    for f in failures:
        print("chart check FAILED:", f)
    sys.exit(1)
print("chart: renders with defaults and with two replicas on PostgreSQL; lint clean (%d info)"
      % len(lint.get("messages", [])))
