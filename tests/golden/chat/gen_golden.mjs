// Renders every chat-template fixture on every conversation of conversations.json with
// @huggingface/jinja (the engine transformers.js uses) and writes expected/<template>.json:
// {"template": name, "cases": {case: {"context": {...}, "text": "..."} or {"context": {...}, "error": "..."}}}.
// tests/test_chat_template.c renders the same contexts with distflow's engine and compares byte for byte.
// Usage (from this folder, after `npm ci`): DF_SHARED_DIR=../../../../shared node gen_golden.mjs
import { Template } from "@huggingface/jinja";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const fixtures = path.join(here, "..", "..", "fixtures", "chat_templates");
const shared = process.env.DF_SHARED_DIR || path.join(here, "..", "..", "..", "..", "shared");
const spec = JSON.parse(fs.readFileSync(path.join(here, "conversations.json"), "utf8"));
const outDir = path.join(here, "expected");
fs.mkdirSync(outDir, { recursive: true });

function templateText(t) {
  if (t.file) return fs.readFileSync(path.join(fixtures, t.file), "utf8");
  const cfg = JSON.parse(fs.readFileSync(path.join(shared, t.shared), "utf8"));
  return cfg.chat_template;
}

// The variables transformers' apply_chat_template passes: messages, tools (when given),
// add_generation_prompt, the special tokens, and the extra keyword arguments.
function contextFor(t, c) {
  const ctx = { messages: c.messages, add_generation_prompt: c.add_generation_prompt };
  if (c.tools) ctx.tools = spec.tools;
  if (t.bos_token !== undefined) ctx.bos_token = t.bos_token;
  if (t.eos_token !== undefined) ctx.eos_token = t.eos_token;
  if (c.enable_thinking !== undefined) ctx.enable_thinking = c.enable_thinking;
  Object.assign(ctx, spec.extra);
  return ctx;
}

for (const t of spec.templates) {
  const tmpl = new Template(templateText(t));
  const cases = {};
  for (const c of spec.cases) {
    if (c.only && !c.only.includes(t.name)) continue; // a case for some templates' features only
    const context = contextFor(t, c);
    try {
      cases[c.name] = { context, text: tmpl.render(structuredClone(context)) };
    } catch (err) {
      cases[c.name] = { context, error: String(err.message) };
    }
  }
  const file = path.join(outDir, `${t.name}.json`);
  fs.writeFileSync(file, JSON.stringify({ template: t.name, source: t.file || `$DF_SHARED_DIR/${t.shared}`, cases }, null, 1) + "\n");
  const n = Object.values(cases).filter((x) => x.error === undefined).length;
  console.log(`${file}: ${n} rendered, ${Object.keys(cases).length - n} errors`);
}
