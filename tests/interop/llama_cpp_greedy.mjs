// Greedy continuations by llama.cpp (node-llama-cpp's prebuilt CPU
// binaries) compared with meshtrain's. Usage:
//   node llama_cpp_greedy.mjs NODE_PREFIX CASES.json
// NODE_PREFIX holds node_modules/node-llama-cpp. CASES is a list of
// {model, prompt, tokens, expected_file, tolerance}: the file holds
// meshtrain's continuation (the text after the prompt, from BOS + prompt);
// `tolerance` is the llama.cpp top-1 probability margin at or under which it may pick
// another token than meshtrain (0: never), after which the text is not
// compared further (docs/checkpoints.md, "GGUF"). Prints one JSON line per
// case; exits 1 when any case disagrees.
import { pathToFileURL } from "node:url";
import { join } from "node:path";
import { readFileSync } from "node:fs";

const [prefix, casesPath] = process.argv.slice(2);
const cases = JSON.parse(readFileSync(casesPath, "utf8"));
const { getLlama, LlamaLogLevel } = await import(
  pathToFileURL(join(prefix, "node_modules", "node-llama-cpp", "dist", "index.js")).href);
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });

async function greedy(model, prompt, nTokens) {
  const context = await model.createContext({ contextSize: 256, threads: 1 });
  const sequence = context.getSequence();
  const input = [model.tokens.bos, ...model.tokenize(prompt, false)];
  const generated = [], steps = [];
  for await (const out of sequence.evaluateWithMetadata(input, { probabilities: true }, { temperature: 0 })) {
    if (out.token === model.tokens.eos) break;
    const p = [...out.probabilities.values()].sort((a, b) => b - a);
    generated.push(out.token);
    steps.push({ text: model.detokenize(generated, false), margin: p[0] - (p.length > 1 ? p[1] : 0) });
    if (generated.length >= nTokens) break;
  }
  await context.dispose();
  return { text: model.detokenize(generated, false), steps };
}

let failed = 0;
const models = new Map();
for (const c of cases) {
  c.expected = readFileSync(c.expected_file, "utf8");
  if (!models.has(c.model)) models.set(c.model, await llama.loadModel({ modelPath: c.model }));
  const { text, steps } = await greedy(models.get(c.model), c.prompt, c.tokens);
  const r = { model: c.model, prompt: c.prompt, expected: c.expected, got: text, tokens: steps.length,
              min_margin: Math.min(...steps.map((s) => s.margin)), agree: text === c.expected };
  if (!r.agree) {
    // The first step whose text leaves meshtrain's, and llama.cpp's margin there.
    r.diverged_at = steps.findIndex((s) => !c.expected.startsWith(s.text));
    r.margin = r.diverged_at >= 0 ? steps[r.diverged_at].margin : null;
    r.agree = r.margin !== null && r.margin <= c.tolerance;
    if (r.diverged_at < 0) r.reason = "llama.cpp stopped (EOS) before meshtrain did";
  }
  if (!r.agree) ++failed;
  console.log(JSON.stringify(r));
}
for (const m of models.values()) await m.dispose();
console.log(`llama.cpp agrees with meshtrain on ${cases.length - failed} of ${cases.length} continuations`);
process.exit(failed ? 1 : 0);
