#!/bin/bash
# Table 5 at ~30M tokens per variant: 7500 LAMB steps x 64 x 64 tokens. $1 = en|zh
lang=$1; corpus=$2; shift 2
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
for v in sop nsp none; do
  nice -n 5 albertlm ablate --study objective --corpus $corpus --out /work/runs19/objective-$lang --steps 7500 --lr 2e-3 \
    --global-batch-size 64 --micro-batch-size 64 --max-seq-length 64 --set hidden_size=128 --set num_attention_heads=2 \
    --set intermediate_size=512 "$@" --finetune-steps 300 --finetune-lr 3e-4 --finetune-limit-train 8000 --variants $v || exit 1
done
