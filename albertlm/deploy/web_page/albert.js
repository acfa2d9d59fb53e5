// albertlm in the browser: the page's model, written by `albertlm export --format web`.
//
// deploy.json's "web" section says everything this file needs (the graphs, the tokenizer, the labels, the
// sequence length, the exit rule), as `albertlm predict` resolved it at export time, so the page decides
// nothing of its own. The exit loop below is albertlm.deploy.early_exit.run for one input: the embedding
// graph, then the shared layer graph step by step, each step's exit head read by the rule.
import * as ort from "onnxruntime-web";
import { Tokenizer } from "@huggingface/tokenizers";

const UNDERLINE = "\u2581";
const DIGIT = /\p{Nd}/u;

export async function load(base = ".", { wasmPaths } = {}) {
  const get = async (name) => {
    const res = await fetch(`${base}/${name}`);
    if (!res.ok) throw new Error(`${name}: HTTP ${res.status}`);
    return res;
  };
  const deploy = await (await get("deploy.json")).json();
  const web = deploy.web;
  if (!web) throw new Error("deploy.json has no web section: export with `albertlm export --format web`");
  if (wasmPaths) ort.env.wasm.wasmPaths = wasmPaths;
  ort.env.wasm.numThreads = 1; // threads need cross-origin isolation, which a plain static server does not give
  const tok = new Tokenizer(
    await (await get(web.tokenizer.file)).json(),
    await (await get(web.tokenizer.config)).json(),
  );
  const open = async (name) => ort.InferenceSession.create(await (await get(name)).arrayBuffer());
  const graphs = web.exit
    ? { embed: await open(web.exit.embed), layers: await Promise.all(web.exit.layers.map(open)) }
    : { full: await open(web.graph) };
  return new Model(web, tok, graphs);
}

class Model {
  constructor(web, tok, graphs) {
    Object.assign(this, { web, tok, graphs });
    this.comma = tok.token_to_id(",");
  }

  // Text -> ids without [CLS]/[SEP], exactly as albertlm's tokenizer gives them (tokenizer.encode_batch).
  pieces(text) {
    const e = this.tok.encode(text, { add_special_tokens: false });
    if (!this.web.tokenizer.digit_comma) return e.ids;
    // the original's encode_pieces: a piece ending in <digit>, is encoded again without its "▁", comma apart
    const ids = [];
    e.tokens.forEach((p, i) => {
      if (p.length > 1 && p.endsWith(",") && DIGIT.test(p.at(-2))) {
        const again = this.tok.encode(p.slice(0, -1).replaceAll(UNDERLINE, ""), { add_special_tokens: false });
        ids.push(...again.ids, this.comma);
      } else ids.push(e.ids[i]);
    });
    return ids;
  }

  // [CLS] a [SEP] or [CLS] a [SEP] b [SEP], the pair cut longest-first (albertlm.tasks.features.encode_text).
  encode(text, pair) {
    const { cls_id: cls, sep_id: sep } = this.web.tokenizer;
    const max = this.web.max_seq_length;
    let a = this.pieces(text);
    if (pair === undefined || pair === null) {
      const ids = [cls, ...a.slice(0, Math.max(max - 2, 0)), sep];
      return { ids, types: ids.map(() => 0) };
    }
    let b = this.pieces(pair);
    a = [...a];
    b = [...b];
    while (a.length + b.length > Math.max(max - 3, 0)) (a.length > b.length ? a : b).pop();
    const ids = [cls, ...a, sep, ...b, sep];
    return { ids, types: [...a.map(() => 0), 0, 0, ...b.map(() => 1), 1] };
  }

  async predict(text, pair) {
    const { ids, types } = this.encode(text, pair);
    const n = ids.length;
    const t = (values) => new ort.Tensor("int64", BigInt64Array.from(values, BigInt), [1, n]);
    const feeds = { input_ids: t(ids), attention_mask: t(ids.map(() => 1)), token_type_ids: t(types) };
    let logits, layer;
    if (this.graphs.full) {
      const out = await run(this.graphs.full, feeds);
      logits = Array.from(out.logits.data);
      layer = this.web.num_layers;
    } else {
      [logits, layer] = await this.exitLoop(feeds);
    }
    return this.answer(logits, layer);
  }

  async exitLoop(feeds) {
    const { rule, group_of_layer: groups } = this.web.exit;
    const regression = this.web.kind === "regression";
    const last = rule && rule.exit_max_layers != null ? Math.min(rule.exit_max_layers, groups.length) : groups.length;
    let hidden = (await run(this.graphs.embed, feeds)).hidden;
    let prev = null;
    let streak = 0;
    for (let layer = 0; layer < last; layer++) {
      const graph = this.graphs.layers[groups[layer]];
      const out = await graph.run({
        hidden,
        attention_mask: feeds.attention_mask,
        layer: new ort.Tensor("int64", BigInt64Array.from([BigInt(layer)]), []),
      });
      hidden = out.hidden_out;
      const logits = Array.from(out.logits.data);
      // early_exit._agreement and _stops for one row
      const now = regression ? logits[0] : argmax(logits);
      const same = prev !== null && (regression ? Math.abs(now - prev) < rule.exit_delta : now === prev);
      streak = same && layer > 0 ? streak + 1 : 0;
      prev = now;
      let stop = layer + 1 >= last;
      if (rule && rule.exit_patience) stop ||= streak >= rule.exit_patience;
      if (rule && !regression && (rule.exit_confidence != null || rule.exit_entropy != null)) {
        const p = softmax(logits);
        if (rule.exit_confidence != null) stop ||= Math.max(...p) >= rule.exit_confidence;
        if (rule.exit_entropy != null && p.length > 1) {
          const h = -p.reduce((s, q) => s + q * Math.log(Math.min(Math.max(q, 1e-12), 1)), 0) / Math.log(p.length);
          stop ||= h <= rule.exit_entropy;
        }
      }
      if (stop) return [logits, layer + 1];
    }
    throw new Error("no layer ran"); // unreachable: the last layer always stops
  }

  // albertlm's answer row (kinds.Classification.row / Regression.row) and the computed layer it left at
  answer(logits, layer) {
    if (this.web.kind === "regression") return { value: logits[0], layer };
    const p = softmax(logits);
    const k = argmax(logits);
    const probabilities = Object.fromEntries(this.web.labels.map((label, i) => [label, p[i]]));
    return { label: this.web.labels[k], score: p[k], probabilities, layer };
  }
}

// the feeds a graph takes (the exporter drops an input a graph does not use, e.g. the embedding's mask)
function run(session, feeds) {
  return session.run(Object.fromEntries(session.inputNames.map((name) => [name, feeds[name]])));
}

function argmax(xs) {
  let k = 0;
  for (let i = 1; i < xs.length; i++) if (xs[i] > xs[k]) k = i;
  return k;
}

function softmax(xs) {
  const m = Math.max(...xs);
  const e = xs.map((x) => Math.exp(x - m));
  const s = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / s);
}
