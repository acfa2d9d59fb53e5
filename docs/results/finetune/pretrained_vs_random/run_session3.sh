#!/usr/bin/env bash
# Pretrained vs random init, session 3: the albert-tiny-shaped H=128 encoder pretrained on corpus/en
# past the unigram plateau (docs/results/pretrain/README.md, session 3), against the same architecture
# from random init. Same tokenizer, same fine-tuning (batch 32, 2,000 steps ~ 0.95 epoch of SST-2 train,
# 64 tokens, warmup 10%), three learning rates x five seeds for each init, two runs at a time with one
# thread each. Run from the repository root; writes runs/ft3/<name>/ and copies each metrics JSON here.
# STEPS=6000 LONG=1 runs the longer fine-tuning instead: each init at its best learning rate above, three
# seeds, files s3-sst2-*-6000steps-*.json.
set -euo pipefail
HERE=docs/results/finetune/pretrained_vs_random
PRETRAINED=${PRETRAINED:-runs/en/mini/final}
SET="--set hidden_size=128 --set num_attention_heads=4 --set intermediate_size=512"
STEPS=${STEPS:-2000}
jobs() {
    if [ -n "${LONG:-}" ]; then
        for seed in 0 1 2; do
            echo "s3-sst2-pretrained-lr5e-4-${STEPS}steps-s$seed --model $PRETRAINED --lr 5e-4 --seed $seed"
            echo "s3-sst2-random-lr1e-4-${STEPS}steps-s$seed --model albert-tiny $SET --lr 1e-4 --seed $seed"
        done
        return
    fi
    for lr in 1e-3 5e-4 1e-4; do
        for seed in 0 1 2 3 4; do
            echo "s3-sst2-pretrained-lr$lr-s$seed --model $PRETRAINED --lr $lr --seed $seed"
            echo "s3-sst2-random-lr$lr-s$seed --model albert-tiny $SET --lr $lr --seed $seed"
        done
    done
}
one() {  # name, then the arguments that differ between runs
    local name=$1; shift
    [ -f runs/ft3/$name/metrics.json ] || OMP_NUM_THREADS=1 albertlm finetune --task sst2 \
        --data ../shared/data/glue_sst2 --tokenizer runs/en/tok "$@" --out runs/ft3/$name \
        --max-steps $STEPS --batch-size 32 --warmup 0.1 --max-seq-length 64 --quiet > runs/ft3-$name.log 2>&1
    cp runs/ft3/$name/metrics.json $HERE/$name.json
    echo "done $name"
}
export -f one
export HERE STEPS
mkdir -p runs/ft3
jobs | xargs -P 2 -I{} bash -c 'one {}'
echo "wrote $HERE/s3-*.json"
