// openai (Node) chat streaming with tools: a turn that calls two tools in parallel, then a turn
// with their results. The SDK's stream helper assembles the tool calls from the deltas.
import OpenAI from "openai";
import { BASE_URL, API_KEY, MODEL, MARKER, report, run } from "./common.mjs";

const client = new OpenAI({ baseURL: `${BASE_URL}/v1`, apiKey: API_KEY, maxRetries: 0 });
const tools = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Weather for a city",
      parameters: {
        type: "object",
        properties: {
          city: { type: "string" },
          unit: { type: "string", enum: ["celsius", "fahrenheit"] },
          days: { type: "integer" },
        },
        required: ["city"],
      },
    },
  },
  {
    type: "function",
    function: {
      name: "lookup",
      parameters: { type: "object", properties: { query: { type: "string" }, exact: { type: "boolean" } } },
    },
  },
];

async function turn(messages) {
  const stream = client.chat.completions.stream({
    model: MODEL, messages, tools, stream_options: { include_usage: true },
  });
  let chunks = 0;
  const argumentsDone = [];
  stream.on("chunk", () => { chunks += 1; });
  stream.on("tool_calls.function.arguments.done", (event) => {
    argumentsDone.push({ name: event.name, arguments: event.arguments });
  });
  const completion = await stream.finalChatCompletion();
  const choice = completion.choices[0];
  return {
    id: completion.id,
    chunks,
    finish_reason: choice.finish_reason,
    content: choice.message.content,
    tool_calls: (choice.message.tool_calls ?? []).map((call) => ({
      id: call.id, type: call.type, name: call.function.name, arguments: call.function.arguments,
    })),
    arguments_done: argumentsDone,
    usage: completion.usage,
    message: choice.message,
  };
}

run(async () => {
  const messages = [{ role: "user", content: `What is the weather? [[sim:tools=2]] ${MARKER}` }];
  const first = await turn(messages);
  messages.push({ role: "assistant", content: first.message.content, tool_calls: first.message.tool_calls });
  for (const call of first.tool_calls) {
    messages.push({ role: "tool", tool_call_id: call.id, content: `result of ${call.name}` });
  }
  const second = await turn(messages);
  delete first.message;
  delete second.message;
  report({ first, second });
});
