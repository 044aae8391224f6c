#!/usr/bin/env bash
# Which Katib Experiment files `sluice lint` accepts: every *.yaml under DIR (recursively,
# sorted), each linted alone, as one markdown table on standard output. Katib's own examples
# are not in this repository (their code is Katib's); fetch them and point the script at them:
#
#   git clone --depth 1 https://github.com/kubeflow/katib /tmp/katib
#   bash bench/katib_examples.sh /tmp/katib/examples/v1beta1
#
# Knobs (environment): SLUICE=PATH (default target/debug/sluice, built if missing).
#
# A file is "accepted" when lint exits 0 (warnings allowed) and "refused" when it exits 2;
# for a refused file the table gives lint's first error, with its line and column, and how
# many more there are. A file holding documents that are not Experiments (a ConfigMap) is
# linted like any other. Exits non-zero only if lint crashes (an exit other than 0 or 2).
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=${1:?usage: bash bench/katib_examples.sh DIR (a folder of Katib Experiment files)}
SLUICE=${SLUICE:-target/debug/sluice}
[[ -d $DIR ]] || { echo "katib_examples: $DIR is not a folder" >&2; exit 2; }
if [[ ! -x $SLUICE ]]; then
  echo "katib_examples: building $SLUICE" >&2
  cargo build -q -p sluice-engine
fi

OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
accepted=0
refused=0
rows=()
while IFS= read -r file; do
  rel=${file#"$DIR"/}
  rc=0
  "$SLUICE" lint --output json "$file" >"$OUT" 2>/dev/null || rc=$?
  case $rc in
    0) accepted=$((accepted + 1)) ;;
    2) refused=$((refused + 1)) ;;
    *) echo "katib_examples: sluice lint exited $rc on $file" >&2; exit 1 ;;
  esac
  rows+=("$(python3 - "$rel" "$rc" "$OUT" <<'PY'
import json, sys
rel, rc, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
doc = json.load(open(out))
errors = [d for d in doc.get("diagnostics", []) if d.get("severity") == "error"]
warnings = [d for d in doc.get("diagnostics", []) if d.get("severity") == "warning"]
def cell(d):
    text = f"{d['line']}:{d['column']}: {d['message']}"
    return text.replace("|", "\\|")
if rc == 0:
    what = "accepted"
    note = "; ".join("warning " + cell(w) for w in warnings)
else:
    what = "refused"
    note = cell(errors[0]) if errors else "(no error reported)"
    if len(errors) > 1:
        note += f" (+{len(errors) - 1} more)"
print(f"| `{rel}` | {what} | {note} |")
PY
)")
done < <(find "$DIR" -type f \( -name '*.yaml' -o -name '*.yml' \) | LC_ALL=C sort)

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
katib=$(git -C "$DIR" rev-parse --short HEAD 2>/dev/null || echo "not a git checkout")
echo "sluice lint FILE for each of the $((accepted + refused)) files under \`$DIR\`" \
  "(Katib commit $katib); sluice commit $commit: $accepted accepted, $refused refused."
echo
echo "| file | lint | first error (line:column), or warnings |"
echo "|---|---|---|"
printf '%s\n' "${rows[@]}"
