#!/usr/bin/env bash
# Device call (issue 20 on a GPU): versions, the GPU smoke at HEAD, then the counting and the
# cryptogram experiments (reduced sizes, tiny-qwen2.5-vl-studies) through slurm/launch.py with
# --gpus 1 --executor local, side by side; each step's device read from its status/scores.
set -u
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
R=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$R/src
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; python3 -c "import sys,torch,transformers,trl,peft,datasets,accelerate;print(sys.version.split()[0],'torch',torch.__version__,'transformers',transformers.__version__,'trl',trl.__version__,'peft',peft.__version__,'datasets',datasets.__version__,'accelerate',accelerate.__version__)"; git -C $R log -1 --format=%H 2>/dev/null; } > $OUT/versions.txt 2>&1
cat $OUT/versions.txt
M=tiny-qwen2.5-vl-studies
G="--gpus 1 --executor local"
( cd /tmp && timeout 240 python3 $R/slurm/launch.py experiment counting --model $M $G --output-dir /tmp/st/counting \
  --set experiment.counting_train=64 --set experiment.counting_validation=8 --set experiment.counting_test=64 --set experiment.counting_test_b=64 \
  --set sft:train.max_steps=40 --set grpo:train.max_steps=8 --set grpo:train.per_device_train_batch_size=8 --set grpo:train.logging_steps=1 \
  --set train.bf16=true > /tmp/counting.log 2>&1; echo "counting rc=$?" >> /tmp/counting.log ) &
( cd /tmp && timeout 240 python3 $R/slurm/launch.py experiment cryptogram --model $M $G --output-dir /tmp/st/cryptogram \
  --set experiment.cryptogram_train=64 --set experiment.cryptogram_validation=4 --set experiment.cryptogram_test=32 \
  --set sft:train.max_steps=40 --set grpo:train.max_steps=8 --set grpo:train.per_device_train_batch_size=8 --set grpo:train.num_generations=4 --set grpo:train.logging_steps=1 \
  --set train.bf16=true > /tmp/cryptogram.log 2>&1; echo "cryptogram rc=$?" >> /tmp/cryptogram.log ) &
timeout 200 scripts/gpu-smoke --python python3 --out /tmp/smoke > /tmp/smoke.log 2>&1; echo "smoke rc=$?" >> /tmp/smoke.log
wait
date -u
tail -5 /tmp/smoke.log; tail -12 /tmp/counting.log; tail -12 /tmp/cryptogram.log
python3 - <<'PY'
import json, pathlib
for exp in ("counting", "cryptogram"):
    root = pathlib.Path("/tmp/st") / exp
    if not (root / "launch.json").exists():
        print(exp, "no launch.json"); continue
    print(exp, [(s["name"], s["state"]) for s in json.loads((root / "launch.json").read_text())["steps"]])
    for f in sorted(root.glob("runs/*/status.json")):
        s = json.loads(f.read_text()); print(" ", f.parent.name, s.get("state"), s.get("global_step"), s.get("device"))
    for f in sorted(root.glob("eval/*/scores.json")):
        s = json.loads(f.read_text()); print(" ", f.parent.name, s.get("n"), s.get("accuracy"), s.get("device"), s.get("dtype"))
PY
cp /tmp/smoke/gpu-smoke.json $OUT/ 2>/dev/null
cp /tmp/smoke.log /tmp/counting.log /tmp/cryptogram.log $OUT/ 2>/dev/null
tar czf $OUT/studies.tar.gz -C /tmp st --exclude='*.safetensors' --exclude='*.pt' --exclude='*.bin' --exclude='hf' 2>/dev/null
ls -la $OUT
