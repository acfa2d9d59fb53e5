#!/usr/bin/env bash
# Pretrained vs random init, session 2: the longer-pretrained encoders, 3 seeds each, two fine-tunings
# at a time with one thread each. Run from the repository root after the pretraining of
# docs/results/pretrain/README.md (session 2). Writes runs/ft2/<name>/, copies each metrics JSON here.
set -euo pipefail
HERE=docs/results/finetune/pretrained_vs_random
jobs() {
    for seed in 0 1 2; do
        echo "sst2-pretrained-s$seed --task sst2 --data ../shared/data/glue_sst2 --model runs/en/pretrain3/final --max-steps 600 --max-seq-length 64 --seed $seed"
        echo "sst2-random-s$seed --task sst2 --data ../shared/data/glue_sst2 --model albert-tiny --tokenizer runs/en/tok --max-steps 600 --max-seq-length 64 --seed $seed"
    done
    for seed in 0 1 2; do
        echo "chnsenti-pretrained-s$seed --task chnsenticorp --data ../shared/data/chnsenticorp --model runs/zh/pretrain2/final --max-steps 500 --max-seq-length 128 --seed $seed"
        echo "chnsenti-random-s$seed --task chnsenticorp --data ../shared/data/chnsenticorp --model albert-zh-tiny --tokenizer runs/zh/tok --max-steps 500 --max-seq-length 128 --seed $seed"
    done
}
one() {  # name, then finetune arguments (same batch, lr and warmup for every run)
    local name=$1; shift
    [ -f runs/ft2/$name/metrics.json ] || OMP_NUM_THREADS=1 albertlm finetune "$@" --out runs/ft2/$name \
        --batch-size 32 --lr 3e-4 --warmup 0.1 --quiet > runs/ft2-$name.log 2>&1
    cp runs/ft2/$name/metrics.json $HERE/s2-$name.json
    echo "done $name"
}
export -f one
export HERE
mkdir -p runs/ft2
jobs | xargs -P 2 -I{} bash -c 'one {}'
echo "wrote $HERE/s2-*.json"
