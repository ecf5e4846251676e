// The official MCP TypeScript SDK against gatewayd's /mcp: connect, list, call, and a refused call.
// Usage: node client.mjs URL KEY; prints one JSON document.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, key] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${key}` } },
});
const client = new Client({ name: "gatewayd-test", version: "1.0.0" });
await client.connect(transport);
const tools = (await client.listTools()).tools.map((t) => t.name).sort();
const sum = await client.callTool({ name: "local__add", arguments: { a: 2, b: 3 } });
let refused = null;
try {
  await client.callTool({ name: "local__shout", arguments: { text: "x" } });
} catch (e) {
  refused = { code: e.code, message: e.message };
}
const report = {
  server: client.getServerVersion(),
  protocolVersion: transport.protocolVersion,
  tools,
  sum: sum.structuredContent,
  refused,
};
await transport.terminateSession();
await client.close();
console.log(JSON.stringify(report));
