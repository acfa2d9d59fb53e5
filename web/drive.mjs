// Drive an exported albertlm page in headless Chromium (Debian's, never a downloaded build): open URL, wait
// for the model, answer every input of INPUTS.json ([[text, pair-or-null], ...]) and print as JSON the rows,
// each answer's milliseconds and the ids the page gave the model.
//   node web/drive.mjs http://127.0.0.1:8000/index.html inputs.json
import fs from "node:fs";
import { chromium } from "playwright-core";

const [url, inputsFile] = process.argv.slice(2);
if (!url || !inputsFile) {
  console.error("usage: node web/drive.mjs URL INPUTS.json");
  process.exit(2);
}
const inputs = JSON.parse(fs.readFileSync(inputsFile, "utf-8"));
const browser = await chromium.launch({
  executablePath: process.env.ALBERTLM_CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-background-networking", "--disable-component-update",
         "--disable-sync"],
});
try {
  const page = await browser.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  await page.goto(url);
  await page.waitForFunction(() => window.albert !== undefined);
  const started = Date.now();
  await page.evaluate(() => window.albert.ready);
  const loadMs = Date.now() - started;
  const { rows, ms, ids } = await page.evaluate(async (inputs) => {
    const rows = [], ms = [], ids = [];
    for (const [text, pair] of inputs) {
      const t0 = performance.now();
      rows.push(await window.albert.predict(text, pair ?? undefined));
      ms.push(performance.now() - t0);
      ids.push(await window.albert.encode(text, pair ?? undefined));
    }
    return { rows, ms, ids };
  }, inputs);
  console.log(JSON.stringify({ rows, ms, ids, load_ms: loadMs, errors }));
} finally {
  await browser.close();
}
