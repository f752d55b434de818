// Greedy continuation of a prompt by llama.cpp (node-llama-cpp's prebuilt
// binaries, CPU), compared with meshtrain's. Usage:
//   node llama_cpp_greedy.mjs NODE_PREFIX MODEL.gguf PROMPT TOKENS EXPECTED TOLERANCE
// NODE_PREFIX holds node_modules/node-llama-cpp; EXPECTED is meshtrain's
// continuation (the text after PROMPT); TOLERANCE the probability gap under
// which llama.cpp may pick another top-1 token than meshtrain (0: never).
// Prints one JSON line; exits 0 when the texts agree within the tolerance.
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const [prefix, modelPath, prompt, tokensArg, expected, toleranceArg] = process.argv.slice(2);
const nTokens = Number(tokensArg), tolerance = Number(toleranceArg);
const { getLlama, LlamaLogLevel } = await import(
  pathToFileURL(join(prefix, "node_modules", "node-llama-cpp", "dist", "index.js")).href);

const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath });
const context = await model.createContext({ contextSize: 256, threads: 1 });
const sequence = context.getSequence();

// BOS, then the prompt's tokens: how meshtrain generate starts.
const input = [model.tokens.bos, ...model.tokenize(prompt, false)];
const generated = [];
const steps = [];  // per new token: the text so far and llama.cpp's top-2 probabilities
for await (const out of sequence.evaluateWithMetadata(input, { probabilities: true }, { temperature: 0 })) {
  const probs = [...out.probabilities.entries()].sort((a, b) => b[1] - a[1]);
  const top1 = probs[0][1], top2 = probs.length > 1 ? probs[1][1] : 0;
  if (out.token === model.tokens.eos) break;
  generated.push(out.token);
  steps.push({ text: model.detokenize(generated, false), margin: top1 - top2 });
  if (generated.length >= nTokens) break;
}
const text = model.detokenize(generated, false);

// The first step whose text leaves meshtrain's: allowed only where
// llama.cpp's own top-1 margin is within the tolerance (a near tie).
let verdict = { agree: text === expected };
if (!verdict.agree) {
  const at = steps.findIndex((s) => !expected.startsWith(s.text));
  const margin = at >= 0 ? steps[at].margin : null;
  verdict = { agree: at > 0 || at === 0 ? margin !== null && margin <= tolerance : false, diverged_at: at, margin };
  if (at < 0) verdict.reason = "llama.cpp stopped early (EOS) or generated fewer tokens";
}
console.log(JSON.stringify({ model: modelPath, prompt, expected, got: text, tokens: generated.length,
                             min_margin: Math.min(...steps.map((s) => s.margin)), ...verdict }));
await context.dispose();
await model.dispose();
process.exit(verdict.agree ? 0 : 1);
