#!/usr/bin/env bash
# Rebuild the tiny world from nothing, offline, on a CPU (about 2 hours on 2 cores):
#   corpus -> tokenizer -> target pretraining -> target-regenerated data -> DFlash drafter + draft LM -> bench -> export.
# Every figure in hub_models/*/README.md comes from the files this script writes under $RUN.
# Usage: scripts/build_tiny_world.sh [RUN folder, default runs/tinyworld]   (needs `pip install -e ".[bench]"`)
set -euo pipefail
RUN=${1:-runs/tinyworld}
SPECGEN=${SPECGEN:-specgen}
mkdir -p "$RUN"
: > "$RUN/commands.txt"

step() {  # step NAME COMMAND...: record the exact command line under NAME, then run it
  local name=$1; shift
  printf '%s\t%s\n' "$name" "$*" >> "$RUN/commands.txt"
  echo "+ $*"
  "$@"
}

step corpus $SPECGEN data corpus "$RUN/corpus"
step tokenizer $SPECGEN data tokenizer --corpus "$RUN/corpus" --out "$RUN/tokenizer"
step target $SPECGEN train lm --tokenizer "$RUN/tokenizer" --pretrain-data "$RUN/corpus/pretrain.jsonl" \
  --eval-corpus "$RUN/corpus" --out "$RUN/target" --time-budget-minutes 62 --layers 8 --hidden-size 256
step eval_math $SPECGEN data regenerate --target "$RUN/target/model" --data "$RUN/corpus/eval_math.jsonl" \
  --out "$RUN/eval_math_greedy.jsonl" --samples-per-prompt 0 --batch-size 64
step regenerate $SPECGEN data regenerate --target "$RUN/target/model" --data "$RUN/corpus/train.jsonl" \
  --out "$RUN/regen.jsonl" --limit 3000 --samples-per-prompt 1 --batch-size 64 --max-new-tokens 256
# The two drafters train side by side, one CPU thread each.
step dflash $SPECGEN train dflash --target "$RUN/target/model" --data "$RUN/regen.jsonl" --out "$RUN/dflash" \
  --block-size 16 --layers 2 --num-taps 3 --max-anchors 64 --batch-size 4 --seq-len 512 \
  --time-budget-minutes 40 --threads 1 &
step draft $SPECGEN train lm --tokenizer "$RUN/target/model" --chat-data "$RUN/regen.jsonl" --out "$RUN/draft" \
  --layers 2 --init-embeddings-from "$RUN/target/model" --batch-size 16 --seq-len 512 --lr 1e-3 \
  --time-budget-minutes 25 --threads 1 &
wait
step export_pre $SPECGEN world export --runs "$RUN" --out hub_models
step bench $SPECGEN bench --num-prompts 10 --repeats 3 --out bench_results/tinyworld
step export $SPECGEN world export --runs "$RUN" --out hub_models --bench bench_results/tinyworld/results.json
