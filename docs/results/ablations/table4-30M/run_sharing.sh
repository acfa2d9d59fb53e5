#!/bin/bash
# Table 4 on English at the Table 5 budget (7500 x 64 x 64 tokens). "all" is objective-en's sop variant (the
# same model, data and seed), linked as sharing-en/all (and sharing-en/data -> objective-en/data). The three
# other variants run side by side, one thread each; each resumes from its own checkpoints when re-run.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
for v in none attention ffn; do
  nice -n 5 albertlm ablate --study sharing --corpus /work/runs19/corpus-en --out /work/runs19/sharing-en --steps 7500 --lr 2e-3 \
    --global-batch-size 64 --micro-batch-size 64 --max-seq-length 64 --set hidden_size=128 --set num_attention_heads=2 \
    --set intermediate_size=512 --finetune-data /work/shared/data/glue_sst2 --finetune-steps 300 --finetune-lr 3e-4 \
    --finetune-limit-train 8000 --variants $v > sharing-en-$v.log 2>&1 &
done
wait
# gather: the same command with --report-only (no --variants)
