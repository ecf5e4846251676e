// openai (Node) responses streaming: reasoning, a function tool, the SDK's ordering checks
// (created first, item added before its content, matching ids at .done, completed last).
import OpenAI from "openai";
import { BASE_URL, API_KEY, MODEL, MARKER, report, run } from "./common.mjs";

const client = new OpenAI({ baseURL: `${BASE_URL}/v1`, apiKey: API_KEY, maxRetries: 0 });
const tools = [
  {
    type: "function",
    name: "search_docs",
    description: "Search the documentation",
    parameters: {
      type: "object",
      properties: { query: { type: "string" }, limit: { type: "integer" } },
      required: ["query", "limit"],
      additionalProperties: false,
    },
    strict: true,
  },
];

async function turn(input) {
  const stream = client.responses.stream({
    model: MODEL, input, tools, reasoning: { effort: "low" }, instructions: "Be brief.",
  });
  const events = [];
  let text = "";
  stream.on("event", (event) => { events.push(event.type); });
  stream.on("response.output_text.delta", (event) => { text += event.delta; });
  const response = await stream.finalResponse();
  return {
    id: response.id,
    status: response.status,
    events,
    streamed_text: text,
    output_text: response.output_text,
    output_types: response.output.map((item) => item.type),
    function_calls: response.output.filter((item) => item.type === "function_call")
      .map((item) => ({ name: item.name, arguments: item.arguments, call_id: item.call_id })),
    usage: response.usage,
    output: response.output,
  };
}

run(async () => {
  const input = [{ role: "user", content: `Find the install guide [[sim:tools]] ${MARKER}` }];
  const first = await turn(input);
  const call = first.output.find((item) => item.type === "function_call");
  const next = [
    ...input,
    { type: "function_call", call_id: call.call_id, name: call.name, arguments: call.arguments },
    { type: "function_call_output", call_id: call.call_id, output: "docs/install.md" },
  ];
  const second = await turn(next);
  delete first.output;
  delete second.output;
  report({ first, second });
});
