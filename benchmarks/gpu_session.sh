#!/usr/bin/env bash
# The GPU checks and measurements of a session lent a device machine, prepared so that they take
# one command each (docs/benchmarks.md, "On a lent GPU: the prepared script").
#
# Here, once (both folders are git-ignored through .git/info/exclude):
#   bash benchmarks/gpu_session.sh prepare
# Then on the device machine, from the repository root, carrying .whl and .xqdata:
#   bash benchmarks/gpu_session.sh checks   # GPU tests, #4's benchmark on the GPU (about 5 min)
#   bash benchmarks/gpu_session.sh train    # Xiangqi training throughput and a 4-minute stage (about 8 min)
# Logs go to $OUT (the device tool's folder) or else runs/gpu-session. A smoke run of the logic
# here: PY=.venv/bin/python DEVICE=cpu PROBE_STEPS=10 STAGE_SECONDS=20 POSITIONS=50 \
#   bash benchmarks/gpu_session.sh train
# A failed step does not stop the others (device time is short), but is named at the end and
# makes the exit status 1; a step that the rest needs (the stage's length) stops the run.
set -uo pipefail
part=${1:?usage: gpu_session.sh prepare|checks|train}
case $part in prepare|checks|train) ;; *) echo "unknown part $part: prepare, checks or train"; exit 2;; esac
out=${OUT:-runs/gpu-session}
device=${DEVICE:-cuda}
probe_steps=${PROBE_STEPS:-60}
stage_seconds=${STAGE_SECONDS:-240}
positions=${POSITIONS:-2000}
mkdir -p "$out"
step() { echo "== $* ($(date -u +%T))"; }
failed=""
fail() { echo "== FAILED: $1"; failed="$failed${failed:+, }$1"; }

