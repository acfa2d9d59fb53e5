#!/bin/bash
# Table 4 on English at the Table 5 budget (7500 x 64 x 64 tokens): "all" is objective-en's sop variant (the same
# model, data and seed; linked), the others train after the objective study's English chain has finished.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
while pgrep -f "run_objective.sh en" > /dev/null; do sleep 60; done
for v in none attention ffn; do
  nice -n 5 albertlm ablate --study sharing --corpus /work/runs19/corpus-en --out /work/runs19/sharing-en --steps 7500 --lr 2e-3 \
    --global-batch-size 64 --micro-batch-size 64 --max-seq-length 64 --set hidden_size=128 --set num_attention_heads=2 \
    --set intermediate_size=512 --finetune-data /work/shared/data/glue_sst2 --finetune-steps 300 --finetune-lr 3e-4 \
    --finetune-limit-train 8000 --variants $v || exit 1
done
