#!/usr/bin/env bash
# Device call 2: training's status.json names its device (sft, 6 steps, --gpus 1); then GRPO with
# ZeRO-3 in one process on the GPU (NCCL, 3 steps) and its status and final adapter.
set -u
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
R=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$R/src
cd /tmp
echo "== sft --gpus 1"; timeout 100 python3 $R/slurm/launch.py sft --model tiny-qwen2.5-vl-studies --gpus 1 --executor local --set train.max_steps=6 --set train.bf16=true --output-dir /tmp/sft1 2>&1 | grep -v -E "it/s\]|Map:|Saving" | tail -4
python3 -c "import json;s=json.load(open('/tmp/sft1/status.json'));print({k:s.get(k) for k in ('state','global_step','device','dtype')})"
echo "== grpo zero3 --gpus 1"; timeout 200 python3 $R/slurm/launch.py grpo --model tiny-qwen2.5-vl-pretrained --gpus 1 --executor local --set train.deepspeed=zero3 --set train.bf16=true --set train.max_steps=3 --set train.save_steps=1 --output-dir /tmp/z3 > /tmp/z3.log 2>&1; echo "rc=$?"
grep -v -E "it/s\]|Map:|Saving" /tmp/z3.log | tail -15
python3 -c "import json;s=json.load(open('/tmp/z3/status.json'));print({k:s.get(k) for k in ('state','global_step','device','dtype','reason','world_size')})"
ls /tmp/z3/final /tmp/z3/checkpoints/* 2>&1 | head -20
f=$(ls /tmp/z3/jobs/*_log.err 2>/dev/null | head -1); [ -n "$f" ] && grep -i -E "error|nccl|deepspeed|zero|Traceback" $f | grep -v "it/s" | tail -25
cp /tmp/z3.log /tmp/z3/status.json $OUT/ 2>/dev/null; [ -n "$f" ] && cp $f $OUT/z3.err; cp /tmp/sft1/status.json $OUT/sft1-status.json; true
