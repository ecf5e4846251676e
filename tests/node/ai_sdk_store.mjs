// The Vercel AI SDK (`ai` + `@ai-sdk/openai`, the Responses API): a two-turn conversation, the
// second turn carrying the first's response messages, as an app keeps its history. With the
// SDK's default (`store` on) the earlier answer goes back as an `item_reference`, which gatewayd
// refuses saying what to change; with `providerOptions: { openai: { store: false } }` it goes back
// as the item itself (docs/responses.md).
import { generateText } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { BASE_URL, API_KEY, MODEL, MARKER, report, run } from "./common.mjs";

const openai = createOpenAI({ baseURL: `${BASE_URL}/v1`, apiKey: API_KEY });
const model = openai.responses(MODEL);

async function conversation(label, providerOptions) {
  const question = { role: "user", content: `first ${label} ${MARKER} [[sim:words=4]]` };
  const first = await generateText({ model, messages: [question], providerOptions, maxRetries: 0 });
  const messages = [question, ...first.response.messages,
                    { role: "user", content: `second ${label} ${MARKER} [[sim:words=3]]` }];
  const out = { first: { text: first.text, usage: first.usage } };
  try {
    const second = await generateText({ model, messages, providerOptions, maxRetries: 0 });
    out.second = { text: second.text, usage: second.usage };
  } catch (error) {
    out.error = { status: error.statusCode ?? null, message: String(error.message), body: error.responseBody ?? null };
  }
  return out;
}

run(async () => {
  report({
    stored_default: await conversation("stored", undefined),
    unstored: await conversation("unstored", { openai: { store: false } }),
  });
});
