// openai (Node) embeddings with the SDK's default: it asks for base64 and decodes float32s.
import OpenAI from "openai";
import { BASE_URL, API_KEY, MODEL, MARKER, report, run } from "./common.mjs";

const client = new OpenAI({ baseURL: `${BASE_URL}/v1`, apiKey: API_KEY, maxRetries: 0 });

run(async () => {
  const input = [`first text ${MARKER}`, "second, a bit longer text"];
  const result = await client.embeddings.create({ model: MODEL, input });
  report({
    input,
    model: result.model,
    object: result.object,
    data: result.data.map((item) => ({ index: item.index, embedding: Array.from(item.embedding) })),
    usage: result.usage,
  });
});