if [ "$part" = prepare ]; then
  # The device image holds torch, triton, tokenizers, safetensors, numpy, pytest and hypothesis
  # (/work/.library/device/KINDS.md) but not pydantic or outlines-core: carry them as wheels.
  grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
  grep -qx '/.xqdata/' .git/info/exclude 2>/dev/null || echo /.xqdata/ >> .git/info/exclude
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl pydantic==2.14.4 pydantic_core==2.50.5 \
    annotated-types==0.8.0 typing-inspection==0.4.5 typing_extensions==4.16.0 \
    outlines_core==0.2.14 || exit 1
  # the master games and the cache of training-position keys (the "unseen" split of agreement)
  mkdir -p .xqdata
  cp ../shared/data/xiangqi/*.jsonl.gz .xqdata/ || exit 1
  [ -f runs/xiangqi-train-keys.npy.source.json ] || .venv/bin/python -m apps.xiangqi.evaluate keys \
    || exit 1
  cp runs/xiangqi-train-keys.npy runs/xiangqi-train-keys.npy.source.json .xqdata/ || exit 1
  du -sh .whl .xqdata
  exit 0
fi

export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0
py=${PY:-python3}
if ! $py -c "import pydantic, outlines_core" 2> /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
step machine
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
  $py -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__,
      torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')"; } \
  | tee "$out/machine.txt"

if [ "$part" = checks ]; then
  step "GPU tests: training device, engine answers against the CPU, kernels in the model"
  timeout 300 $py -m pytest -q -p no:cacheprovider tests/test_train_device.py \
    tests/test_engine_cuda.py tests/test_kernels_model_parity.py 2>&1 | tee "$out/tests.log" \
    || fail "GPU tests"
  for dtype in float32 bfloat16; do
    step "joint vs standalone vs AR, lease, $device $dtype"
    timeout 150 $py benchmarks/joint_vs_standalone.py --device $device --dtype $dtype --repeats 5 \
      2>&1 | tee "$out/joint_vs_standalone_${device//:/-}_$dtype.md" \
      || fail "joint vs standalone, lease, $dtype"
  done
  step "joint vs standalone vs AR, contracts group, $device float32"
  timeout 120 $py benchmarks/joint_vs_standalone.py --device $device --contracts-seed 20000000 \
    --repeats 5 2>&1 | tee "$out/joint_vs_standalone_${device//:/-}_contracts.md" \
    || fail "joint vs standalone, contracts group"
elif [ "$part" = train ]; then
  [ -f .xqdata/train-games.jsonl.gz ] || { echo "carry .xqdata (run 'prepare' here first)"; exit 1; }
  # configs/xiangqi-stage8.json with the carried data, another batch size and run length
  config() {  # config BATCH MAX_STEPS OUT_DIR -> path of the written config
    $py - "$@" "$device" <<'EOF'
import json, sys
batch, steps, out_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
cfg = json.load(open("configs/xiangqi-stage8.json"))
cfg["train"]["optim"]["batch_size"] = batch
cfg["train"]["run"].update(out_dir=out_dir, max_steps=steps, device=sys.argv[4], threads=8,
                           eval_every=1_000_000, checkpoint_minutes=60.0,
                           length_window=max(4, 512 // batch))  # ~512 rows sorted per window
cfg["xiangqi"].update(train_games=".xqdata/train-games.jsonl.gz",
                      valid_games=".xqdata/valid-games.jsonl.gz")
path = f"/tmp/xq-{batch}-{steps}.json"
json.dump(cfg, open(path, "w"), indent=2)
print(path)
EOF
  }
  for batch in 16 64 256; do
    step "throughput, batch $batch ($probe_steps steps from models/xiangqi)"
    rm -rf /tmp/xq-probe-$batch  # a fresh run refuses a directory holding one (a rerun)
    timeout 120 $py -m apps.xiangqi.train_player \
      --config "$(config $batch "$probe_steps" /tmp/xq-probe-$batch)" --init-from models/xiangqi \
      2>&1 | tee /tmp/throughput-$batch.log | grep -E "step $probe_steps |rror" \
      || fail "throughput, batch $batch"
    cat /tmp/throughput-$batch.log >> "$out/throughput.log"
  done
  # a stage of about stage_seconds at batch 64, sized from the measured rate (its last tok/s)
  steps=$($py -c "
import re
line = [l for l in open('/tmp/throughput-64.log') if ' tok/s ' in l][-1]
tok_s = float(re.search(r'tok/s (\d+)', line).group(1))
print(max(10, int($stage_seconds * tok_s / (64 * 300))))") \
    || { fail "no tok/s at batch 64: no stage"; echo "== FAILED: $failed"; exit 1; }
  step "stage: batch 64, $steps steps, lr cosine over them, from models/xiangqi"
  rm -rf /tmp/xq-gpu
  timeout 330 $py -m apps.xiangqi.train_player --config "$(config 64 "$steps" /tmp/xq-gpu)" \
    --init-from models/xiangqi --export /tmp/xq-gpu/export 2>&1 | tee "$out/stage.log" | tail -3 \
    || fail "stage"
  # pooled from ply 20, as the model alone is reported (stage 36 on these 2,000: 26.95%)
  step "agreement of the stage's model on $positions reported positions (seed 2026), pooled"
  timeout 150 $py -m apps.xiangqi.evaluate --model /tmp/xq-gpu/export --device $device --threads 8 \
    --out "$out/agreement.json" agreement --positions "$positions" --pool-from-ply 20 --quiet \
    --train-games .xqdata/train-games.jsonl.gz --valid-games .xqdata/valid-games.jsonl.gz \
    --keys-cache .xqdata/xiangqi-train-keys.npy 2>&1 | tail -3 || fail "agreement"
  mkdir -p "$out/model"  # the stage's model comes back (3 files; 8 at most in all)
  cp /tmp/xq-gpu/export/{config.json,model.safetensors,tokenizer.json} "$out/model/" \
    || fail "the stage's model"
else
  echo "unknown part $part: prepare, checks or train"; exit 2
fi
if [ -n "$failed" ]; then
  echo "== FAILED: $failed"
  exit 1
fi
step done
