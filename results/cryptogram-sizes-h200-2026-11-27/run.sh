#!/usr/bin/env bash
# Device call 3 (issue 20, "the largest version the tiny model learns"): the cryptogram's SFT row as
# the experiment runs it (tiny-qwen2.5-vl-studies, 600 steps at 2e-3 in curriculum order, float32)
# on four data settings side by side on the GPU, each evaluated on its 200 test messages:
# A the spec's (abcde, 1-2 words of 2-3 letters), B abcdef, C 1-3 words, D words of 2-4 letters.
set -u
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
R=$PWD
STEPS=${STEPS:-600}; LIMIT=${LIMIT:-}
if [ -z "${LOCAL:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
  export PYTHONPATH=/tmp/site:$R/src
  PY=python3; GPU="--gpus 1"
else
  PY=$R/.venv/bin/python; GPU="--gpus 0"
fi
O=${O:-/tmp/larger}; mkdir -p $O
CG=${CG:-/tmp/cg}
for spec in A:abcde:1,2:2,3 B:abcdef:1,2:2,3 C:abcde:1,2,3:2,3 D:abcde:1,2:2,4; do  # the same seed, sizes, drawing
  IFS=: read n a wc wl <<< "$spec"
  [ -d $CG/$n ] || $PY -m vqa_r1 data cryptogram --out $CG/$n --train 400 --validation 40 --test 200 --seed 0 --alphabet $a \
    --word-counts $wc --word-lengths $wl --words letters --image-size 112 --order curriculum --layout table --worked-steps --letter-colours | tail -1
done
for n in ${CONFIGS:-A B C D}; do
  (
    cd /tmp
    $PY $R/slurm/launch.py sft --model tiny-qwen2.5-vl-studies $GPU --executor local --dataset $CG/$n --output-dir $O/sft-$n \
      --set train.max_steps=$STEPS --set train.learning_rate=2.0e-3 --set train.save_steps=300 --set train.train_sampling_strategy=sequential > $O/$n.log 2>&1
    $PY $R/slurm/launch.py evaluate --model tiny-qwen2.5-vl-studies $GPU --executor local --dataset $CG/$n --adapter $O/sft-$n --output-dir $O/eval-$n \
      --set eval.max_new_tokens=256 ${LIMIT:+--set eval.limit=$LIMIT} >> $O/$n.log 2>&1
    echo "$n rc=$?" >> $O/$n.log
  ) &
done
wait
for n in ${CONFIGS:-A B C D}; do grep -E "finished|rc=|error" $O/$n.log | tail -3; done
$PY - "$O" <<'PY'
import json, pathlib, sys
o = pathlib.Path(sys.argv[1])
for e in sorted(o.glob("eval-*")):
    s = json.loads((e / "scores.json").read_text())
    t = json.loads((o / ("sft-" + e.name[5:]) / "status.json").read_text())
    keep = {k: s.get(k) for k in ("n", "accuracy", "char_accuracy", "accuracy_with_chars", "format_rate", "truncated", "device")}
    print(e.name, keep, {k: v.get("accuracy") if isinstance(v, dict) else v for k, v in (s.get("per_relation") or {}).items()}, "sft", t.get("state"), t.get("device"), t.get("train_seconds_last_start"))
PY
