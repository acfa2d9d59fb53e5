"""Re-save shared benchmark files as a user's own data would look, for the generic-task proof runs:

    python docs/results/generic/make_files.py /work/shared/data runs/userdata

- sst2_train.csv / sst2_dev.csv: SST-2 train / dev as CSV (columns review, sentiment), labels "negative" /
  "positive" instead of 0 / 1, quoted by the csv module where a sentence holds a comma or a quote;
- chnsenticorp_train.jsonl / chnsenticorp_dev.jsonl: ChnSentiCorp as JSON lines ({"评论": ..., "情感": ...})
  with the label names "负面" / "正面".
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path


def tsv(path: Path) -> list[dict[str, str]]:
    lines = path.read_text(encoding="utf-8").rstrip("\n").split("\n")
    header = lines[0].split("\t")
    return [dict(zip(header, line.split("\t"), strict=True)) for line in lines[1:]]


def main(src: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    en = {"0": "negative", "1": "positive"}
    for split, name in (("train", "train_full.tsv"), ("dev", "dev.tsv")):
        with open(out / f"sst2_{split}.csv", "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["review", "sentiment"])
            w.writerows([r["sentence"].strip(), en[r["label"]]] for r in tsv(src / "glue_sst2" / name))
    zh = {"0": "负面", "1": "正面"}
    for split in ("train", "dev"):
        rows = tsv(src / "chnsenticorp" / f"{split}.tsv")
        objs = [{"评论": r["text_a"], "情感": zh[r["label"]]} for r in rows]
        text = "".join(json.dumps(o, ensure_ascii=False) + "\n" for o in objs)
        (out / f"chnsenticorp_{split}.jsonl").write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
