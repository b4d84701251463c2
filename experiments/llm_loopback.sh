#!/usr/bin/env bash
# Issue 35's runs against the scripted model (tests/search/scripted_model.py) on the loopback OpenAI server,
# driven by the real `openai` client: the default LLM pipeline (`llm=openai`, nothing else set), then the same
# budget as evolution vs best-of-N and LLM vs knob only, and the report comparing them.
#   bash experiments/llm_loopback.sh [TASK] [BUDGET_S] [OUT]     (defaults: layernorm_bwd, 240, /tmp/llm_loopback)
# Prints each run's summary; the comparison is OUT/report/index.html and the last lines of OUT/report.log.
set -euo pipefail
cd "$(dirname "$0")/.."
TASK=${1:-layernorm_bwd}; BUDGET=${2:-240}; OUT=${3:-/tmp/llm_loopback}
mkdir -p "$OUT"
python tests/search/scripted_model.py "$TASK" cpu > "$OUT/server.url" 2> "$OUT/server.log" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null' EXIT
for _ in $(seq 100); do [ -s "$OUT/server.url" ] && break; sleep 0.2; done
export OPENAI_API_KEY=sk-loopback-not-a-secret OPENAI_BASE_URL=$(head -1 "$OUT/server.url")
run() {   # NAME OVERRIDES...
  local name=$1; shift
  local t=$(date +%s)
  python -m kevolve task="$TASK" hydra.run.dir="$OUT/$name" "$@" > "$OUT/$name.log" 2>&1 || true
  echo "== $name ($*): $(( $(date +%s) - t )) s"
  sed -n '/^speedup /,$p' "$OUT/$name.log" | cut -c1-400
}
run default llm=openai                                                    # the pipeline, no other override
run evolve llm=openai search.wall_time_s="$BUDGET"
run best_of_n llm=openai search.mode=best_of_n search.wall_time_s="$BUDGET"
run knob llm=none search.wall_time_s="$BUDGET"
python -m kevolve.report "$OUT/evolve" "$OUT/best_of_n" "$OUT/knob" -o "$OUT/report" > "$OUT/report.log" 2>&1
tail -40 "$OUT/report.log"
