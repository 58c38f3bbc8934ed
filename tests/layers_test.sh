#!/usr/bin/env bash
# The layering is a build rule: runtime/ sees no graph/ or stages/, graph/ and stages/ see only
# runtime/ (and themselves), a stage folder sees no other stage folder but stages/shared/.
#  1. Compile probes with each layer's include path (FLAGS_DIR/<layer>.flags, generated from the
#     uvflow_<layer> targets): an upward include must fail with "No such file", an allowed one
#     must compile (so the failure is the layering, not a broken probe).
#  2. Scan the sources, which also catches what include paths cannot (relative "../" includes,
#     one stage folder including another).
# Usage: layers_test.sh SOURCE_DIR FLAGS_DIR CXX
set -uo pipefail
src=$1 flags=$2 cxx=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0
pass() { passed=$((passed + 1)); }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }

# probe LAYER HEADER ok|missing
probe() {
  local layer=$1 header=$2 expect=$3
  printf '#include "%s"\n' "$header" > "$work/probe_$layer.cpp"
  if "$cxx" -std=c++20 -fsyntax-only "@$flags/$layer.flags" "$work/probe_$layer.cpp" 2> "$work/err"; then
    [[ $expect == ok ]] && pass || fail "the $layer layer compiles #include \"$header\" (an upward include)"
  elif [[ $expect == missing ]] && grep -q "$header: No such file" "$work/err"; then
    pass
  else
    fail "the $layer layer: #include \"$header\" should $([[ $expect == ok ]] && echo compile || echo 'be not found'):"
    head -5 "$work/err"
  fi
}
probe runtime runtime/stage_decl.hpp ok
probe runtime graph/pipeline.hpp missing
probe runtime stages/builtin.hpp missing
probe graph runtime/registry.hpp ok
probe graph graph/pipeline.hpp ok
probe graph stages/builtin.hpp missing
probe stages runtime/registry.hpp ok
probe stages stages/builtin.hpp ok
probe stages graph/pipeline.hpp missing

# scan FOLDER PATTERN WHAT: every include in FOLDER matching PATTERN (an extended regex on the
# included path) is a violation.
inc='^[[:space:]]*#[[:space:]]*include[[:space:]]*["<]'
scan() {
  local hits
  hits=$(cd "$src" && grep -rnE "$inc$2" "$1" --include='*.hpp' --include='*.cpp' --include='*.cu' --include='*.h')
  if [[ -n $hits ]]; then fail "$3:"; echo "$hits" | sed 's/^/  /'; else pass; fi
}
scan runtime '([^">]*/)?(graph|stages|cli)/' "runtime/ includes graph/, stages/ or cli/"
scan graph '([^">]*/)?(stages|cli)/' "graph/ includes stages/ or cli/"
scan stages '([^">]*/)?(graph|cli)/' "stages/ includes graph/ or cli/"

# A stage folder includes its own headers, stages/shared/ and runtime/, never another stage folder.
cross=""
for dir in "$src"/stages/*/; do
  domain=$(basename "$dir")
  [[ $domain == shared ]] && continue
  hits=$(cd "$src" && grep -rnE "$inc([^\">]*/)?stages/[a-z_0-9]+/|$inc\.\./[a-z_0-9]+/" "stages/$domain" \
           --include='*.hpp' --include='*.cpp' --include='*.cu' --include='*.h' |
         awk -v own="$domain" '{ text = $0; sub(/^[^:]*:[0-9]+:/, "", text)
                                 if (text !~ "(stages/|\\.\\./)(" own "|shared)/") print }')
  [[ -n $hits ]] && cross+="$hits"$'\n'
done
if [[ -n $cross ]]; then
  fail "stage folders include other stage folders (move what they share to stages/shared/):"
  printf '%s' "$cross" | sed 's/^/  /'
else
  pass
fi

echo "$passed passed, $failed failed"
[[ $failed == 0 ]]
