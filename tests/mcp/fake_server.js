// A deliberately odd MCP server for the tests (newline-delimited JSON-RPC
// on stdio, the legacy `initialize` hand-shake only: `server/discover` is
// answered "method not found", as a pre-2026 server does).
//   node fake_server.js hang            never answers anything
//   node fake_server.js garbage         writes lines that are not JSON
//   node fake_server.js big             tool `blob` returns 5 MiB of text
//   node fake_server.js slow LOG        tool `wait` never answers; tool
//                                       `grow` adds tool `grown` and says
//                                       its list changed; every message
//                                       received is appended to LOG
const fs = require("fs");
const [mode, log] = process.argv.slice(2);
if (mode === "hang") {
  setInterval(() => {}, 1000);
  return;
}
if (mode === "garbage") {
  process.stdout.write("this is not JSON\n{\"jsonrpc\": \"2.0\", \"id\": \n");
  setInterval(() => process.stdout.write("<<garbage>>\n"), 200);
  return;
}
const send = (m) => process.stdout.write(JSON.stringify(m) + "\n");
const schema = { type: "object" };
const tools = mode === "big"
  ? [{ name: "blob", description: "Five MiB of text", inputSchema: schema }]
  : [
      { name: "wait", description: "Never finishes", inputSchema: schema },
      { name: "grow", description: "Adds a tool", inputSchema: schema },
    ];
let buffer = "";
process.stdin.on("data", (chunk) => {
  buffer += chunk;
  let at;
  while ((at = buffer.indexOf("\n")) >= 0) {
    const line = buffer.slice(0, at);
    buffer = buffer.slice(at + 1);
    if (!line.trim()) continue;
    const m = JSON.parse(line);
    if (log) fs.appendFileSync(log, line + "\n");
    if (m.id === undefined) continue;
    if (m.method === "initialize") {
      send({ jsonrpc: "2.0", id: m.id, result: {
        protocolVersion: m.params.protocolVersion,
        capabilities: { tools: { listChanged: true } },
        serverInfo: { name: "fake", version: "1.0.0" },
      } });
    } else if (m.method === "tools/list") {
      send({ jsonrpc: "2.0", id: m.id, result: { tools } });
    } else if (m.method === "tools/call" && mode === "big") {
      const text = "x".repeat(5 * 1024 * 1024);
      send({ jsonrpc: "2.0", id: m.id, result: { content: [{ type: "text", text }] } });
    } else if (m.method === "tools/call" && m.params.name === "grow") {
      tools.push({ name: "grown", description: "Added by grow", inputSchema: schema });
      send({ jsonrpc: "2.0", id: m.id, result: { content: [{ type: "text", text: "grew" }] } });
      send({ jsonrpc: "2.0", method: "notifications/tools/list_changed" });
    } else if (m.method === "tools/call") {
      // never answered
    } else if (m.method === "ping") {
      send({ jsonrpc: "2.0", id: m.id, result: {} });
    } else {
      send({ jsonrpc: "2.0", id: m.id, error: { code: -32601, message: "Method not found" } });
    }
  }
});
