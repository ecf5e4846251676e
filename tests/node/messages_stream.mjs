// @anthropic-ai/sdk (Node) messages streaming with thinking and tools: a turn that thinks and
// calls a tool, then a turn that sends the thinking block (with its signature), the tool_use
// and the tool_result back, as agents do.
import Anthropic from "@anthropic-ai/sdk";
import { BASE_URL, API_KEY, MODEL, MARKER, report, run } from "./common.mjs";

const client = new Anthropic({ baseURL: BASE_URL, apiKey: API_KEY, maxRetries: 0 });
const tools = [
  {
    name: "read_file",
    description: "Read a file",
    input_schema: {
      type: "object",
      properties: { path: { type: "string" }, max_lines: { type: "integer" }, binary: { type: "boolean" } },
      required: ["path"],
    },
  },
];

async function turn(messages) {
  const stream = client.messages.stream({
    model: MODEL, max_tokens: 4096, thinking: { type: "enabled", budget_tokens: 1024 },
    system: "You read files.", tools, messages,
  });
  const events = [];
  let thinking = "";
  stream.on("streamEvent", (event) => { events.push(event.type); });
  stream.on("thinking", (delta) => { thinking += delta; });
  const message = await stream.finalMessage();
  return {
    id: message.id,
    events,
    streamed_thinking: thinking,
    stop_reason: message.stop_reason,
    content: message.content,
    usage: message.usage,
  };
}

run(async () => {
  const messages = [{ role: "user", content: `Show me the README [[sim:thinking]] ${MARKER}` }];
  const first = await turn(messages);
  const toolUse = first.content.find((block) => block.type === "tool_use");
  messages.push({ role: "assistant", content: first.content });
  messages.push({
    role: "user",
    content: [{ type: "tool_result", tool_use_id: toolUse.id, content: [{ type: "text", text: "# gatewayd" }] }],
  });
  const second = await turn(messages);
  report({ first, second });
});
